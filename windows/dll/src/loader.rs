//! The system's side: which imports we take over, and our `LoadLibrary` family,
//! `GetProcAddress` and `CreateProcess`. A program reaches the HIP runtime in one of three ways,
//! and each ends here: an import table (patched at injection and after each load), a later
//! `LoadLibrary` of the runtime or of a module that imports it by full path (AMD's wheels do
//! this; after the real load we scan the new modules), or `GetProcAddress` on the runtime's
//! handle (ctypes, Triton, delay-load helpers; answered with our hook for hooked names).
//!
//! The processes the program starts are guarded too, as children inherit `LD_PRELOAD` on Linux:
//! our `CreateProcess` starts them suspended, loads this DLL into them and lets them run (a
//! venv's `python.exe` only starts the real interpreter; torchrun starts its ranks).

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::patch;
use rocmguard_guard::platform::modules;
use rocmguard_guard::platform::win::{self, Handle, Module};
use rocmguard_guard::{config, degraded, log};

/// Where an import comes from, as far as we care.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Import {
    Hip,
    Blas,
    /// kernel32, kernelbase or their api sets: our `LoadLibrary`, `GetProcAddress` and
    /// `CreateProcess`.
    System,
}

/// What kind of import a DLL name (lower-case) stands for, if we hook any of its functions.
pub fn import_kind(dll: &str) -> Option<Import> {
    if modules::is_one_of(dll, rocmguard_guard::HIP_LIBS) {
        Some(Import::Hip)
    } else if modules::is_one_of(dll, rocmguard_guard::BLAS_LIBS) {
        Some(Import::Blas)
    } else if dll == "kernel32.dll"
        || dll == "kernelbase.dll"
        || dll.starts_with("api-ms-win-core-libraryloader-")
        || dll.starts_with("api-ms-win-core-processthreads-")
    {
        Some(Import::System)
    } else {
        None
    }
}

/// Our replacement for `name` imported from a DLL of `kind`, remembering `real` (the slot's
/// current value) as the real function of a hook that has none yet.
pub fn hook_for_import(kind: Import, name: &[u8], real: usize) -> Option<usize> {
    match kind {
        Import::Hip | Import::Blas => rocmguard_guard::hook_for(name, real),
        Import::System => system_hook(name),
    }
}

fn system_hook(name: &[u8]) -> Option<usize> {
    let hook = match name {
        b"LoadLibraryA" => load_library_a as usize,
        b"LoadLibraryW" => load_library_w as usize,
        b"LoadLibraryExA" => load_library_ex_a as usize,
        b"LoadLibraryExW" => load_library_ex_w as usize,
        b"GetProcAddress" => get_proc_address as usize,
        b"CreateProcessA" => create_process_a as usize,
        b"CreateProcessW" => create_process_w as usize,
        _ => return None,
    };
    Some(hook)
}

/// Patches whatever a load brought in; never fails the load, and says once if hooking fails.
fn after_load(module: Module) {
    if module.is_null() || degraded() {
        return;
    }
    let _keep = win::KeepLastError::new();
    let result = catch_unwind(AssertUnwindSafe(patch::patch_new_modules));
    if let Ok(report) = result {
        crate::report_failures(&report);
    }
}

/// `LoadLibraryA`, then our pass over the modules it loaded.
unsafe extern "system" fn load_library_a(name: *const c_char) -> Module {
    let module = win::LoadLibraryA(name);
    after_load(module);
    module
}

/// `LoadLibraryW`, then our pass over the modules it loaded.
unsafe extern "system" fn load_library_w(name: *const u16) -> Module {
    let module = win::LoadLibraryW(name);
    after_load(module);
    module
}

/// `LoadLibraryExA`; a file mapped as data has no code to hook.
unsafe extern "system" fn load_library_ex_a(
    name: *const c_char,
    file: Handle,
    flags: u32,
) -> Module {
    let module = win::LoadLibraryExA(name, file, flags);
    if flags & win::LOAD_AS_DATA == 0 {
        after_load(module);
    }
    module
}

/// `LoadLibraryExW`; a file mapped as data has no code to hook.
unsafe extern "system" fn load_library_ex_w(name: *const u16, file: Handle, flags: u32) -> Module {
    let module = win::LoadLibraryExW(name, file, flags);
    if flags & win::LOAD_AS_DATA == 0 {
        after_load(module);
    }
    module
}

