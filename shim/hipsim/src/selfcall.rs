//! `HIPSIM_SELF_CALLS=1`: the runtime calls some of its own exports through the dynamic linker,
//! as a `libamdhip64` linked without `-Bsymbolic` does through its PLT, so that a preloaded
//! library exporting the same names (rocmguard) sees calls its program never made, from inside
//! the calls it did make. HAMi moved its AMD port from `LD_PRELOAD` to `LD_AUDIT` because "ROCm
//! 7.x HIP's internal symbol resolution breaks with LD_PRELOAD due to recursive interception of
//! HIP-internal calls" (Project-HAMi/HAMi#1707, design in #1985); this is that runtime, made to
//! order. Under it:
//!
//! - `hipMallocManaged` takes its memory from `hipMalloc`;
//! - the pitched allocations (`hipMallocPitch`, `hipMemAllocPitch`, `hipMalloc3D`) take theirs
//!   from `hipMalloc`;
//! - `hipFree`'s implicit synchronize is a call of `hipDeviceSynchronize`;
//! - `hipMemcpy` between host and device stages through a device buffer from `hipMalloc`, given
//!   back with `hipFree` (a staging copy).
//!
//! Each named call is resolved once, at its first use, as lazy binding does (`sys::linked_symbol`).
//! On Windows a DLL's calls to itself never leave it: the setting changes nothing there.

use std::ffi::{c_void, CStr};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::config;
use crate::error::{HipResult, SUCCESS, UNKNOWN};
use crate::sys;

/// Whether the runtime calls itself through the dynamic linker (`HIPSIM_SELF_CALLS`).
pub fn on() -> bool {
    config::get().self_calls
}

/// One PLT slot: a name, and what it bound to at first use.
struct Slot {
    name: &'static CStr,
    bound: AtomicPtr<c_void>,
}

impl Slot {
    const fn new(name: &'static CStr) -> Slot {
        Slot {
            name,
            bound: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn get(&self) -> Option<*mut c_void> {
        let mut f = self.bound.load(Ordering::Acquire);
        if f.is_null() {
            f = sys::linked_symbol(self.name);
            self.bound.store(f, Ordering::Release);
        }
        (!f.is_null()).then_some(f)
    }
}

/// A C string literal of static lifetime.
macro_rules! name {
    ($s:literal) => {
        // SAFETY: the literal ends in its only NUL.
        unsafe { CStr::from_bytes_with_nul_unchecked(concat!($s, "\0").as_bytes()) }
    };
}

static MALLOC: Slot = Slot::new(name!("hipMalloc"));
static FREE: Slot = Slot::new(name!("hipFree"));
static SYNCHRONIZE: Slot = Slot::new(name!("hipDeviceSynchronize"));

fn result(code: c_int) -> HipResult {
    match code {
        SUCCESS => Ok(()),
        code => Err(code),
    }
}

/// `hipMalloc`, through the dynamic linker.
pub unsafe fn malloc(out: *mut *mut c_void, size: usize) -> HipResult {
    let f = MALLOC.get().ok_or(UNKNOWN)?;
    // SAFETY: the symbol named hipMalloc has hipMalloc's signature.
    let f: unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int = std::mem::transmute(f);
    result(f(out, size))
}

/// `hipFree`, through the dynamic linker.
pub unsafe fn free(ptr: *mut c_void) -> HipResult {
    let f = FREE.get().ok_or(UNKNOWN)?;
    // SAFETY: the symbol named hipFree has hipFree's signature.
    let f: unsafe extern "C" fn(*mut c_void) -> c_int = std::mem::transmute(f);
    result(f(ptr))
}

/// `hipDeviceSynchronize`, through the dynamic linker.
pub fn device_synchronize() -> HipResult {
    let f = SYNCHRONIZE.get().ok_or(UNKNOWN)?;
    // SAFETY: the symbol named hipDeviceSynchronize has its signature; it takes no arguments.
    unsafe {
        let f: unsafe extern "C" fn() -> c_int = std::mem::transmute(f);
        result(f())
    }
}
