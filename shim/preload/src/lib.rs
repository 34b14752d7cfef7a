//! librocmguard.so: preloaded into an unmodified program, it routes the program's HIP (and
//! CUDA) device allocations through rocmguard's pool. This crate is the only place with FFI:
//! the hooks translate the ABI and call the pure core.
//!
//! Every hook runs inside [`boundary`]: a panic of ours never crosses into the host program;
//! it switches the library to pass-through, says so once, and the call goes to the runtime.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use once_cell::sync::OnceCell;
use rocmguard_core::Config;

mod blas;
mod cuda;
mod cuda_driver;
mod deepbind;
mod dl;
/// Our hook for a hooked name, for `GetProcAddress` answers (see `dl::hook_for`).
use dl::hook_for as lookup_hook;
mod group;
mod guard;
mod hip;
mod hooks;
mod ipc;
mod log;
mod paths;
mod process;
mod resolve;
pub mod trace;
mod uma;
mod vmm;

static CONFIG: OnceCell<Config> = OnceCell::new();
static DEGRADED: AtomicBool = AtomicBool::new(false);

/// The configuration, read once from the environment at first use (never in a constructor).
pub(crate) fn config() -> Option<&'static Config> {
    Some(CONFIG.get_or_init(|| {
        let (config, warnings) = Config::from_env();
        log::init(&config, &warnings);
        if config.disable {
            log::warn(format_args!(
                "ROCMGUARD_DISABLE is set: passing every call straight through"
            ));
        }
        process::install(&config);
        config
    }))
}

/// Whether an internal failure switched the library to pass-through.
pub(crate) fn degraded() -> bool {
    DEGRADED.load(Ordering::Relaxed)
}

/// Runs a hook's body; on a panic of ours, degrades to pass-through (said once) and runs
/// `fallback`, the plain runtime call.
#[inline]
pub(crate) fn boundary<T>(name: &str, body: impl FnOnce() -> T, fallback: impl FnOnce() -> T) -> T {
    if degraded() {
        return fallback();
    }
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            if !DEGRADED.swap(true, Ordering::SeqCst) {
                log::error(format_args!(
                    "internal failure in {}; passing every call straight to the runtime from now on",
                    name
                ));
            }
            fallback()
        }
    }
}

/// The library's version, for `rocmguard doctor` and programs that want to know.
#[no_mangle]
pub extern "C" fn rocmguard_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
#[no_mangle]
pub extern "C" fn rocmguard_active() -> i32 {
    match config() {
        Some(c) if !c.disable && !degraded() => 1,
        _ => 0,
    }
}
