//! The HIP hooks of the Windows DLL: what stands in front of `amdhip64_6.dll`/`amdhip64_7.dll`.
//! The same hooks as the Linux preload's `hip.rs`, over the same guard; each only translates the
//! ABI and calls the guard, and `pass()` is the plain runtime call.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::{hooks, Real};

pub type Stream = *mut c_void;
pub type MemPool = *mut c_void;

/// File names the HIP runtime goes by: `amdhip64_6.dll`, `amdhip64_7.dll` (and the older
/// `amdhip64.dll` of HIP SDK 5).
pub const LIBS: &[&str] = &["amdhip64"];

const ATTRIBUTE_INTEGRATED: c_int = 16;
const ATTRIBUTE_TOTAL_GLOBAL_MEM: c_int = 84;
/// `hipExtMallocWithFlags`' default flag: ordinary device memory, which the pool serves.
const DEVICE_MALLOC_DEFAULT: u32 = 0;
/// `totalGlobalMem` in `hipDeviceProp_tR0600` and in the older `hipDeviceProp_t` (R0000).
const PROP_R0600_TOTAL_GLOBAL_MEM: usize = 288;
const PROP_R0000_TOTAL_GLOBAL_MEM: usize = 256;

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new("hipGetDevice\0", LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new("hipSetDevice\0", LIBS);

static FACE: Face = Face {
    name: "HIP",
    api: resolve_api,
    integrated,
};

pub static HIP: Guard = Guard::new(&FACE);

fn resolve_api() -> Option<Api> {
    Some(Api {
        malloc: real::hipMalloc.get()?,
        free: real::hipFree.get()?,
        mem_get_info: real::hipMemGetInfo.get()?,
        get_device: GET_DEVICE.get()?,
        set_device: SET_DEVICE.get()?,
        synchronize: real::hipDeviceSynchronize.get()?,
        get_last_error: real::hipGetLastError.get()?,
        peek_last_error: real::hipPeekAtLastError.get()?,
    })
}

fn integrated(device: i32) -> bool {
    let mut v = 0;
    match real::hipDeviceGetAttribute.get() {
        // SAFETY: valid out-pointer.
        Some(f) => unsafe { f(&mut v, ATTRIBUTE_INTEGRATED, device) == SUCCESS && v != 0 },
        None => false,
    }
}

include!("../../../shim/preload/src/hip_hooks.rs");
