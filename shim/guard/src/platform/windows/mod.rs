//! Windows: the injected DLL's side of [`crate::platform`].

pub mod group;
pub mod ipc;
pub mod modules;
pub mod process;
pub mod win;

use std::ffi::CStr;

use rocmguard_core::topology;

/// The exit table (`DllMain` detach) runs after Windows killed the other threads, possibly
/// inside a hook: it reads the pools only when no hook body is running.
pub const COUNTS_HOOKS: bool = true;

/// The address of `name` in the first loaded module that is one of `libs`, or 0. DLL exports
/// have no versions.
pub fn find_symbol(name: &CStr, _version: &CStr, libs: &[&str]) -> usize {
    modules::find_export(libs, name)
}

/// Writes `bytes` to the standard error handle, whole (possibly null or invalid: then nothing
/// happens).
pub fn write_stderr(bytes: &[u8]) {
    // SAFETY: the process's own standard error handle and a valid buffer.
    unsafe {
        let handle = win::GetStdHandle(win::STD_ERROR_HANDLE);
        let mut rest = bytes;
        while !rest.is_empty() && !handle.is_null() {
            let mut written = 0u32;
            let chunk = rest.len().min(u32::MAX as usize) as u32;
            let ok = win::WriteFile(
                handle,
                rest.as_ptr(),
                chunk,
                &mut written,
                std::ptr::null_mut(),
            );
            if ok == 0 || written == 0 {
                break;
            }
            rest = &rest[written as usize..];
        }
    }
}

/// The calling thread's id (the trace's `Thread Id`).
pub fn thread_id() -> u64 {
    // SAFETY: no arguments.
    unsafe { win::GetCurrentThreadId() as u64 }
}

/// WDDM lets an integrated GPU use shared system memory up to half of RAM; bounded by RAM less
/// `host_reserve`. Not checked on a real APU (see docs/windows.md).
pub fn unified_memory_ceiling(host_reserve: rocmguard_core::Limit) -> Result<u64, String> {
    let mut status = win::MemoryStatus {
        length: std::mem::size_of::<win::MemoryStatus>() as u32,
        memory_load: 0,
        total_phys: 0,
        avail_phys: 0,
        total_page_file: 0,
        avail_page_file: 0,
        total_virtual: 0,
        avail_virtual: 0,
        avail_extended_virtual: 0,
    };
    // SAFETY: a struct of the size its first field says.
    if unsafe { win::GlobalMemoryStatusEx(&mut status) } == 0 {
        return Err("the system's memory size is unknown".into());
    }
    let ram = status.total_phys;
    Ok(topology::uma_ceiling(ram / 2, None, ram, host_reserve))
}

/// The trace's tail is written at `DllMain` detach; a console's Ctrl-C ends the process
/// through the same path.
pub fn on_sigterm(_flush: fn()) {}
