//! The loaded modules and their exports: how the guard finds the real HIP runtime on Windows
//! (`find_export`), and what the DLL's import-table patcher walks.

use std::ffi::CStr;
use std::os::windows::ffi::OsStringExt;

use super::win::{self, Module};

/// Every loaded module.
pub fn modules() -> Vec<Module> {
    let mut list: Vec<Module> = vec![std::ptr::null_mut(); 256];
    loop {
        let bytes = (list.len() * std::mem::size_of::<Module>()) as u32;
        let mut needed = 0u32;
        // SAFETY: a buffer of `bytes` bytes for module handles of this process.
        let ok = unsafe {
            win::K32EnumProcessModules(
                win::GetCurrentProcess(),
                list.as_mut_ptr(),
                bytes,
                &mut needed,
            )
        };
        if ok == 0 {
            return Vec::new();
        }
        let count = needed as usize / std::mem::size_of::<Module>();
        if count <= list.len() {
            list.truncate(count);
            return list;
        }
        list.resize(count + 64, std::ptr::null_mut());
    }
}

/// The module's full path, lower-cased (module names on Windows ignore case).
pub fn path_of(module: Module) -> String {
    module_path(module).to_string_lossy().to_lowercase()
}

/// The module's full path as the loader has it.
// A module handle is an opaque token to the loader, never read through here; a stale one
// makes the call fail, and the path comes back empty.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn module_path(module: Module) -> std::ffi::OsString {
    let mut buf = vec![0u16; 512];
    loop {
        // SAFETY: a buffer of the size given.
        let n = unsafe { win::GetModuleFileNameW(module, buf.as_mut_ptr(), buf.len() as u32) };
        // A full buffer means the path was cut short; paths end well below 32767 units.
        if (n as usize) < buf.len() || buf.len() >= 32768 {
            return std::ffi::OsString::from_wide(&buf[..(n as usize).min(buf.len())]);
        }
        buf.resize(buf.len() * 4, 0);
    }
}

/// The file name of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit(|c| c == '\\' || c == '/')
        .next()
        .unwrap_or(path)
}

/// Whether the lower-cased file name `file` is one of `libs` (file-name prefixes; a Linux-style
/// `lib` prefix is dropped, so `librocblas` names `rocblas.dll`).
pub fn is_one_of(file: &str, libs: &[&str]) -> bool {
    file.ends_with(".dll")
        && libs.iter().any(|lib| {
            let lib = lib.strip_prefix("lib").unwrap_or(lib).to_ascii_lowercase();
            file.starts_with(&lib)
        })
}

/// The address of `name` in the first loaded module that is one of `libs`, or 0.
pub fn find_export(libs: &[&str], name: &CStr) -> usize {
    let _keep = win::KeepLastError::new();
    for module in modules() {
        if is_one_of(file_name(&path_of(module)), libs) {
            // SAFETY: a loaded module and a NUL-terminated name; our own import of
            // GetProcAddress is never patched.
            let found = unsafe { win::GetProcAddress(module, name.as_ptr()) };
            if !found.is_null() {
                return found as usize;
            }
        }
    }
    0
}
