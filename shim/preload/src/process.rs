//! Process-wide duties set up at first use (never in a constructor): the stats table at exit,
//! and fork handlers so a child never inherits a pool lock held by a thread it does not have.

use std::cell::RefCell;

use rocmguard_core::{Config, Stats};

use crate::cuda::CUDA;
use crate::hip::HIP;

static mut PRINT_STATS: bool = false;

thread_local! {
    /// Pool locks held from `fork()`'s prepare to its parent and child handlers, which run on
    /// the forking thread.
    static FORK_HOLDS: RefCell<Vec<rocmguard_core::pool::PoolHold<'static>>> = const { RefCell::new(Vec::new()) };
}

pub fn install(config: &Config) {
    // SAFETY: set once, before the handlers can run; read only at exit.
    unsafe {
        PRINT_STATS = config.stats;
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
    }
}

/// Per-device stats of both faces.
pub fn all_stats() -> Vec<(String, Vec<(i32, Stats)>)> {
    [("HIP", HIP.stats()), ("CUDA", CUDA.stats())]
        .into_iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(n, s)| (n.to_string(), s))
        .collect()
}

extern "C" fn at_exit() {
    // Never calls the runtime: it may be gone already.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: written once in install.
        if unsafe { PRINT_STATS } {
            for (face, stats) in all_stats() {
                eprint!("rocmguard: {} memory at exit\n{}", face, Stats::table(&stats));
            }
        }
    });
}

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(|| {
        let mut holds = Vec::new();
        for guard in [&HIP, &CUDA] {
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
        for guard in [&HIP, &CUDA] {
            if let Some(a) = guard.active() {
                a.forget_after_fork();
            }
        }
    });
}
