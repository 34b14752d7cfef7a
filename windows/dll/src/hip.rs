//! The HIP hooks of the Windows DLL: what stands in front of `amdhip64_6.dll`/`amdhip64_7.dll`.
//! The same hooks as the Linux preload's `hip.rs`, over the same guard; each only translates the
//! ABI and calls the guard, and `pass()` is the plain runtime call.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_uint};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::{hooks, Real};

/// File names the HIP runtime goes by: `amdhip64_6.dll`, `amdhip64_7.dll` (and the older
/// `amdhip64.dll` of HIP SDK 5).
pub const LIBS: &[&str] = &["amdhip64"];

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new("hipGetDevice\0", LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new("hipSetDevice\0", LIBS);

/// Plain segments on Windows: the virtual memory path is proven on Linux (hipsim and the CUDA
/// driver) only, and WDDM's behaviour under it is untested.
fn virtual_memory(_device: c_int) -> Option<crate::vmm::Vmm> {
    None
}

include!("../../../shim/preload/src/hip_hooks.rs");
