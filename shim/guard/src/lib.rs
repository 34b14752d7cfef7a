//! rocmguard's guard: what the hooks do, once for every platform. `librocmguard.so`
//! (shim/preload) and `rocmguard.dll` (windows/dll) are thin loaders over it: each only gets the
//! program's calls here (preloading and `dlsym` on Linux, import tables and `GetProcAddress` on
//! Windows). Everything that differs by OS (finding the real runtime, writing to stderr, the
//! process's exit and fork duties, the group cap, IPC) is in [`platform`].
//!
//! Every hook runs inside [`boundary`]: a panic of ours never crosses into the host program;
//! it switches the library to pass-through, says so once, and the call goes to the runtime.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use once_cell::sync::OnceCell;
use rocmguard_core::Config;

/// `CStr` literals for Rust 1.63 (the Windows toolchain), where `c"..."` does not exist yet.
macro_rules! cstr {
    ($($s:tt)+) => {
        // SAFETY: a literal (or `stringify!`) with no NUL, given one at its end.
        unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!($($s)+, "\0").as_bytes()) }
    };
}
pub(crate) use cstr;

pub mod api;
mod blas;
#[cfg(unix)]
mod cuda;
#[cfg(unix)]
mod cuda_driver;
// Windows keeps to plain segments and has no fork: those parts of it are Linux's.
#[cfg_attr(windows, allow(dead_code))]
mod guard;
mod hip;
mod hooks;
pub mod log;
mod paths;
pub mod platform;
// Windows keeps to plain segments and has no fork: those parts of it are Linux's.
#[cfg_attr(windows, allow(dead_code))]
mod resolve;
pub mod trace;
mod uma;
// Windows keeps to plain segments and has no fork: those parts of it are Linux's.
#[cfg_attr(windows, allow(dead_code))]
mod vmm;

pub use blas::LIBS as BLAS_LIBS;
pub use hip::LIBS as HIP_LIBS;

/// Every face's guard: HIP's, and on Linux CUDA's.
#[cfg(unix)]
pub(crate) static GUARDS: [&guard::Guard; 2] = [&hip::HIP, &cuda::CUDA];
#[cfg(not(unix))]
pub(crate) static GUARDS: [&guard::Guard; 1] = [&hip::HIP];

static CONFIG: OnceCell<Config> = OnceCell::new();
static DEGRADED: AtomicBool = AtomicBool::new(false);
/// Hook bodies running now. Pool locks are only taken inside them, so when this is zero at
/// process exit no pool lock can be held by a thread that is gone (Windows kills the other
/// threads before its exit table is printed).
static IN_HOOKS: AtomicUsize = AtomicUsize::new(0);

/// The configuration, read once from the environment at first use (never in a constructor).
pub fn config() -> Option<&'static Config> {
    Some(CONFIG.get_or_init(|| {
        let (config, warnings) = Config::from_env();
        log::init(&config, &warnings);
        if config.disable {
            log::warn(format_args!(
                "ROCMGUARD_DISABLE is set: passing every call straight through"
            ));
        }
        platform::process::install(&config);
        config
    }))
}

/// Whether an internal failure switched the library to pass-through.
pub fn degraded() -> bool {
    DEGRADED.load(Ordering::Relaxed)
}

/// Whether no hook body is running (see [`IN_HOOKS`]).
pub fn no_hook_running() -> bool {
    IN_HOOKS.load(Ordering::Acquire) == 0
}

/// Runs a hook's body; on a panic of ours, degrades to pass-through (said once) and runs
/// `fallback`, the plain runtime call.
#[inline]
pub fn boundary<T>(name: &str, body: impl FnOnce() -> T, fallback: impl FnOnce() -> T) -> T {
    if degraded() {
        return fallback();
    }
    // Only where the exit table needs it: a shared counter costs every call a contended write.
    if platform::COUNTS_HOOKS {
        IN_HOOKS.fetch_add(1, Ordering::AcqRel);
    }
    let failures = guard::failures();
    let result = catch_unwind(AssertUnwindSafe(body));
    guard::forget_pending(failures);
    if platform::COUNTS_HOOKS {
        IN_HOOKS.fetch_sub(1, Ordering::AcqRel);
    }
    match result {
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

/// Our hook for a hooked name in any face, remembering `real` (what the runtime itself
/// answered) as its real function: for `dlsym`, `GetProcAddress` and the runtimes' own lookups.
pub fn hook_for(name: &[u8], real: usize) -> Option<usize> {
    if name.starts_with(b"hip") {
        hip::hook_for(name, real).or_else(|| blas::hook_for(name, real))
    } else if name.starts_with(b"rocblas") || name.starts_with(b"miopen") {
        blas::hook_for(name, real)
    } else {
        cuda_hook_for(name, real)
    }
}

/// Whether `file` (a file name) is one of the libraries the hooks stand in front of (the HIP
/// runtime, BLAS and MIOpen, and on Linux the CUDA runtime and driver): their own calls are
/// theirs, never rerouted to the hooks.
pub fn is_runtime_library(file: &str) -> bool {
    #[cfg(unix)]
    let libs: &[&[&str]] = &[hip::LIBS, blas::LIBS, cuda::LIBS, cuda_driver::LIBS];
    #[cfg(not(unix))]
    let libs: &[&[&str]] = &[hip::LIBS, blas::LIBS];
    libs.iter()
        .flat_map(|l| l.iter())
        .any(|p| file.starts_with(p))
}

#[cfg(unix)]
fn cuda_hook_for(name: &[u8], real: usize) -> Option<usize> {
    if name.starts_with(b"cuda") {
        cuda::hook_for(name, real)
    } else if name.starts_with(b"cu") {
        cuda_driver::dlsym_hook_for(name, real)
    } else {
        None
    }
}

/// The CUDA faces are Linux only: the Windows DLL hooks the HIP runtime's imports.
#[cfg(not(unix))]
fn cuda_hook_for(_name: &[u8], _real: usize) -> Option<usize> {
    None
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
pub fn active() -> i32 {
    match config() {
        Some(c) if !c.disable && !degraded() => 1,
        _ => 0,
    }
}

/// The HIP face's per-device stats, for an exit table.
pub fn hip_stats() -> Vec<(i32, rocmguard_core::Stats)> {
    hip::HIP.stats()
}

/// The HIP face's refusals in one line each, for the exit log.
pub fn hip_refusals() -> Vec<String> {
    hip::HIP.refusal_summary()
}
