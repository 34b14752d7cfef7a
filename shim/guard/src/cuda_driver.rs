//! The CUDA driver's side of the CUDA face: what a program (PyTorch's expandable segments) does
//! with `libcuda` directly. Physical memory from `cuMemCreate` counts against the cap like the
//! runtime's own allocations, the address-range queries describe pooled blocks, and the
//! driver's `cuGetProcAddress` answers with these hooks. The pool's own virtual memory calls
//! use the real functions (`cuda.rs`), so they are never counted twice.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use crate::cuda::CUDA;
use crate::guard::SUCCESS;
use crate::hooks::hooks;

/// The driver library (`libcuda.so.1`).
pub const LIBS: &[&str] = &["libcuda.so"];
/// `CUDA_ERROR_NOT_FOUND`: the driver function could not be found.
const NOT_FOUND: i32 = 500;
/// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` and `CU_POINTER_ATTRIBUTE_RANGE_SIZE` (cuda.h).
const ATTRIBUTE_RANGE_START: c_int = 11;
const ATTRIBUTE_RANGE_SIZE: c_int = 12;
/// The CUDA versions from which a base name means the `_v2` export.
const ADDRESS_RANGE_V2: c_int = 3020;
const PROC_ADDRESS_V2: c_int = 12000;
const IPC_OPEN_V2: c_int = 11000;

/// The export that a driver lookup of `name` at CUDA `version` answers with, for the names
/// whose ABI changed; `None` where the answer is an older ABI than our hook's.
fn export_name(name: &[u8], version: c_int) -> Option<&[u8]> {
    match name {
        b"cuMemGetAddressRange" if version >= ADDRESS_RANGE_V2 => Some(b"cuMemGetAddressRange_v2"),
        b"cuMemGetAddressRange" => None,
        b"cuGetProcAddress" if version >= PROC_ADDRESS_V2 => Some(b"cuGetProcAddress_v2"),
        b"cuIpcOpenMemHandle" if version >= IPC_OPEN_V2 => Some(b"cuIpcOpenMemHandle_v2"),
        other => Some(other),
    }
}

/// A driver lookup's answer (`code`, the function at `*pfn` for base name `symbol` at CUDA
/// `version`), replaced by our hook where the function is hooked.
///
/// # Safety
/// `symbol` and `pfn` are what the caller passed to the lookup that returned `code`.
pub unsafe fn lookup_answer(
    code: i32,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
) -> i32 {
    if code != SUCCESS || symbol.is_null() || pfn.is_null() || (*pfn).is_null() {
        return code;
    }
    if let Some(name) = export_name(CStr::from_ptr(symbol).to_bytes(), version) {
        if let Some(hook) = hook_for(name, *pfn as usize) {
            *pfn = hook as *mut c_void;
        }
    }
    code
}

/// Our hook for `dlsym` on the driver library: every hooked name but `cuGetProcAddress`, which
/// the CUDA runtime fetches this way for its own use (its answers to the program are guarded
/// in `cudaGetDriverEntryPoint`).
pub fn dlsym_hook_for(name: &[u8], real: usize) -> Option<usize> {
    if name.starts_with(b"cuGetProcAddress") {
        None
    } else {
        hook_for(name, real)
    }
}

hooks! {
    libs = LIBS, missing = NOT_FOUND;

    [""] fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) -> i32 |pass| {
        let _ = flags;
        CUDA.mem_create(handle as *mut *mut c_void, size, crate::vmm::device_of(prop), false, pass)
    }

    [""] fn cuMemRelease(handle: u64) -> i32 |pass| {
        CUDA.mem_release(handle as *mut c_void, pass)
    }

    [""] fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, ptr: u64) -> i32 |pass| {
        match CUDA.block_of(ptr as *const c_void) {
            Some((start, bytes)) => {
                if !base.is_null() {
                    *base = start;
                }
                if !size.is_null() {
                    *size = bytes as usize;
                }
                SUCCESS
            }
            None => pass(),
        }
    }

    [""] fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: u64) -> i32 |pass| {
        let wanted = attribute == ATTRIBUTE_RANGE_START || attribute == ATTRIBUTE_RANGE_SIZE;
        match CUDA.block_of(ptr as *const c_void) {
            Some((start, bytes)) if wanted && !data.is_null() => {
                match attribute {
                    ATTRIBUTE_RANGE_START => *(data as *mut u64) = start,
                    _ => *(data as *mut usize) = bytes as usize,
                }
                SUCCESS
            }
            _ => pass(),
        }
    }

    [""] fn cuIpcGetMemHandle(handle: *mut c_void, ptr: u64) -> i32 |pass| {
        CUDA.ipc_get(handle, ptr as *mut c_void, true, pass)
    }

    [""] fn cuIpcOpenMemHandle(ptr: *mut u64, handle: crate::platform::ipc::IpcHandle, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        CUDA.ipc_open(ptr as *mut *mut c_void, handle, pass)
    }

    [""] fn cuIpcOpenMemHandle_v2(ptr: *mut u64, handle: crate::platform::ipc::IpcHandle, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        CUDA.ipc_open(ptr as *mut *mut c_void, handle, pass)
    }

    [""] fn cuIpcCloseMemHandle(ptr: u64) -> i32 |pass| {
        CUDA.ipc_close(ptr as *mut c_void, pass)
    }

    [""] fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> i32 |pass| {
        let _ = flags;
        lookup_answer(pass(), symbol, pfn, version)
    }

    [""] fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_void) -> i32 |pass| {
        let _ = (flags, status);
        lookup_answer(pass(), symbol, pfn, version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names_mean_the_export_of_their_version() {
        let name = |n: &[u8], v| export_name(n, v).map(|e| String::from_utf8_lossy(e).into_owned());
        assert_eq!(
            name(b"cuMemGetAddressRange", 12080).as_deref(),
            Some("cuMemGetAddressRange_v2")
        );
        assert_eq!(name(b"cuMemGetAddressRange", 3000), None, "the 32-bit ABI");
        assert_eq!(
            name(b"cuGetProcAddress", 12000).as_deref(),
            Some("cuGetProcAddress_v2")
        );
        assert_eq!(
            name(b"cuGetProcAddress", 11080).as_deref(),
            Some("cuGetProcAddress")
        );
        assert_eq!(name(b"cuMemCreate", 12000).as_deref(), Some("cuMemCreate"));
        assert_eq!(
            name(b"cuIpcOpenMemHandle", 12000).as_deref(),
            Some("cuIpcOpenMemHandle_v2")
        );
        assert!(hook_for(b"cuMemCreate", 0).is_some());
        assert!(dlsym_hook_for(b"cuGetProcAddress_v2", 0).is_none());
        assert!(dlsym_hook_for(b"cuMemRelease", 0).is_some());
    }
}
