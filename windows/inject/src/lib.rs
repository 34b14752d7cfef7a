//! Loading rocmguard.dll into a child started suspended, before the child's own code runs: the
//! DLL's path is written into the child and a thread of the child runs `LoadLibraryW` on it
//! (`CreateRemoteThread`). Used by rocmguard.exe for the program it starts, and by rocmguard.dll
//! for the processes that program starts in turn (a venv's `python.exe` is a launcher that
//! starts the real interpreter; torchrun starts its ranks).
//!
//! `LoadLibraryW` lives in kernel32, which Windows maps at the same address in every process of
//! a boot, so our address of it is the child's. The DLL hooks the child while it loads (its
//! `DllMain`), so when the thread ends the child is guarded.
//!
//! Chosen over an early-bird APC (queued to the suspended main thread) because the injector
//! learns the result before it lets the child run: the thread's exit code is `LoadLibraryW`'s
//! result (its low 32 bits), zero when the load failed. Both work under wine.
// `Handle` is an opaque OS handle, passed to the OS and never dereferenced here (the OS
// checks it), so the functions that take one are safe.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::c_void;
use std::os::windows::ffi::OsStrExt;
use std::path::Path;

/// A Windows handle, closed when dropped.
pub struct Owned(pub Handle);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: a handle we opened and nobody else closes.
        unsafe { CloseHandle(self.0) };
    }
}

pub type Handle = *mut c_void;

const TH32CS_SNAPTHREAD: u32 = 0x4;
const THREAD_SUSPEND_RESUME: u32 = 0x2;
const MEM_COMMIT: u32 = 0x1000;
const MEM_RESERVE: u32 = 0x2000;
const MEM_RELEASE: u32 = 0x8000;
const PAGE_READWRITE: u32 = 0x04;
const WAIT_OBJECT_0: u32 = 0;
const INVALID_HANDLE_VALUE: Handle = -1isize as Handle;
/// How long the DLL may take to load and hook the child.
const LOAD_TIMEOUT_MS: u32 = 60_000;

/// `THREADENTRY32`.
#[repr(C)]
struct ThreadEntry {
    size: u32,
    usage: u32,
    thread_id: u32,
    owner_process_id: u32,
    base_priority: i32,
    delta_priority: i32,
    flags: u32,
}

#[link(name = "kernel32")]
extern "system" {
    fn CloseHandle(handle: Handle) -> i32;
    fn CreateToolhelp32Snapshot(flags: u32, process_id: u32) -> Handle;
    fn Thread32First(snapshot: Handle, entry: *mut ThreadEntry) -> i32;
    fn Thread32Next(snapshot: Handle, entry: *mut ThreadEntry) -> i32;
    fn OpenThread(access: u32, inherit: i32, thread_id: u32) -> Handle;
    fn ResumeThread(thread: Handle) -> u32;
    fn GetModuleHandleW(name: *const u16) -> Handle;
    fn GetProcAddress(module: Handle, name: *const u8) -> *mut c_void;
    fn VirtualAllocEx(
        process: Handle,
        addr: *mut c_void,
        size: usize,
        kind: u32,
        protect: u32,
    ) -> *mut c_void;
    fn VirtualFreeEx(process: Handle, addr: *mut c_void, size: usize, kind: u32) -> i32;
    fn WriteProcessMemory(
        process: Handle,
        addr: *mut c_void,
        data: *const c_void,
        size: usize,
        written: *mut usize,
    ) -> i32;
    fn CreateRemoteThread(
        process: Handle,
        attributes: *mut c_void,
        stack: usize,
        start: *mut c_void,
        parameter: *mut c_void,
        flags: u32,
        thread_id: *mut u32,
    ) -> Handle;
    fn WaitForSingleObject(handle: Handle, ms: u32) -> u32;
    fn GetExitCodeThread(thread: Handle, code: *mut u32) -> i32;
    fn IsWow64Process(process: Handle, wow64: *mut i32) -> i32;
    fn GetLastError() -> u32;
}

fn last_error(what: &str) -> String {
    // SAFETY: no arguments.
    let code = unsafe { GetLastError() };
    format!(
        "{} failed ({})",
        what,
        std::io::Error::from_raw_os_error(code as i32)
    )
}

