//! Finding a real runtime function on Linux: through
//! `RTLD_NEXT` when the runtime is in the global scope, else in a loaded copy that a dlopened
//! module brought in `RTLD_LOCAL` (as Python loads extensions), by symbol version where the
//! library has versions. Our own lookups use the real `dlsym`, never our `dlsym` hook.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's own `name` (`dlsym`, `dlopen`), found with `dlvsym` (which we do not hook) at the
/// versions glibc has given it (2.34 in libc; 2.2.5 x86_64 and 2.17 aarch64 in libdl before);
/// 0 if none.
pub fn glibc_function(name: &CStr) -> usize {
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
        // SAFETY: dlvsym with valid C strings; RTLD_NEXT skips this library.
        let f = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) } as usize;
        if f != 0 {
            return f;
        }
    }
    0
}

/// glibc's own `dlsym`.
pub fn real_dlsym() -> DlsymFn {
    let mut f = REAL_DLSYM.load(Ordering::Acquire);
    if f == 0 {
        f = glibc_function(c"dlsym");
        assert!(f != 0, "glibc's dlsym not found");
        REAL_DLSYM.store(f, Ordering::Release);
    }
    // SAFETY: f is glibc's dlsym.
    unsafe { std::mem::transmute::<usize, DlsymFn>(f) }
}

/// The address of `name` (at `version` where the library has versions) in the runtime, or 0.
pub fn find_symbol(name: &CStr, version: &CStr, libs: &[&str]) -> usize {
    // SAFETY: plain lookups with NUL-terminated names.
    unsafe {
        let mut a = 0;
        if !version.is_empty() {
            a = libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) as usize;
        }
        if a == 0 {
            a = real_dlsym()(libc::RTLD_NEXT, name.as_ptr()) as usize;
        }
        if a == 0 {
            a = find_in_loaded(libs, name, version);
        }
        a
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