/// `GetProcAddress`, answered with our hook where `module` is the HIP runtime or a guarded BLAS
/// library and `name` is hooked, and with ours for kernel32's loader and process functions
/// (Python's ctypes calls `kernel32.LoadLibraryExW` found this way, as torch does to load the
/// runtime).
unsafe extern "system" fn get_proc_address(module: Module, name: *const c_char) -> *mut c_void {
    let found = win::GetProcAddress(module, name);
    // A name that is really an ordinal has its high bits clear.
    if found.is_null() || (name as usize) >> 16 == 0 || degraded() {
        return found;
    }
    let _keep = win::KeepLastError::new();
    let hook = catch_unwind(AssertUnwindSafe(|| {
        let kind = import_kind(modules::file_name(&modules::path_of(module)))?;
        hook_for_import(kind, CStr::from_ptr(name).to_bytes(), found as usize)
    }));
    match hook {
        Ok(Some(h)) => h as *mut c_void,
        _ => found,
    }
}

/// Whether a process about to be created gets the guard: not when the guard is off, nor under
/// a debugger (the debugger owns its start).
fn guard_child(flags: u32) -> bool {
    flags & win::DEBUG_FLAGS == 0 && config().map_or(false, |c| !c.disable) && !degraded()
}

/// After the real `CreateProcess` started a child suspended for us: loads this DLL into it,
/// then lets it run unless the caller asked for it suspended. A child we cannot guard still
/// runs, and the log says so.
fn guard_started(info: &win::ProcessInformation, flags: u32) {
    let _keep = win::KeepLastError::new();
    let injected = catch_unwind(|| {
        rocmguard_inject::inject(info.process, std::path::Path::new(&patch::self_path()))
    });
    match injected {
        Ok(Ok(())) => log::info(format_args!("guarding child process {}", info.process_id)),
        Ok(Err(why)) => log::warn(format_args!(
            "could not load rocmguard.dll into child process {}: {}; it runs UNGUARDED",
            info.process_id, why
        )),
        Err(_) => log::warn(format_args!(
            "internal failure guarding child process {}; it runs UNGUARDED",
            info.process_id
        )),
    }
    if flags & win::CREATE_SUSPENDED == 0 {
        if let Err(why) = rocmguard_inject::resume(info.thread) {
            log::error(format_args!("child process {}: {}", info.process_id, why));
        }
    }
}

/// Starts a child with `create` (`CreateProcessA` or `W`, given the creation flags): suspended
/// and guarded before it runs when it should be, as asked otherwise.
unsafe fn create_guarded(
    flags: u32,
    information: *mut win::ProcessInformation,
    create: impl FnOnce(u32) -> i32,
) -> i32 {
    let guard = !information.is_null() && guard_child(flags);
    let extra = if guard { win::CREATE_SUSPENDED } else { 0 };
    let ok = create(flags | extra);
    if ok != 0 && guard {
        guard_started(&*information, flags);
    }
    ok
}

/// `CreateProcessA`, with the child guarded.
#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn create_process_a(
    application: *const c_char,
    command_line: *mut c_char,
    process_attributes: *mut c_void,
    thread_attributes: *mut c_void,
    inherit_handles: i32,
    flags: u32,
    environment: *mut c_void,
    current_directory: *const c_char,
    startup_info: *mut c_void,
    information: *mut win::ProcessInformation,
) -> i32 {
    create_guarded(flags, information, |flags| {
        win::CreateProcessA(
            application,
            command_line,
            process_attributes,
            thread_attributes,
            inherit_handles,
            flags,
            environment,
            current_directory,
            startup_info,
            information,
        )
    })
}

/// `CreateProcessW`, with the child guarded.
#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn create_process_w(
    application: *const u16,
    command_line: *mut u16,
    process_attributes: *mut c_void,
    thread_attributes: *mut c_void,
    inherit_handles: i32,
    flags: u32,
    environment: *mut c_void,
    current_directory: *const u16,
    startup_info: *mut c_void,
    information: *mut win::ProcessInformation,
) -> i32 {
    create_guarded(flags, information, |flags| {
        win::CreateProcessW(
            application,
            command_line,
            process_attributes,
            thread_attributes,
            inherit_handles,
            flags,
            environment,
            current_directory,
            startup_info,
            information,
        )
    })
}
