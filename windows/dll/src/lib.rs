//! rocmguard.dll: injected into an unmodified Windows program by `rocmguard.exe run`, it routes
//! the program's HIP device allocations through rocmguard's pool, as `librocmguard.so` does on
//! Linux, with the same guard (`shim/preload/src/guard/` and `blas.rs`, compiled in here
//! unchanged) over the same core.
//!
//! How calls reach us: at attach (`DllMain`) the import tables of the loaded modules are
//! rewritten (`patch`), and our `LoadLibrary` family and `GetProcAddress` catch the runtime
//! where it is loaded or looked up later (`loader`). Every hook runs inside [`boundary`]: a
//! panic of ours never crosses into the host program; it switches the library to pass-through,
//! says so once, and the call goes to the runtime.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use once_cell::sync::OnceCell;
use rocmguard_core::{Config, Stats};

#[path = "../../../shim/preload/src/blas.rs"]
mod blas;
// Its fork handling (`fork_holds`, `forget_after_fork`) has no use on Windows.
mod group;
#[allow(dead_code)]
#[path = "../../../shim/preload/src/guard/mod.rs"]
mod guard;
mod hip;
mod hooks;
mod ipc;
mod loader;
#[path = "../../../shim/preload/src/paths.rs"]
mod paths;
mod process;
/// Our hook for a hooked name, for `GetProcAddress` answers (see `loader::hook_for_name`).
use loader::hook_for_name as lookup_hook;
mod log;
mod patch;
mod trace;
mod uma;
// Only its types: the Windows DLL keeps to plain segments (see hip::virtual_memory).
#[allow(dead_code)]
#[path = "../../../shim/preload/src/vmm.rs"]
mod vmm;
mod win;

static CONFIG: OnceCell<Config> = OnceCell::new();
static DEGRADED: AtomicBool = AtomicBool::new(false);
/// Hook bodies running now. Pool locks are only taken inside them, so when the process ends
/// (other threads already stopped, whatever locks they held) and this is zero, no pool lock
/// can be held by a stopped thread and the exit table may read the pools.
static IN_HOOKS: AtomicUsize = AtomicUsize::new(0);
static HOOK_FAILURE_SAID: AtomicBool = AtomicBool::new(false);

/// The configuration, read once from the environment (at attach, or at first use).
pub(crate) fn config() -> Option<&'static Config> {
    Some(CONFIG.get_or_init(|| {
        let (config, warnings) = Config::from_env();
        log::init(&config, &warnings);
        if config.disable {
            log::warn(format_args!(
                "ROCMGUARD_DISABLE is set: passing every call straight through"
            ));
        }
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
    IN_HOOKS.fetch_add(1, Ordering::AcqRel);
    let result = catch_unwind(AssertUnwindSafe(body));
    IN_HOOKS.fetch_sub(1, Ordering::AcqRel);
    match result {
        Ok(v) => v,
        Err(_) => {
            if !DEGRADED.swap(true, Ordering::SeqCst) {
                log::error(format_args!(
                    "internal failure in {}; passing every call straight to the runtime \
                     from now on",
                    name
                ));
            }
            fallback()
        }
    }
}

/// Says (once) that some module's import table could not be rewritten: its calls to HIP go to
/// the runtime unguarded.
pub(crate) fn report_failures(report: &patch::Report) {
    if report.failures.is_empty() || HOOK_FAILURE_SAID.swap(true, Ordering::SeqCst) {
        return;
    }
    for failure in &report.failures {
        log::warn(format_args!(
            "could not hook the imports of {}; its HIP calls run UNGUARDED",
            failure
        ));
    }
}

/// Attach: pin this DLL (its hooks sit in other modules' import tables, so it must never be
/// unloaded), hook the loaded modules. Process exit: the stats table and the trace's tail,
/// without calling the runtime (it may be gone).
#[no_mangle]
#[allow(non_snake_case)]
pub extern "system" fn DllMain(module: win::Module, reason: u32, reserved: *mut c_void) -> i32 {
    match reason {
        win::DLL_PROCESS_ATTACH => {
            let _ = catch_unwind(|| attach(module));
        }
        win::DLL_PROCESS_DETACH if !reserved.is_null() => {
            let _ = catch_unwind(at_exit);
        }
        _ => {}
    }
    1
}

fn attach(module: win::Module) {
    let mut pinned = std::ptr::null_mut();
    // SAFETY: with FROM_ADDRESS the name is an address inside this DLL.
    unsafe {
        win::DisableThreadLibraryCalls(module);
        win::GetModuleHandleExW(
            win::GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | win::GET_MODULE_HANDLE_EX_FLAG_PIN,
            attach as *const u16,
            &mut pinned,
        );
    }
    patch::set_self(module);
    let config = config();
    let report = patch::patch_new_modules();
    report_failures(&report);
    if config.map_or(false, |c| !c.disable) {
        log::info(format_args!(
            "attached: {} import slots hooked; later loads and lookups are watched",
            report.patched
        ));
    }
}

fn at_exit() {
    // Only atomics are read: safe whatever thread ended inside a hook.
    if config().map_or(false, |c| c.log != "off" && c.log != "error") {
        for line in hip::HIP.refusal_summary() {
            log::write_at_exit(&format!(" WARN rocmguard: {}\n", line));
        }
    }
    if config().map_or(false, |c| c.stats) {
        print_stats_at_exit();
    }
    trace::flush_at_exit();
}

fn print_stats_at_exit() {
    if IN_HOOKS.load(Ordering::Acquire) != 0 {
        log::write_at_exit(
            "rocmguard: no stats table: the process ended while a thread was inside rocmguard\n",
        );
        return;
    }
    let stats: Vec<(i32, Stats)> = hip::HIP.stats();
    if !stats.is_empty() {
        log::write_at_exit(&format!(
            "rocmguard: HIP memory at exit\n{}",
            Stats::table(&stats)
        ));
    }
}

/// The library's version, for programs that want to know.
#[no_mangle]
pub extern "C" fn rocmguard_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
#[no_mangle]
pub extern "C" fn rocmguard_active() -> i32 {
    match config() {
        Some(c) if !c.disable && !degraded() => 1,
        _ => 0,
    }
}
