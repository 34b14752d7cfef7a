//! The HIP face: the exports that stand in front of `libamdhip64`. Each hook only translates
//! the ABI and calls the guard; `pass()` is the plain runtime call.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::hooks;
use crate::resolve::{Real, VirtualMemory};
use crate::vmm::Vmm;

/// File names the HIP runtime goes by (`libamdhip64.so`, `.so.5|6|7`).
pub const LIBS: &[&str] = &["libamdhip64"];

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new(c"hipGetDevice", c"hip_4.2", LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new(c"hipSetDevice", c"hip_4.2", LIBS);

/// `hipDeviceAttributeVirtualMemoryManagementSupported`.
const ATTRIBUTE_VIRTUAL_MEMORY: c_int = 89;
/// ROCm 6.0's `HIP_VERSION`: the virtual memory structs took their current layout there.
const FIRST_VIRTUAL_MEMORY_VERSION: c_int = 60_000_000;

static RUNTIME_VERSION: Real<unsafe extern "C" fn(*mut c_int) -> i32> =
    Real::new(c"hipRuntimeGetVersion", c"hip_4.2", LIBS);
static VIRTUAL_MEMORY: VirtualMemory = VirtualMemory {
    granularity: Real::new(c"hipMemGetAllocationGranularity", c"hip_5.1", LIBS),
    reserve: Real::new(c"hipMemAddressReserve", c"hip_5.1", LIBS),
    address_free: Real::new(c"hipMemAddressFree", c"hip_5.1", LIBS),
    create: Real::new(c"hipMemCreate", c"hip_5.1", LIBS),
    release: Real::new(c"hipMemRelease", c"hip_5.1", LIBS),
    map: Real::new(c"hipMemMap", c"hip_5.1", LIBS),
    unmap: Real::new(c"hipMemUnmap", c"hip_5.1", LIBS),
    set_access: Real::new(c"hipMemSetAccess", c"hip_5.1", LIBS),
    copy,
    export: Real::new(c"hipMemExportToShareableHandle", c"hip_5.1", LIBS),
    import: Real::new(c"hipMemImportFromShareableHandle", c"hip_5.1", LIBS),
};

/// `hipMemcpyDefault`: the runtime tells host from device memory.
const MEMCPY_DEFAULT: c_int = 4;
static MEMCPY: Real<unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> i32> =
    Real::new(c"hipMemcpy", c"hip_4.2", LIBS);

/// `hipMemcpy` for the virtual memory check.
fn copy(dst: u64, src: u64, n: usize) -> i32 {
    match MEMCPY.get() {
        // SAFETY: the check copies between its own mapping and its own host buffers.
        Some(f) => unsafe { f(dst as *mut c_void, src as *const c_void, n, MEMCPY_DEFAULT) },
        None => SYMBOL_NOT_FOUND,
    }
}

/// HIP's virtual memory for `device`: ROCm 6 or later (the struct layout we pass), the device
/// says it supports it, and it maps at a granularity that divides 2 MiB.
fn virtual_memory(device: c_int) -> Option<Vmm> {
    let (mut version, mut supported) = (0, 0);
    // SAFETY: valid out-pointers.
    unsafe {
        if RUNTIME_VERSION.get()?(&mut version) != SUCCESS
            || version < FIRST_VIRTUAL_MEMORY_VERSION
            || real::hipDeviceGetAttribute.get()?(&mut supported, ATTRIBUTE_VIRTUAL_MEMORY, device)
                != SUCCESS
            || supported == 0
        {
            return None;
        }
    }
    VIRTUAL_MEMORY.for_device(device)
}

include!("hip_hooks.rs");
