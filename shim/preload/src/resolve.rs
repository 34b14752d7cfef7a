//! Finding the real runtime functions behind our hooks, lazily at first call: through
//! `RTLD_NEXT` when the runtime is in the global scope, else in a loaded copy that a dlopened
//! module brought in `RTLD_LOCAL` (as Python loads extensions), by symbol version where the
//! library has versions. Our own lookups use the real `dlsym`, never our `dlsym` hook.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::vmm::{self, Vmm};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's own `dlsym`, found with `dlvsym` (which we do not hook).
pub fn real_dlsym() -> DlsymFn {
    let mut f = REAL_DLSYM.load(Ordering::Acquire);
    if f == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: dlvsym with valid C strings; RTLD_NEXT skips this library.
            f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            if f != 0 {
                break;
            }
        }
        assert!(f != 0, "glibc's dlsym not found");
        REAL_DLSYM.store(f, Ordering::Release);
    }
    // SAFETY: f is glibc's dlsym.
    unsafe { std::mem::transmute::<usize, DlsymFn>(f) }
}

/// A real function of a runtime library, resolved on first use and then cached.
pub struct Real<F> {
    name: &'static CStr,
    version: &'static CStr,
    libs: &'static [&'static str],
    addr: AtomicUsize,
    _f: PhantomData<F>,
}

// SAFETY: the only state is an atomic address.
unsafe impl<F> Sync for Real<F> {}

impl<F: Copy> Real<F> {
    pub const fn new(
        name: &'static CStr,
        version: &'static CStr,
        libs: &'static [&'static str],
    ) -> Real<F> {
        Real {
            name,
            version,
            libs,
            addr: AtomicUsize::new(0),
            _f: PhantomData,
        }
    }

    /// The function, or `None` while no loaded library defines it (looked up again next time:
    /// the runtime may be loaded later).
    #[inline]
    pub fn get(&self) -> Option<F> {
        let mut a = self.addr.load(Ordering::Acquire);
        if a == 0 {
            a = self.resolve();
            if a == 0 {
                return None;
            }
            self.addr.store(a, Ordering::Release);
        }
        // SAFETY: F is the function pointer type of the symbol, same size as usize.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// Remembers an address seen through `dlsym` or `hipGetProcAddress` when none is known yet.
    pub fn offer(&self, addr: usize) {
        let _ = self
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire);
    }

    fn resolve(&self) -> usize {
        // SAFETY: plain lookups with NUL-terminated names.
        unsafe {
            let mut a = 0;
            if !self.version.is_empty() {
                a = libc::dlvsym(libc::RTLD_NEXT, self.name.as_ptr(), self.version.as_ptr())
                    as usize;
            }
            if a == 0 {
                a = real_dlsym()(libc::RTLD_NEXT, self.name.as_ptr()) as usize;
            }
            if a == 0 {
                a = find_in_loaded(self.libs, self.name, self.version);
            }
            a
        }
    }
}

/// Looks `name` up in every loaded object whose file name starts with one of `libs`.
unsafe fn find_in_loaded(libs: &[&str], name: &CStr, version: &CStr) -> usize {
    for path in loaded_objects(libs) {
        let Ok(cpath) = std::ffi::CString::new(path) else {
            continue;
        };
        let handle = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if handle.is_null() {
            continue;
        }
        let mut a = 0;
        if !version.is_empty() {
            a = libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) as usize;
        }
        if a == 0 {
            a = real_dlsym()(handle, name.as_ptr()) as usize;
        }
        libc::dlclose(handle);
        if a != 0 {
            return a;
        }
    }
    0
}

/// Paths of loaded objects whose file name starts with one of `prefixes`.
pub fn loaded_objects(prefixes: &[&str]) -> Vec<String> {
    struct Search<'a> {
        prefixes: &'a [&'a str],
        found: Vec<String>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        let search = &mut *(data as *mut Search);
        let name = (*info).dlpi_name;
        if !name.is_null() {
            let path = CStr::from_ptr(name).to_string_lossy();
            let file = path.rsplit('/').next().unwrap_or("");
            if search.prefixes.iter().any(|p| file.starts_with(p)) {
                search.found.push(path.into_owned());
            }
        }
        0
    }
    let mut search = Search {
        prefixes,
        found: Vec::new(),
    };
    // SAFETY: the callback only reads the entries it is given.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// A runtime's virtual memory functions, found like the others (see [`crate::vmm`]).
pub struct VirtualMemory {
    pub granularity: Real<vmm::GranularityFn>,
    pub reserve: Real<vmm::ReserveFn>,
    pub address_free: Real<vmm::RangeFn>,
    pub create: Real<vmm::CreateFn>,
    pub release: Real<vmm::ReleaseFn>,
    pub map: Real<vmm::MapFn>,
    pub unmap: Real<vmm::RangeFn>,
    pub set_access: Real<vmm::SetAccessFn>,
    /// A plain copy, for [`Vmm::probe`].
    pub copy: vmm::CopyFn,
    pub export: Real<vmm::ExportFn>,
    pub import: Real<vmm::ImportFn>,
}

impl VirtualMemory {
    /// The functions for `device`, if all are there and the device maps at a granularity that
    /// divides the pool's 2 MiB pages.
    pub fn for_device(&self, device: c_int) -> Option<Vmm> {
        let v = Vmm {
            device,
            reserve: self.reserve.get()?,
            address_free: self.address_free.get()?,
            create: self.create.get()?,
            release: self.release.get()?,
            map: self.map.get()?,
            unmap: self.unmap.get()?,
            set_access: self.set_access.get()?,
            copy: self.copy,
            export: self.export.get(),
            import: self.import.get(),
            shareable: false,
        };
        v.fits_pages(self.granularity.get()?).then_some(v)
    }
}
