//! rocmguard.dll: injected into an unmodified Windows program by `rocmguard.exe run`, it routes
//! the program's HIP device allocations through rocmguard's guard (`rocmguard_guard`,
//! shim/guard), as `librocmguard.so` does on Linux, over the same core. What is here is only
//! how Windows brings the program's calls to the guard's hooks.
//!
//! How calls reach us: at attach (`DllMain`) the import tables of the loaded modules are
//! rewritten (`patch`), and our `LoadLibrary` family and `GetProcAddress` catch the runtime
//! where it is loaded or looked up later (`loader`). Every hook runs inside the guard's
//! `boundary`: a panic of ours never crosses into the host program; it switches the library to
//! pass-through, says so once, and the call goes to the runtime.

use std::ffi::c_void;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, Ordering};

use rocmguard_core::Stats;
use rocmguard_guard::platform::win;
use rocmguard_guard::{config, log};

mod loader;
mod patch;

static HOOK_FAILURE_SAID: AtomicBool = AtomicBool::new(false);

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
        for line in rocmguard_guard::hip_refusals() {
            log::write_at_exit(&format!(" WARN rocmguard: {}\n", line));
        }
    }
    if config().map_or(false, |c| c.stats) {
        print_stats_at_exit();
    }
    rocmguard_guard::trace::finish_at_exit();
}

fn print_stats_at_exit() {
    if !rocmguard_guard::no_hook_running() {
        log::write_at_exit(
            "rocmguard: no stats table: the process ended while a thread was inside rocmguard\n",
        );
        return;
    }
    let stats: Vec<(i32, Stats)> = rocmguard_guard::hip_stats();
    if !stats.is_empty() {
        log::write_at_exit(&format!(
            "rocmguard: HIP memory at exit\n{}",
            Stats::table(&stats)
        ));
    }
}
