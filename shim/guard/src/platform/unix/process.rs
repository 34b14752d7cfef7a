//! Process-wide duties set up at first use (never in a constructor): the stats table at exit,
//! the live stats file for `rocmguard stats`, the trace recorder, and fork handlers so a child
//! never inherits a pool lock held by a thread it does not have.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rocmguard_core::{Config, Stats};

use crate::GUARDS;

static EXITING: AtomicBool = AtomicBool::new(false);
/// Held by the background reclaimer while it synchronizes; taken for good at exit, so no
/// synchronize of ours runs while the runtime tears itself down.
static RECLAIMING: Mutex<()> = Mutex::new(());
/// The process whose reclaimer thread exists (a forked child has none).
static RECLAIMER_PID: AtomicU32 = AtomicU32::new(0);

/// Raises the soft limit on open files to the hard one (at most 2^20), once. ROCm 7 holds one
/// dmabuf descriptor per `hipMemCreate` handle (ROCm/rocm-systems#10604), so at the usual soft
/// limit of 1024 a program mapping 2 MiB handles (PyTorch's expandable segments, the pool's
/// small pieces, shared blocks) stops near 2 GiB with `hipErrorOutOfMemory` while the device
/// has gigabytes free. Said at info level; a limit already at the hard one is left alone.
pub fn raise_open_files() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-struct; setrlimit only with values getrlimit allows.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
                return;
            }
            let from = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max.min(1 << 20);
            if lim.rlim_cur > from && libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                crate::log::info(format_args!(
                    "open files soft limit raised from {} to {}: the runtime may hold one per virtual memory handle",
                    from, lim.rlim_cur
                ));
            }
        }
    });
}

pub fn reclaimer_started() {
    RECLAIMER_PID.store(std::process::id(), Ordering::Release);
}

/// Permission to synchronize in the background, or `None` once the process is exiting.
pub fn reclaim_permit() -> Option<MutexGuard<'static, ()>> {
    if EXITING.load(Ordering::Acquire) {
        return None;
    }
    let permit = RECLAIMING.lock().unwrap_or_else(|e| e.into_inner());
    (!EXITING.load(Ordering::Acquire)).then_some(permit)
}

thread_local! {
    /// Pool locks held from `fork()`'s prepare to its parent and child handlers, which run on
    /// the forking thread.
    static FORK_HOLDS: RefCell<Vec<rocmguard_core::pool::PoolHold<'static>>> = const { RefCell::new(Vec::new()) };
}

pub fn install(config: &Config) {
    // SAFETY: registering handlers that never unwind.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
    }
    if let Some(path) = &config.trace {
        crate::trace::start(path);
    }
    let _ = std::thread::Builder::new()
        .name("rocmguard-stats".into())
        .spawn(publish_live_stats);
}

/// Keeps this process's live stats file current (about once a second, when something changed)
/// for `rocmguard stats`.
fn publish_live_stats() {
    let pid = std::process::id();
    let command = std::fs::read("/proc/self/cmdline")
        .map(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_default();
    let mut last = Vec::new();
    while !EXITING.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(500));
        let devices: Vec<(i32, Stats)> = all_stats().into_iter().flat_map(|(_, s)| s).collect();
        if !devices.is_empty() && devices != last && !EXITING.load(Ordering::Acquire) {
            let _ = rocmguard_core::live::publish(pid, &command, &devices);
            last = devices;
        }
    }
}

/// Per-device stats of both faces.
pub fn all_stats() -> Vec<(String, Vec<(i32, Stats)>)> {
    GUARDS
        .iter()
        .map(|g| (g.face.name.to_string(), g.stats()))
        .filter(|(_, s)| !s.is_empty())
        .collect()
}

extern "C" fn at_exit() {
    // Never calls the runtime: it may be gone already.
    let _ = std::panic::catch_unwind(|| {
        EXITING.store(true, Ordering::Release);
        if RECLAIMER_PID.load(Ordering::Acquire) == std::process::id() {
            // Waits for a background synchronize in flight, then keeps the reclaimer out.
            std::mem::forget(RECLAIMING.lock().unwrap_or_else(|e| e.into_inner()));
        }
        crate::trace::finish();
        let _ = rocmguard_core::live::remove(std::process::id());
        crate::platform::ipc::remove_socket();
        if crate::config().is_some_and(|c| c.log != "off" && c.log != "error") {
            for line in GUARDS.iter().flat_map(|g| g.refusal_summary()) {
                crate::log::write_at_exit(&format!(" WARN rocmguard: {}\n", line));
            }
        }
        if crate::config().is_some_and(|c| c.stats) {
            for (face, stats) in all_stats() {
                crate::log::write_at_exit(&format!(
                    "rocmguard: {} memory at exit\n{}",
                    face,
                    Stats::table(&stats)
                ));
            }
        }
    });
}

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(|| {
        let mut holds = Vec::new();
        for guard in GUARDS {
            if let Some(a) = guard.active() {
                holds.extend(a.fork_holds());
            }
        }
        FORK_HOLDS.with(|h| *h.borrow_mut() = holds);
    });
}

extern "C" fn parent() {
    let _ = std::panic::catch_unwind(|| FORK_HOLDS.with(|h| h.borrow_mut().clear()));
}

extern "C" fn child() {
    let _ = std::panic::catch_unwind(|| {
        FORK_HOLDS.with(|h| h.borrow_mut().clear());
        for guard in GUARDS {
            if let Some(a) = guard.active() {
                a.forget_after_fork();
            }
        }
    });
}
