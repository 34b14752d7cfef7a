//! Recording of hooked calls (`ROCMGUARD_TRACE=path`, `%p` = pid; `.gz` compresses where the
//! build has gzip, Linux's) in the format of `rocmguard_core::trace`.
//!
//! The allocation path only appends a fixed-size record to its thread's own buffer (an
//! uncontended lock and no system call); a writer thread swaps the buffers out every 50 ms and
//! formats and writes them. Buffers are bounded: when the writer falls behind, events are
//! dropped and counted, never waited for. At exit and on SIGTERM the rest is written, so a
//! crash loses at most the last 50 ms.

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use once_cell::sync::OnceCell;
use rocmguard_core::trace::{write_event, write_header, Action, Event};

/// Records kept per thread between two passes of the writer.
const THREAD_CAPACITY: usize = 1 << 16;
const WRITER_PERIOD: Duration = Duration::from_millis(50);

#[derive(Clone, Copy)]
struct Record {
    time_us: u64,
    action: Action,
    pointer: u64,
    size: u64,
    device: i32,
}

struct ThreadBuffer {
    thread: u64,
    records: Mutex<Vec<Record>>,
}

struct Recorder {
    start: Instant,
    buffers: Mutex<Vec<Arc<ThreadBuffer>>>,
    out: Mutex<Option<Box<dyn Write + Send>>>,
    dropped: AtomicU64,
    path: String,
}

static RECORDER: OnceCell<Recorder> = OnceCell::new();
static STOPPED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static MINE: RefCell<Option<Arc<ThreadBuffer>>> = const { RefCell::new(None) };
}

/// Starts recording to `path` (`%p` becomes the pid). Says why, once, if it cannot.
pub fn start(path: &str) {
    let path = path.replace("%p", &std::process::id().to_string());
    #[cfg(not(feature = "gzip"))]
    let path = match path.strip_suffix(".gz") {
        Some(plain) => {
            crate::log::warn(format_args!(
                "this build writes traces without compression: recording to {}",
                plain
            ));
            plain.to_string()
        }
        None => path,
    };
    let file = match File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            crate::log::warn(format_args!(
                "cannot record the trace to {}: {}; not recording",
                path, e
            ));
            return;
        }
    };
    #[cfg(feature = "gzip")]
    let mut out: Box<dyn Write + Send> = if path.ends_with(".gz") {
        Box::new(flate2::write::GzEncoder::new(
            BufWriter::new(file),
            flate2::Compression::fast(),
        ))
    } else {
        Box::new(BufWriter::new(file))
    };
    #[cfg(not(feature = "gzip"))]
    let mut out: Box<dyn Write + Send> = Box::new(BufWriter::new(file));
    let mut header = String::new();
    write_header(&mut header);
    let _ = out.write_all(header.as_bytes());
    let recorder = Recorder {
        start: Instant::now(),
        buffers: Mutex::new(Vec::new()),
        out: Mutex::new(Some(out)),
        dropped: AtomicU64::new(0),
        path,
    };
    if RECORDER.set(recorder).is_err() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("rocmguard-trace".into())
        .spawn(|| {
            while !STOPPED.load(Ordering::Acquire) {
                std::thread::sleep(WRITER_PERIOD);
                drain(false, true);
            }
        });
    if spawned.is_err() {
        crate::log::warn(format_args!(
            "no trace writer thread; the trace is written at exit"
        ));
    }
    crate::platform::on_sigterm(finish);
}

/// One load when not recording: every pooled allocation and free comes through here.
#[inline]
fn record(action: Action, device: i32, pointer: u64, size: u64) {
    if let Some(r) = RECORDER.get() {
        append(r, action, device, pointer, size);
    }
}

#[inline(never)]
fn append(r: &Recorder, action: Action, device: i32, pointer: u64, size: u64) {
    let time_us = r.start.elapsed().as_micros() as u64;
    let rec = Record {
        time_us,
        action,
        pointer,
        size,
        device,
    };
    let _ = MINE.try_with(|mine| {
        let mut mine = mine.borrow_mut();
        let buffer = mine.get_or_insert_with(|| {
            let b = Arc::new(ThreadBuffer {
                thread: crate::platform::thread_id(),
                records: Mutex::new(Vec::with_capacity(1024)),
            });
            r.buffers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(b.clone());
            b
        });
        let mut records = buffer.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() < THREAD_CAPACITY {
            records.push(rec);
        } else {
            r.dropped.fetch_add(1, Ordering::Relaxed);
        }
    });
}

#[inline]
pub fn alloc(device: i32, pointer: u64, size: u64) {
    record(Action::Allocate, device, pointer, size);
}

#[inline]
pub fn free(device: i32, pointer: u64, size: u64) {
    record(Action::Free, device, pointer, size);
}

/// The shim's own events (trim, retry, oom, cap warning, the pool's synchronizes).
#[inline]
pub fn event(action: Action, device: i32, pointer: u64, size: u64) {
    record(action, device, pointer, size);
}

/// Writes what the threads recorded. `last` also closes the file (gzip trailer included).
/// Never blocks on the output: if another drain holds it, this one leaves the work to it. With
/// `wait` false no lock is waited for at all (at exit on Windows, a thread that is gone may
/// hold one).
fn drain(last: bool, wait: bool) {
    let r = match RECORDER.get() {
        Some(r) => r,
        None => return,
    };
    let mut out = match if last && wait {
        Ok(r.out.lock().unwrap_or_else(|e| e.into_inner()))
    } else {
        r.out.try_lock()
    } {
        Ok(o) => o,
        Err(_) => return,
    };
    let writer = match out.as_mut() {
        Some(w) => w,
        None => return,
    };
    let buffers: Vec<Arc<ThreadBuffer>> = match lock(&r.buffers, wait) {
        Some(b) => b.clone(),
        None => return,
    };
    let mut text = String::new();
    let mut taken = Vec::with_capacity(1024);
    for b in buffers {
        match lock(&b.records, wait) {
            Some(mut records) => std::mem::swap(&mut *records, &mut taken),
            None => continue,
        }
        for rec in taken.drain(..) {
            write_event(
                &Event {
                    thread: b.thread,
                    time_us: rec.time_us,
                    action: rec.action,
                    pointer: rec.pointer,
                    size: rec.size,
                    stream: 0,
                    device: rec.device,
                    detail: "",
                },
                &mut text,
            );
        }
    }
    let _ = writer.write_all(text.as_bytes());
    let _ = writer.flush();
    if last {
        let dropped = r.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            crate::log::warn(format_args!(
                "the trace writer fell behind: {} events were not recorded in {}",
                dropped, r.path
            ));
        }
        // Dropping the encoder writes the gzip trailer.
        *out = None;
    }
}

fn lock<T>(m: &Mutex<T>, wait: bool) -> Option<std::sync::MutexGuard<'_, T>> {
    if wait {
        Some(m.lock().unwrap_or_else(|e| e.into_inner()))
    } else {
        m.try_lock().ok()
    }
}

/// At exit: the rest of the trace, and the file closed.
pub fn finish() {
    STOPPED.store(true, Ordering::Release);
    drain(true, true);
}

/// As [`finish`] while the process ends with its other threads killed (Windows): what can be
/// written without waiting for a lock.
pub fn finish_at_exit() {
    STOPPED.store(true, Ordering::Release);
    drain(true, false);
}
