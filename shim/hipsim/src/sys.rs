//! Everything that is specific to the platform: mapping the host memory behind "device"
//! pointers and finding this library's own exports. Unix uses `mmap` and `dladdr` + `dlsym`;
//! Windows (the `amdhip64_6.dll` build) uses `VirtualAlloc` and `GetModuleHandleExW` +
//! `GetProcAddress`. Both offer `map`, `unmap`, `own_symbol` and the page size behind
//! `mapped_len`. The virtual memory calls (`vmm`) are Linux only: `linux_vmm` reserves address
//! ranges and maps `memfd` "physical memory" into them; elsewhere `no_vmm` stands in, and
//! `VMM` is false so that `vmm` answers `hipErrorNotSupported` before reaching it.

#[cfg(target_os = "linux")]
pub use linux_vmm::{
    close, free_reservation, map_physical, open_shared, protect, reserve, share_in_place,
    unmap_physical, Physical,
};
#[cfg(not(target_os = "linux"))]
pub use no_vmm::{
    close, free_reservation, map_physical, open_shared, protect, reserve, share_in_place,
    unmap_physical, Physical,
};
#[cfg(unix)]
pub use unix::{linked_symbol, map, own_symbol, unmap};
#[cfg(windows)]
pub use windows::{linked_symbol, map, own_symbol, unmap};

/// What the device may do with a block (and so the host protection `protect` gives it): always `ReadWrite` for allocations; for a mapping what
/// `hipMemSetAccess` last granted (`None` until then), as `hipMemAccessFlags` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    None = 0,
    Read = 1,
    ReadWrite = 3,
}

/// Whether this platform has the virtual memory primitives below.
pub const VMM: bool = cfg!(target_os = "linux");

/// Allocations of at least this size get addresses aligned to it, like the real runtime's
/// large-page allocations.
pub const LARGE: usize = 2 << 20;

/// Bytes that `map(size)` reserves and `unmap` must be given back: `size` rounded up to pages.
pub fn mapped_len(size: usize) -> Option<usize> {
    #[cfg(unix)]
    let page = unix::page_size();
    #[cfg(windows)]
    let page = windows::page_size();
    size.checked_add(page - 1).map(|n| n / page * page)
}

#[cfg(unix)]
mod unix {
    use std::ffi::{c_void, CStr};
    use std::os::raw::c_int;
    use std::ptr;
    use std::sync::atomic::{AtomicPtr, Ordering};

    use super::{mapped_len, LARGE};

