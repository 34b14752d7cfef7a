//! Everything that is specific to Unix: mapping the host memory behind "device" pointers and
//! finding this library's own exports. A Windows build would replace this module alone
//! (`VirtualAlloc`/`VirtualFree`, `GetModuleHandleExW` + `GetProcAddress`).

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Allocations of at least this size get addresses aligned to it, like the real runtime's
/// large-page allocations.
pub const LARGE: usize = 2 << 20;

/// Bytes that `map(size)` reserves and `unmap` must be given back: `size` rounded up to pages.
pub fn mapped_len(size: usize) -> Option<usize> {
    let page = page_size();
    size.checked_add(page - 1).map(|n| n / page * page)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as usize
    } else {
        4096
    }
}

/// Maps `mapped_len(size)` bytes of zeroed, lazily committed memory: address aligned to 2 MiB
/// when `size >= LARGE` (over-map, then trim both ends), page-aligned (so >= 256) otherwise.
/// `MAP_NORESERVE` lets a 16 GiB simulated device cost nothing until pages are touched.
pub fn map(size: usize) -> Option<*mut u8> {
    let len = mapped_len(size)?;
    let align = if size >= LARGE { LARGE } else { 1 };
    let reserve = len.checked_add(align - 1)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base as usize;
    let start = (base + align - 1) / align * align;
    let end = start + len;
    // SAFETY: both ranges lie inside the mapping made above and nothing else refers to them.
    unsafe {
        if start > base {
            libc::munmap(base as *mut c_void, start - base);
        }
        if base + reserve > end {
            libc::munmap(end as *mut c_void, base + reserve - end);
        }
    }
    Some(start as *mut u8)
}

/// Returns a range made by `map(size)`.
///
/// # Safety
/// `ptr` must come from `map(size)` with the same `size`, and not be used afterwards.
pub unsafe fn unmap(ptr: *mut u8, size: usize) {
    if let Some(len) = mapped_len(size) {
        libc::munmap(ptr as *mut c_void, len);
    }
}

/// The address of `name` as this library itself defines it, whatever a preloaded library
/// exports under the same name: the lookup goes through this library's own handle, as the real
/// runtime's `hipGetProcAddress` does. Null when there is no such export.
pub fn own_symbol(name: &CStr) -> *mut c_void {
    let handle = own_handle();
    if handle.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a live handle (never closed) and a NUL-terminated name.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

fn own_handle() -> *mut c_void {
    static HANDLE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    let cached = HANDLE.load(Ordering::Acquire);
    if !cached.is_null() {
        return cached;
    }
    // SAFETY: dladdr fills `info` for an address inside this library; its file name is then
    // reopened without loading anything new (RTLD_NOLOAD) to get this library's handle.
    let handle = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = own_handle as *const c_void;
        if libc::dladdr(here, &mut info) == 0 || info.dli_fname.is_null() {
            return ptr::null_mut();
        }
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOLOAD | libc::RTLD_LAZY | libc::RTLD_LOCAL,
        )
    };
    if !handle.is_null()
        && HANDLE
            .compare_exchange(ptr::null_mut(), handle, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        // Another thread cached its handle first; drop the extra reference.
        // SAFETY: `handle` came from the dlopen above.
        unsafe { libc::dlclose(handle) };
        return HANDLE.load(Ordering::Acquire);
    }
    handle
}
