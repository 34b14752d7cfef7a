//! The few Windows API items the DLL uses, declared here so the crate needs no bindings crate
//! (nothing to vendor for the Debian 1.63 cross build). x86-64 only: `extern "system"` is the
//! one Windows x64 calling convention, the same as `extern "C"` there.

use std::ffi::c_void;
use std::os::raw::c_char;

pub type Module = *mut c_void;
pub type Handle = *mut c_void;

pub const DLL_PROCESS_ATTACH: u32 = 1;
pub const DLL_PROCESS_DETACH: u32 = 0;

pub const GET_MODULE_HANDLE_EX_FLAG_PIN: u32 = 0x1;
pub const GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS: u32 = 0x4;

/// `LoadLibraryEx` flags that map a file without making it a module whose code can run.
pub const LOAD_AS_DATA: u32 = 0x2 | 0x20 | 0x40; // DATAFILE, IMAGE_RESOURCE, DATAFILE_EXCLUSIVE

pub const PAGE_READWRITE: u32 = 0x04;
pub const PAGE_EXECUTE_READWRITE: u32 = 0x40;
/// PAGE_EXECUTE, _READ, _READWRITE and _WRITECOPY.
pub const PAGE_ANY_EXECUTE: u32 = 0x10 | 0x20 | 0x40 | 0x80;

/// `CreateProcess` flags: start suspended; started under a debugger (left alone).
pub const CREATE_SUSPENDED: u32 = 0x4;
pub const DEBUG_FLAGS: u32 = 0x1 | 0x2; // DEBUG_PROCESS | DEBUG_ONLY_THIS_PROCESS

pub const STD_ERROR_HANDLE: u32 = -12i32 as u32;

/// `MEMORY_BASIC_INFORMATION`.
#[repr(C)]
pub struct MemoryBasicInformation {
    pub base_address: *mut c_void,
    pub allocation_base: *mut c_void,
    pub allocation_protect: u32,
    pub partition_id: u16,
    pub region_size: usize,
    pub state: u32,
    pub protect: u32,
    pub kind: u32,
}

/// `MEMORYSTATUSEX`.
#[repr(C)]
pub struct MemoryStatus {
    pub length: u32,
    pub memory_load: u32,
    pub total_phys: u64,
    pub avail_phys: u64,
    pub total_page_file: u64,
    pub avail_page_file: u64,
    pub total_virtual: u64,
    pub avail_virtual: u64,
    pub avail_extended_virtual: u64,
}

/// `PROCESS_INFORMATION`.
#[repr(C)]
pub struct ProcessInformation {
    pub process: Handle,
    pub thread: Handle,
    pub process_id: u32,
    pub thread_id: u32,
}

#[link(name = "kernel32")]
extern "system" {
    pub fn GetModuleHandleExW(flags: u32, name: *const u16, module: *mut Module) -> i32;
    pub fn GetProcAddress(module: Module, name: *const c_char) -> *mut c_void;
    pub fn LoadLibraryA(name: *const c_char) -> Module;
    pub fn LoadLibraryW(name: *const u16) -> Module;
    pub fn LoadLibraryExA(name: *const c_char, file: Handle, flags: u32) -> Module;
    pub fn LoadLibraryExW(name: *const u16, file: Handle, flags: u32) -> Module;
    pub fn CreateProcessA(
        application: *const c_char,
        command_line: *mut c_char,
        process_attributes: *mut c_void,
        thread_attributes: *mut c_void,
        inherit_handles: i32,
        flags: u32,
        environment: *mut c_void,
        current_directory: *const c_char,
        startup_info: *mut c_void,
        information: *mut ProcessInformation,
    ) -> i32;
    pub fn CreateProcessW(
        application: *const u16,
        command_line: *mut u16,
        process_attributes: *mut c_void,
        thread_attributes: *mut c_void,
        inherit_handles: i32,
        flags: u32,
        environment: *mut c_void,
        current_directory: *const u16,
        startup_info: *mut c_void,
        information: *mut ProcessInformation,
    ) -> i32;
    pub fn DisableThreadLibraryCalls(module: Module) -> i32;
    pub fn FreeLibrary(module: Module) -> i32;
    pub fn GetModuleFileNameW(module: Module, name: *mut u16, size: u32) -> u32;
    pub fn GetWindowsDirectoryW(buffer: *mut u16, size: u32) -> u32;
    pub fn K32EnumProcessModules(
        process: Handle,
        modules: *mut Module,
        bytes: u32,
        needed: *mut u32,
    ) -> i32;
    pub fn GetCurrentProcess() -> Handle;
    pub fn GetCurrentProcessId() -> u32;
    pub fn GetCurrentThreadId() -> u32;
    pub fn GetLastError() -> u32;
    pub fn SetLastError(code: u32);
    pub fn VirtualProtect(addr: *mut c_void, size: usize, protect: u32, old: *mut u32) -> i32;
    pub fn VirtualQuery(
        addr: *const c_void,
        info: *mut MemoryBasicInformation,
        len: usize,
    ) -> usize;
    pub fn GlobalMemoryStatusEx(status: *mut MemoryStatus) -> i32;
    pub fn GetStdHandle(which: u32) -> Handle;
    pub fn WriteFile(
        file: Handle,
        data: *const u8,
        len: u32,
        written: *mut u32,
        overlapped: *mut c_void,
    ) -> i32;
}

/// Keeps the thread's last Windows error across our own work inside a hook, so a program that
/// reads `GetLastError` after a call we intercepted sees what the real call left there.
pub struct KeepLastError(u32);

impl KeepLastError {
    pub fn new() -> KeepLastError {
        // SAFETY: no arguments.
        KeepLastError(unsafe { GetLastError() })
    }
}

impl Default for KeepLastError {
    fn default() -> KeepLastError {
        KeepLastError::new()
    }
}

impl Drop for KeepLastError {
    fn drop(&mut self) {
        // SAFETY: no preconditions.
        unsafe { SetLastError(self.0) }
    }
}