/// The main (only) thread of a child just started suspended, opened to resume it.
pub fn main_thread(pid: u32) -> Result<Owned, String> {
    // SAFETY: a snapshot we own, walked with a correctly sized entry.
    unsafe {
        let snapshot = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
        if snapshot == INVALID_HANDLE_VALUE {
            return Err(last_error("CreateToolhelp32Snapshot"));
        }
        let snapshot = Owned(snapshot);
        let mut entry = ThreadEntry {
            size: std::mem::size_of::<ThreadEntry>() as u32,
            usage: 0,
            thread_id: 0,
            owner_process_id: 0,
            base_priority: 0,
            delta_priority: 0,
            flags: 0,
        };
        let mut more = Thread32First(snapshot.0, &mut entry) != 0;
        while more {
            if entry.owner_process_id == pid {
                let thread = OpenThread(THREAD_SUSPEND_RESUME, 0, entry.thread_id);
                if thread.is_null() {
                    return Err(last_error("OpenThread"));
                }
                return Ok(Owned(thread));
            }
            more = Thread32Next(snapshot.0, &mut entry) != 0;
        }
        Err(format!("no thread of process {} found", pid))
    }
}

/// Lets a suspended thread run.
pub fn resume(thread: Handle) -> Result<(), String> {
    // SAFETY: a thread handle with THREAD_SUSPEND_RESUME access (ResumeThread checks it).
    if unsafe { ResumeThread(thread) } == u32::MAX {
        return Err(last_error("ResumeThread"));
    }
    Ok(())
}

/// Loads `dll` into the suspended `process` and waits until it is loaded (and has hooked).
pub fn inject(process: Handle, dll: &Path) -> Result<(), String> {
    let mut wow64 = 0;
    // SAFETY: a process handle with query rights (CreateProcess gives all rights).
    if unsafe { IsWow64Process(process, &mut wow64) } != 0 && wow64 != 0 {
        return Err("the program is 32-bit; rocmguard.dll and the HIP runtime are 64-bit".into());
    }
    let path: Vec<u16> = dll.as_os_str().encode_wide().chain(Some(0)).collect();
    let bytes = path.len() * 2;
    // SAFETY: memory allocated in the child, written with our buffer of `bytes` bytes, and
    // released once the thread that reads it has ended.
    unsafe {
        let kernel32: Vec<u16> = "kernel32.dll".encode_utf16().chain(Some(0)).collect();
        let load_library = GetProcAddress(
            GetModuleHandleW(kernel32.as_ptr()),
            b"LoadLibraryW\0".as_ptr(),
        );
        if load_library.is_null() {
            return Err(last_error("GetProcAddress(LoadLibraryW)"));
        }
        let remote = VirtualAllocEx(
            process,
            std::ptr::null_mut(),
            bytes,
            MEM_COMMIT | MEM_RESERVE,
            PAGE_READWRITE,
        );
        if remote.is_null() {
            return Err(last_error("VirtualAllocEx"));
        }
        let mut written = 0;
        if WriteProcessMemory(
            process,
            remote,
            path.as_ptr() as *const c_void,
            bytes,
            &mut written,
        ) == 0
            || written != bytes
        {
            let e = last_error("WriteProcessMemory");
            VirtualFreeEx(process, remote, 0, MEM_RELEASE);
            return Err(e);
        }
        let thread = CreateRemoteThread(
            process,
            std::ptr::null_mut(),
            0,
            load_library,
            remote,
            0,
            std::ptr::null_mut(),
        );
        if thread.is_null() {
            let e = last_error("CreateRemoteThread");
            VirtualFreeEx(process, remote, 0, MEM_RELEASE);
            return Err(e);
        }
        let thread = Owned(thread);
        if WaitForSingleObject(thread.0, LOAD_TIMEOUT_MS) != WAIT_OBJECT_0 {
            return Err(format!(
                "LoadLibraryW in the child did not finish in {} s",
                LOAD_TIMEOUT_MS / 1000
            ));
        }
        VirtualFreeEx(process, remote, 0, MEM_RELEASE);
        let mut code = 0;
        if GetExitCodeThread(thread.0, &mut code) == 0 {
            return Err(last_error("GetExitCodeThread"));
        }
        if code == 0 {
            return Err(
                "LoadLibraryW failed in the child (not a 64-bit DLL, a dependency missing, or \
                 blocked by security software)"
                    .into(),
            );
        }
    }
    Ok(())
}