    pub fn page_size() -> usize {
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
        anonymous(len, align, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// An anonymous private mapping of `len` bytes (a multiple of the page size) with protection
    /// `prot`, at an address aligned to `align` (a power of two): over-map, then trim both ends.
    pub fn anonymous(len: usize, align: usize, prot: c_int) -> Option<*mut u8> {
        let reserve = len.checked_add(align - 1)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                reserve,
                prot,
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

    /// The definition of `name` that a call from this library through its PLT binds to (a
    /// library linked without `-Bsymbolic`): the first in this library's lookup scope, so a
    /// preloaded library's export before its own. Null when there is none.
    pub fn linked_symbol(name: &CStr) -> *mut c_void {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the caller's scope.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
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
}

/// Address ranges and "physical memory" for `hipMemAddressReserve`, `hipMemCreate`,
/// `hipMemMap`, `hipMemSetAccess` and `hipMemUnmap`: a reservation is an inaccessible anonymous
/// mapping; a handle's memory is a `memfd` of its size; mapping it puts the file over part of a
/// reservation (`MAP_FIXED | MAP_SHARED`), so every mapping of one handle shows the same bytes,
/// and unmapping puts an inaccessible anonymous mapping back.
#[cfg(target_os = "linux")]
mod linux_vmm {
    use std::ffi::c_void;
    use std::os::raw::{c_char, c_int};

    use super::unix::anonymous;
    use super::Access;

    const RESERVED: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;

    /// The memory behind one `hipMemCreate` handle; closed when dropped (the pages go when the
    /// last mapping of them does).
    #[derive(Debug)]
    pub struct Physical {
        fd: c_int,
    }

    impl Physical {
        /// A `memfd` of `size` bytes (sparse: pages cost memory only once touched).
        pub fn create(size: usize) -> Option<Physical> {
            let len = libc::off_t::try_from(size).ok()?;
            let name = b"hipsim-vram\0";
            // SAFETY: a NUL-terminated name; the descriptor is owned by the value made here.
            let fd =
                unsafe { libc::memfd_create(name.as_ptr() as *const c_char, libc::MFD_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            let physical = Physical { fd };
            // SAFETY: a descriptor this value owns.
            match unsafe { libc::ftruncate(fd, len) } {
                0 => Some(physical),
                _ => None,
            }
        }

        /// A new descriptor for the same memory, for `hipMemExportToShareableHandle`: the
        /// caller owns it (and may pass it to another process).
        pub fn export(&self) -> Option<c_int> {
            // SAFETY: a descriptor this value owns; the copy is the caller's.
            let fd = unsafe { libc::fcntl(self.fd, libc::F_DUPFD_CLOEXEC, 0) };
            (fd >= 0).then_some(fd)
        }

        /// The memory behind a descriptor `export` made (in this process or another), and its
        /// size; the caller keeps its own descriptor.
        pub fn import(fd: c_int) -> Option<(Physical, usize)> {
            // SAFETY: fstat writes the struct; a bad descriptor is an error, not UB.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_size <= 0 {
                return None;
            }
            // SAFETY: as in `export`.
            let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            (own >= 0).then(|| (Physical { fd: own }, st.st_size as usize))
        }
    }

    impl Drop for Physical {
        fn drop(&mut self) {
            // SAFETY: the descriptor is owned by this value and closed once.
            unsafe { libc::close(self.fd) };
        }
    }

    /// Moves the bytes of the private mapping `[ptr, ptr + size)` (made by `map(size)`) into a
    /// new `memfd` mapped shared over the same addresses, for `hipIpcGetMemHandle`; the file's
    /// descriptor, or `None` (the mapping is then unchanged).
    ///
    /// # Safety
    /// `ptr` and `size` are a live mapping of `map`, nothing else using it meanwhile.
    pub unsafe fn share_in_place(ptr: *mut u8, size: usize) -> Option<c_int> {
        let len = super::mapped_len(size)?;
        let physical = Physical::create(len)?;
        let fd = physical.export()?;
        drop(physical);
        let copied = libc::pwrite(fd, ptr as *const c_void, len, 0) == len as isize;
        let shared = copied
            && libc::mmap(
                ptr as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                0,
            ) == ptr as *mut c_void;
        if !shared {
            libc::close(fd);
            return None;
        }
        Some(fd)
    }

    /// Maps another process's shared allocation (`share_in_place`'s descriptor `fd` in process
    /// `pid`, `size` bytes) at a new address, through `/proc/<pid>/fd/<fd>`.
    pub fn open_shared(pid: u32, fd: c_int, size: usize) -> Option<*mut u8> {
        let len = super::mapped_len(size)?;
        let path = std::ffi::CString::new(format!("/proc/{}/fd/{}", pid, fd)).ok()?;
        // SAFETY: a NUL-terminated path; the descriptor is closed below, the mapping stays.
        unsafe {
            let own = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if own < 0 {
                return None;
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                own,
                0,
            );
            libc::close(own);
            (p != libc::MAP_FAILED).then_some(p as *mut u8)
        }
    }

    pub fn close(fd: c_int) {
        // SAFETY: a descriptor the caller owns, closed once.
        unsafe { libc::close(fd) };
    }

    /// Reserves `size` bytes of address space (a multiple of the page size), inaccessible and
    /// backed by nothing, at an address aligned to `align` (a power of two). `hint` (0 for
    /// none) is tried first when it is aligned, as the real runtime treats it: a wish.
    pub fn reserve(size: usize, align: usize, hint: usize) -> Option<*mut u8> {
        if hint != 0 && hint % align == 0 {
            // SAFETY: without MAP_FIXED the kernel uses the hint only if the range is free.
            let got =
                unsafe { libc::mmap(hint as *mut c_void, size, libc::PROT_NONE, RESERVED, -1, 0) };
            if got as usize == hint {
                return Some(got as *mut u8);
            }
            if got != libc::MAP_FAILED {
                // SAFETY: the mapping just made, elsewhere than wished.
                unsafe { libc::munmap(got, size) };
            }
        }
        anonymous(size, align, libc::PROT_NONE)
    }

    /// Gives back a reservation.
    ///
    /// # Safety
    /// `ptr` and `size` must be exactly a range `reserve` returned, with no mapping in use.
    pub unsafe fn free_reservation(ptr: *mut u8, size: usize) {
        libc::munmap(ptr as *mut c_void, size);
    }

    /// Maps the first `size` bytes of `physical` at `ptr`, inaccessible until `protect`.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` must be page-aligned, inside a reservation and not mapped yet, and
    /// `size` at most the size of `physical`.
    pub unsafe fn map_physical(ptr: *mut u8, size: usize, physical: &Physical) -> bool {
        let flags = libc::MAP_SHARED | libc::MAP_FIXED;
        let got = libc::mmap(
            ptr as *mut c_void,
            size,
            libc::PROT_NONE,
            flags,
            physical.fd,
            0,
        );
        got as *mut u8 == ptr
    }

    /// Puts the reservation back over a mapping made by `map_physical`.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` must be exactly such a mapping, no longer in use.
    pub unsafe fn unmap_physical(ptr: *mut u8, size: usize) -> bool {
        let flags = RESERVED | libc::MAP_FIXED;
        let got = libc::mmap(ptr as *mut c_void, size, libc::PROT_NONE, flags, -1, 0);
        got as *mut u8 == ptr
    }

    /// Sets what may be done with a mapping made by `map_physical`.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` must be such a mapping; no reference into it may outlive a downgrade.
    pub unsafe fn protect(ptr: *mut u8, size: usize, access: Access) -> bool {
        let prot = match access {
            Access::None => libc::PROT_NONE,
            Access::Read => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        libc::mprotect(ptr as *mut c_void, size, prot) == 0
    }
}

/// Stand-ins where there are no virtual memory primitives (Windows): never reached, since
/// `VMM` is false there and the calls answer `hipErrorNotSupported` first.
#[cfg(not(target_os = "linux"))]
mod no_vmm {
    use super::Access;

    #[derive(Debug)]
    pub struct Physical;

    impl Physical {
        pub fn create(_size: usize) -> Option<Physical> {
            None
        }

        pub fn export(&self) -> Option<i32> {
            None
        }

        pub fn import(_fd: i32) -> Option<(Physical, usize)> {
            None
        }
    }

    /// # Safety
    /// Nothing to uphold: nothing is done here.
    pub unsafe fn share_in_place(_ptr: *mut u8, _size: usize) -> Option<i32> {
        None
    }

    pub fn open_shared(_pid: u32, _fd: i32, _size: usize) -> Option<*mut u8> {
        None
    }

    pub fn close(_fd: i32) {}

    pub fn reserve(_size: usize, _align: usize, _hint: usize) -> Option<*mut u8> {
        None
    }

    /// # Safety
    /// Does nothing.
    pub unsafe fn free_reservation(_ptr: *mut u8, _size: usize) {}

    /// # Safety
    /// Does nothing.
    pub unsafe fn map_physical(_ptr: *mut u8, _size: usize, _physical: &Physical) -> bool {
        false
    }

    /// # Safety
    /// Does nothing.
    pub unsafe fn unmap_physical(_ptr: *mut u8, _size: usize) -> bool {
        false
    }

    /// # Safety
    /// Does nothing.
    pub unsafe fn protect(_ptr: *mut u8, _size: usize, _access: Access) -> bool {
        false
    }
}

#[cfg(windows)]
mod windows {
    use std::ffi::{c_void, CStr};
    use std::ptr;
    use std::sync::atomic::{AtomicPtr, Ordering};

    use super::{mapped_len, LARGE};

    const MEM_COMMIT: u32 = 0x1000;
    const MEM_RESERVE: u32 = 0x2000;
    const MEM_RELEASE: u32 = 0x8000;
    const PAGE_NOACCESS: u32 = 0x01;
    const PAGE_READWRITE: u32 = 0x04;
    const GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT: u32 = 0x2;
    const GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS: u32 = 0x4;

    /// `SYSTEM_INFO`.
    #[repr(C)]
    struct SystemInfo {
        oem_id: u32,
        page_size: u32,
        minimum_application_address: *mut c_void,
        maximum_application_address: *mut c_void,
        active_processor_mask: usize,
        number_of_processors: u32,
        processor_type: u32,
        allocation_granularity: u32,
        processor_level: u16,
        processor_revision: u16,
    }

    /// `MEMORY_BASIC_INFORMATION`.
    #[repr(C)]
    struct MemoryBasicInformation {
        base_address: *mut c_void,
        allocation_base: *mut c_void,
        allocation_protect: u32,
        partition_id: u16,
        region_size: usize,
        state: u32,
        protect: u32,
        kind: u32,
    }

    #[link(name = "kernel32")]
    extern "system" {
        fn GetSystemInfo(info: *mut SystemInfo);
        fn VirtualAlloc(addr: *mut c_void, size: usize, kind: u32, protect: u32) -> *mut c_void;
        fn VirtualFree(addr: *mut c_void, size: usize, kind: u32) -> i32;
        fn VirtualQuery(
            addr: *const c_void,
            info: *mut MemoryBasicInformation,
            len: usize,
        ) -> usize;
        fn GetModuleHandleExW(flags: u32, name: *const u16, module: *mut *mut c_void) -> i32;
        fn GetProcAddress(module: *mut c_void, name: *const u8) -> *mut c_void;
    }

    pub fn page_size() -> usize {
        // SAFETY: GetSystemInfo fills the struct it is given and cannot fail.
        let page = unsafe {
            let mut info: SystemInfo = std::mem::zeroed();
            GetSystemInfo(&mut info);
            info.page_size as usize
        };
        if page > 0 {
            page
        } else {
            4096
        }
    }

    /// Commits `mapped_len(size)` bytes of zeroed memory (pages become real when touched):
    /// address aligned to 2 MiB when `size >= LARGE` (reserve more, commit the aligned part),
    /// aligned to the 64 KiB allocation granularity (so >= 256) otherwise. `unmap` releases the
    /// whole reservation, found again with `VirtualQuery`.
    pub fn map(size: usize) -> Option<*mut u8> {
        let len = mapped_len(size)?;
        let align = if size >= LARGE { LARGE } else { 1 };
        let reserve = len.checked_add(align - 1)?;
        // SAFETY: a fresh reservation at an address of the system's choosing; the commit lies
        // inside it, and a failed commit gives the reservation back.
        unsafe {
            let base = VirtualAlloc(ptr::null_mut(), reserve, MEM_RESERVE, PAGE_NOACCESS);
            if base.is_null() {
                return None;
            }
            let start = (base as usize + align - 1) / align * align;
            let committed = VirtualAlloc(start as *mut c_void, len, MEM_COMMIT, PAGE_READWRITE);
            if committed.is_null() {
                VirtualFree(base, 0, MEM_RELEASE);
                return None;
            }
            Some(start as *mut u8)
        }
    }

    /// Returns a range made by `map(size)`.
    ///
    /// # Safety
    /// `ptr` must come from `map(size)` with the same `size`, and not be used afterwards.
    pub unsafe fn unmap(ptr: *mut u8, size: usize) {
        let _ = size;
        let mut info: MemoryBasicInformation = std::mem::zeroed();
        let len = std::mem::size_of::<MemoryBasicInformation>();
        if VirtualQuery(ptr as *const c_void, &mut info, len) == len {
            VirtualFree(info.allocation_base, 0, MEM_RELEASE);
        }
    }

    /// The address of `name` as this DLL itself exports it, looked up through its own module
    /// handle, whatever another module exports under the same name (as the real runtime's
    /// `hipGetProcAddress` does). Null when there is no such export.
    pub fn own_symbol(name: &CStr) -> *mut c_void {
        let module = own_module();
        if module.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a module that stays loaded while its own code runs, a NUL-terminated name.
        unsafe { GetProcAddress(module, name.as_ptr() as *const u8) }
    }

    /// A DLL's calls to its own functions never go through its import table, so nothing can
    /// stand in for them: its own export.
    pub fn linked_symbol(name: &CStr) -> *mut c_void {
        own_symbol(name)
    }

    fn own_module() -> *mut c_void {
        static MODULE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
        let cached = MODULE.load(Ordering::Acquire);
        if !cached.is_null() {
            return cached;
        }
        let mut module = ptr::null_mut();
        let flags =
            GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT;
        // SAFETY: with FROM_ADDRESS the name is an address inside this DLL; no reference taken.
        let found = unsafe { GetModuleHandleExW(flags, own_module as *const u16, &mut module) };
        if found == 0 {
            return ptr::null_mut();
        }
        MODULE.store(module, Ordering::Release);
        module
    }
}
