//! Linux: the preloaded library's side of [`crate::platform`].

use std::ffi::c_int;

pub mod group;
pub mod ipc;
pub mod process;
mod symbols;

pub use symbols::{find_symbol, glibc_function, loaded_objects, real_dlsym};

/// No exit table waits for hooks to end here (exit runs on the exiting thread, others alive).
pub const COUNTS_HOOKS: bool = false;

/// Writes `bytes` to standard error, whole, without Rust's stderr lock (free of a lock a
/// thread that is gone may hold, at exit).
pub fn write_stderr(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: a valid buffer of `rest.len()` bytes.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// The calling thread's id as the OS shows it (the trace's `Thread Id`).
pub fn thread_id() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// The GTT / TTM limit from sysfs, bounded by system memory less `host_reserve`
/// (`ROCMGUARD_SYSROOT` roots the sysfs reads, for tests).
pub fn unified_memory_ceiling(host_reserve: rocmguard_core::Limit) -> Result<u64, String> {
    let root = std::env::var_os("ROCMGUARD_SYSROOT").unwrap_or_else(|| "/".into());
    rocmguard_core::topology::unified_memory_ceiling(std::path::Path::new(&root), host_reserve)
}

static SIGTERM_FLUSH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// On SIGTERM (where the program has no handler of its own): runs `flush`, then dies of the
/// signal as the program would have.
pub fn on_sigterm(flush: fn()) {
    extern "C" fn on_term(sig: c_int) {
        let f = SIGTERM_FLUSH.load(std::sync::atomic::Ordering::Acquire);
        if f != 0 {
            // SAFETY: set below from a `fn()`.
            unsafe { std::mem::transmute::<usize, fn()>(f)() };
        }
        // SAFETY: restoring the default action and re-raising are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    SIGTERM_FLUSH.store(flush as usize, std::sync::atomic::Ordering::Release);
    // SAFETY: querying and setting a signal disposition.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
        {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_term as *const () as usize;
            libc::sigaction(libc::SIGTERM, &act, std::ptr::null_mut());
        }
    }
}
