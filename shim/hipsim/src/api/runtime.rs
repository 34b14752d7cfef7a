//! The runtime as a whole: initialization, versions, the last error and its names, and
//! `hipGetProcAddress`.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int, c_uint};

use super::put;
use crate::config::{self, Release};
use crate::error::{self, *};

/// `HIP_VERSION` of ROCm 6.3.0, which the simulator's ABI follows.
const HIP_VERSION: c_int = 60_300_000;

/// HIP 7.2.26015, the ROCm 7.2 build of torch_memory_saver#84, said under `HIPSIM_ROCM=7.2`.
const HIP_VERSION_7_2: c_int = 70_226_015;

/// What `hipRuntimeGetVersion` and `hipDriverGetVersion` say: the release `HIPSIM_ROCM` names.
fn version() -> c_int {
    match config::get().release {
        Release::Current => HIP_VERSION,
        Release::Rocm72 => HIP_VERSION_7_2,
    }
}

hip_export! {
    "hip_4.2" fn hipGetLastError() -> c_int {
        error::last(true)
    }
}

hip_export! {
    "hip_4.2" fn hipPeekAtLastError() -> c_int {
        error::last(false)
    }
}

hip_export! {
    "hip_4.2" fn hipGetErrorName(code: c_int) -> *const c_char {
        error::name(code) as *const c_char
    }
}

hip_export! {
    "hip_4.2" fn hipGetErrorString(code: c_int) -> *const c_char {
        error::message(code) as *const c_char
    }
}

hip_export! {
    "hip_4.2" fn hipInit(flags: c_uint) -> c_int {
        error::api(|| match flags {
            0 => Ok(()),
            _ => Err(INVALID_VALUE),
        })
    }
}

hip_export! {
    "hip_4.2" fn hipRuntimeGetVersion(version: *mut c_int) -> c_int {
        error::api(|| put(version, self::version()))
    }
}

hip_export! {
    "hip_4.2" fn hipDriverGetVersion(version: *mut c_int) -> c_int {
        error::api(|| put(version, self::version()))
    }
}

/// `hipDriverProcAddressQueryResult` values.
const PROC_SUCCESS: c_int = 0;
const PROC_SYMBOL_NOT_FOUND: c_int = 1;

hip_export! {
    /// This library's own implementation of `symbol`, looked up through its own handle, never
    /// what a preloaded library exports (as the real runtime does). `hipGetDeviceProperties`
    /// with `hip_version >= 600` means `hipGetDevicePropertiesR0600`. An unknown name gives
    /// `hipErrorInvalidValue`, a null `*pfn` and status `HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
    "hip_6.1" fn hipGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        hip_version: c_int,
        _flags: u64,
        status: *mut c_int,
    ) -> c_int {
        error::api(|| {
            if symbol.is_null() || pfn.is_null() || *symbol == 0 {
                return Err(INVALID_VALUE);
            }
            let name = CStr::from_ptr(symbol);
            let name = match name.to_bytes() {
                b"hipGetDeviceProperties" if hip_version >= 600 => {
                    CStr::from_bytes_with_nul(b"hipGetDevicePropertiesR0600\0").unwrap_or(name)
                }
                _ => name,
            };
            let found = crate::sys::own_symbol(name);
            pfn.write(found);
            let (code, result) = match found.is_null() {
                true => (PROC_SYMBOL_NOT_FOUND, Err(INVALID_VALUE)),
                false => (PROC_SUCCESS, Ok(())),
            };
            if !status.is_null() {
                status.write(code);
            }
            result
        })
    }
}
