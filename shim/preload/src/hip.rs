//! The HIP face: the exports that stand in front of `libamdhip64`. Each hook only translates
//! the ABI and calls the guard; `pass()` is the plain runtime call.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::hooks;
use crate::resolve::Real;

/// File names the HIP runtime goes by (`libamdhip64.so`, `.so.5|6|7`).
pub const LIBS: &[&str] = &["libamdhip64"];

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new(c"hipGetDevice", c"hip_4.2", LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new(c"hipSetDevice", c"hip_4.2", LIBS);

include!("hip_hooks.rs");
