//! Recording of hooked calls (`ROCMGUARD_TRACE`) in the core's trace format (RMM's allocation
//! log CSV), which `rocmguard replay` reads. Rows are written under a lock into a buffered file,
//! flushed when the process ends. `%p` in the path becomes the process id. This build writes no
//! gzip: a path ending in `.gz` is written without that suffix, plain, and the log says so.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use rocmguard_core::trace::{self, Action, Event};

use crate::{log, win};

struct Recorder {
    out: BufWriter<File>,
    start: Instant,
    row: String,
}

enum State {
    Unopened,
    Off,
    On(Recorder),
}

static STATE: Mutex<State> = Mutex::new(State::Unopened);
/// Set once recording is known to be off, so hooks then skip the lock.
static OFF: AtomicBool = AtomicBool::new(false);

fn open() -> State {
    let path = match crate::config().and_then(|c| c.trace.clone()) {
        Some(p) => p,
        None => return State::Off,
    };
    // SAFETY: no arguments.
    let mut path = path.replace("%p", &unsafe { win::GetCurrentProcessId() }.to_string());
    if path.ends_with(".gz") {
        path.truncate(path.len() - 3);
        log::warn(format_args!(
            "the Windows build writes traces without compression: recording to {}",
            path
        ));
    }
    match File::create(&path) {
        Ok(f) => {
            let mut row = String::new();
            trace::write_header(&mut row);
            let mut out = BufWriter::new(f);
            let _ = out.write_all(row.as_bytes());
            log::info(format_args!("recording hooked calls to {}", path));
            State::On(Recorder {
                out,
                start: Instant::now(),
                row,
            })
        }
        Err(e) => {
            log::warn(format_args!("cannot record the trace to {}: {}", path, e));
            State::Off
        }
    }
}

fn record(action: Action, device: i32, addr: u64, size: u64) {
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let State::Unopened = *state {
        *state = open();
        OFF.store(matches!(*state, State::Off), Ordering::Relaxed);
    }
    if let State::On(r) = &mut *state {
        r.row.clear();
        let event = Event {
            // SAFETY: no arguments.
            thread: unsafe { win::GetCurrentThreadId() } as u64,
            time_us: r.start.elapsed().as_micros() as u64,
            device,
            ..Event::new(action, addr, size)
        };
        trace::write_event(&event, &mut r.row);
        let _ = r.out.write_all(r.row.as_bytes());
    }
}

pub fn alloc(device: i32, addr: u64, size: u64) {
    record(Action::Allocate, device, addr, size);
}

pub fn free(device: i32, addr: u64, size: u64) {
    record(Action::Free, device, addr, size);
}

/// One of the shim's own events: out-of-memory, retry, trim, cap warning.
pub fn event(action: Action, device: i32, addr: u64, size: u64) {
    record(action, device, addr, size);
}

/// Writes out what is buffered; at process exit, skipped if a thread that is gone holds the lock.
pub fn flush_at_exit() {
    if let Ok(mut state) = STATE.try_lock() {
        if let State::On(r) = &mut *state {
            let _ = r.out.flush();
        }
    }
}
