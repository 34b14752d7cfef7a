//! The loader's side: which imports we take over, and our `LoadLibrary` family and
//! `GetProcAddress`. A program reaches the HIP runtime in one of three ways, and each ends here:
//! an import table (patched at injection and after each load), a later `LoadLibrary` of the
//! runtime or of a module that imports it by full path (AMD's wheels do this; after the real
//! load we scan the new modules), or `GetProcAddress` on the runtime's handle (ctypes, Triton,
//! delay-load helpers; answered with our hook for hooked names).

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::patch;
use crate::win::{self, Handle, Module};

/// BLAS and MIOpen libraries whose handle creation is guarded (`blas.rs`).
const BLAS_LIBS: &[&str] = &["rocblas", "hipblas", "miopen"];

/// Where an import comes from, as far as we care.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Import {
    Hip,
    Blas,
    /// kernel32, kernelbase or the loader's api set: our `LoadLibrary` and `GetProcAddress`.
    Loader,
}

/// What kind of import a DLL name (lower-case) stands for, if we hook any of its functions.
pub fn import_kind(dll: &str) -> Option<Import> {
    if patch::is_one_of(dll, crate::hip::LIBS) {
        Some(Import::Hip)
    } else if patch::is_one_of(dll, BLAS_LIBS) {
        Some(Import::Blas)
    } else if dll == "kernel32.dll"
        || dll == "kernelbase.dll"
        || dll.starts_with("api-ms-win-core-libraryloader-")
    {
        Some(Import::Loader)
    } else {
        None
    }
}

/// Our replacement for `name` imported from a DLL of `kind`, remembering `real` (the slot's
/// current value) as the real function of a hook that has none yet.
pub fn hook_for_import(kind: Import, name: &[u8], real: usize) -> Option<usize> {
    match kind {
        Import::Hip => crate::hip::hook_for(name, real),
        Import::Blas => crate::blas::hook_for(name, real),
        Import::Loader => loader_hook(name),
    }
}

/// Our hook for a HIP or BLAS function `name`, whatever library it is asked of
/// (`hipGetProcAddress` answers).
pub fn hook_for_name(name: &[u8], real: usize) -> Option<usize> {
    if name.starts_with(b"hip") {
        crate::hip::hook_for(name, real).or_else(|| crate::blas::hook_for(name, real))
    } else if name.starts_with(b"rocblas") || name.starts_with(b"miopen") {
        crate::blas::hook_for(name, real)
    } else {
        None
    }
}

fn loader_hook(name: &[u8]) -> Option<usize> {
    let hook = match name {
        b"LoadLibraryA" => load_library_a as usize,
        b"LoadLibraryW" => load_library_w as usize,
        b"LoadLibraryExA" => load_library_ex_a as usize,
        b"LoadLibraryExW" => load_library_ex_w as usize,
        b"GetProcAddress" => get_proc_address as usize,
        _ => return None,
    };
    Some(hook)
}

/// Patches whatever a load brought in; never fails the load, and says once if hooking fails.
fn after_load(module: Module) {
    if module.is_null() || crate::degraded() {
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
unsafe extern "system" fn load_library_ex_a(name: *const c_char, file: Handle, flags: u32) -> Module {
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
/// library and `name` is hooked.
unsafe extern "system" fn get_proc_address(module: Module, name: *const c_char) -> *mut c_void {
    let found = win::GetProcAddress(module, name);
    // A name that is really an ordinal has its high bits clear.
    if found.is_null() || (name as usize) >> 16 == 0 || crate::degraded() {
        return found;
    }
    let _keep = win::KeepLastError::new();
    let hook = catch_unwind(AssertUnwindSafe(|| {
        let kind = import_kind(patch::file_name(&patch::path_of(module)))?;
        if kind == Import::Loader {
            return None;
        }
        hook_for_import(kind, CStr::from_ptr(name).to_bytes(), found as usize)
    }));
    match hook {
        Ok(Some(h)) => h as *mut c_void,
        _ => found,
    }
}
