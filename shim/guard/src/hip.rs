//! The HIP face: the exports that stand in front of `libamdhip64`. Each hook only translates
//! the ABI and calls the guard; `pass()` is the plain runtime call.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_uint};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::hooks;
use crate::resolve::Real;
#[cfg(unix)]
use crate::resolve::VirtualMemory;
use crate::vmm::Vmm;

/// File names the HIP runtime goes by: `libamdhip64.so` (`.so.5|6|7`) on Linux;
/// `amdhip64_6.dll`, `amdhip64_7.dll` (and HIP SDK 5's `amdhip64.dll`) on Windows.
#[cfg(unix)]
pub const LIBS: &[&str] = &["libamdhip64"];
#[cfg(windows)]
pub const LIBS: &[&str] = &["amdhip64"];

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new(cstr!("hipGetDevice"), cstr!("hip_4.2"), LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new(cstr!("hipSetDevice"), cstr!("hip_4.2"), LIBS);
static DEVICE_COUNT: Real<GetDeviceFn> =
    Real::new(cstr!("hipGetDeviceCount"), cstr!("hip_4.2"), LIBS);

/// `hipDeviceAttributeVirtualMemoryManagementSupported`.
#[cfg(unix)]
const ATTRIBUTE_VIRTUAL_MEMORY: c_int = 89;
/// ROCm 6.0's `HIP_VERSION`: the virtual memory structs took their current layout there.
#[cfg(unix)]
const FIRST_VIRTUAL_MEMORY_VERSION: c_int = 60_000_000;

#[cfg(unix)]
static RUNTIME_VERSION: Real<unsafe extern "C" fn(*mut c_int) -> i32> =
    Real::new(cstr!("hipRuntimeGetVersion"), cstr!("hip_4.2"), LIBS);
#[cfg(unix)]
static VIRTUAL_MEMORY: VirtualMemory = VirtualMemory {
    granularity: Real::new(
        cstr!("hipMemGetAllocationGranularity"),
        cstr!("hip_5.1"),
        LIBS,
    ),
    reserve: Real::new(cstr!("hipMemAddressReserve"), cstr!("hip_5.1"), LIBS),
    address_free: Real::new(cstr!("hipMemAddressFree"), cstr!("hip_5.1"), LIBS),
    create: Real::new(cstr!("hipMemCreate"), cstr!("hip_5.1"), LIBS),
    release: Real::new(cstr!("hipMemRelease"), cstr!("hip_5.1"), LIBS),
    map: Real::new(cstr!("hipMemMap"), cstr!("hip_5.1"), LIBS),
    unmap: Real::new(cstr!("hipMemUnmap"), cstr!("hip_5.1"), LIBS),
    set_access: Real::new(cstr!("hipMemSetAccess"), cstr!("hip_5.1"), LIBS),
    copy,
    export: Real::new(
        cstr!("hipMemExportToShareableHandle"),
        cstr!("hip_5.1"),
        LIBS,
    ),
    import: Real::new(
        cstr!("hipMemImportFromShareableHandle"),
        cstr!("hip_5.1"),
        LIBS,
    ),
};

/// `hipMemcpyDefault`: the runtime tells host from device memory.
#[cfg(unix)]
const MEMCPY_DEFAULT: c_int = 4;
#[cfg(unix)]
static MEMCPY: Real<unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> i32> =
    Real::new(cstr!("hipMemcpy"), cstr!("hip_4.2"), LIBS);

/// `hipMemcpy` for the virtual memory check.
#[cfg(unix)]
fn copy(dst: u64, src: u64, n: usize) -> i32 {
    match MEMCPY.get() {
        // SAFETY: the check copies between its own mapping and its own host buffers.
        Some(f) => unsafe { f(dst as *mut c_void, src as *const c_void, n, MEMCPY_DEFAULT) },
        None => SYMBOL_NOT_FOUND,
    }
}

/// HIP's virtual memory for `device`: ROCm 6 or later (the struct layout we pass), the device
/// says it supports it, and it maps at a granularity that divides 2 MiB.
#[cfg(unix)]
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

/// Plain segments on Windows: the virtual memory path is proven on Linux (hipsim and the CUDA
/// driver) only, and WDDM's behaviour under it is untested.
#[cfg(windows)]
fn virtual_memory(_device: c_int) -> Option<Vmm> {
    None
}

pub type Stream = *mut c_void;
pub type MemPool = *mut c_void;

const ATTRIBUTE_INTEGRATED: c_int = 16;
const ATTRIBUTE_TOTAL_GLOBAL_MEM: c_int = 84;
/// `hipExtMallocWithFlags`' default flag: ordinary device memory, which the pool serves.
const DEVICE_MALLOC_DEFAULT: u32 = 0;
/// `totalGlobalMem` in `hipDeviceProp_tR0600` and in the older `hipDeviceProp_t` (R0000).
const PROP_R0600_TOTAL_GLOBAL_MEM: usize = 288;
const PROP_R0000_TOTAL_GLOBAL_MEM: usize = 256;
/// The pitch of `hipMallocPitch` and its kin: rows padded to ROCm's `imagePitchAlignment_`,
/// 256 bytes on every device (clr `rocclr/device/rocm/rocdevice.cpp`).
const PITCH_ALIGNMENT: usize = 256;

/// `hipPitchedPtr`.
#[repr(C)]
pub struct PitchedPtr {
    ptr: *mut c_void,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

/// `hipExtent`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Extent {
    width: usize,
    height: usize,
    depth: usize,
}

static FACE: Face = Face {
    name: "HIP",
    api: resolve_api,
    integrated,
    virtual_memory,
};

pub static HIP: Guard = Guard::new(&FACE);

fn resolve_api() -> Option<Api> {
    Some(Api {
        malloc: real::hipMalloc.get()?,
        free: real::hipFree.get()?,
        mem_get_info: real::hipMemGetInfo.get()?,
        get_device: GET_DEVICE.get()?,
        set_device: SET_DEVICE.get()?,
        device_count: DEVICE_COUNT.get()?,
        synchronize: real::hipDeviceSynchronize.get()?,
        get_last_error: real::hipGetLastError.get()?,
        peek_last_error: real::hipPeekAtLastError.get()?,
        runtime: &real::RUNTIME,
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

hooks! {
    libs = LIBS, missing = SYMBOL_NOT_FOUND;

    ["hip_4.2"] fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> i32 |pass| {
        HIP.malloc(ptr, size, pass)
    }

    ["hip_4.2"] fn hipExtMallocWithFlags(ptr: *mut *mut c_void, size: usize, flags: u32) -> i32 |pass| {
        if flags == DEVICE_MALLOC_DEFAULT {
            HIP.malloc(ptr, size, pass)
        } else {
            HIP.external_malloc(ptr, size, pass)
        }
    }

    ["hip_4.2"] fn hipMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> i32 |pass| {
        HIP.malloc_pitched(ptr, pitch, width, height, 1, PITCH_ALIGNMENT, pass)
    }

    ["hip_4.2"] fn hipMemAllocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, element_size: c_uint) -> i32 |pass| {
        // The runtime's own checks (clr) before it calls `hipMallocPitch`.
        if [4, 8, 16].contains(&element_size) {
            HIP.malloc_pitched(ptr, pitch, width, height, 1, PITCH_ALIGNMENT, pass)
        } else {
            pass()
        }
    }

    ["hip_4.2"] fn hipMalloc3D(pitched: *mut PitchedPtr, extent: Extent) -> i32 |pass| {
        if pitched.is_null() {
            return pass();
        }
        let p = &mut *pitched;
        let (width, height) = (extent.width, extent.height);
        let code = HIP.malloc_pitched(&mut p.ptr, &mut p.pitch, width, height, extent.depth, PITCH_ALIGNMENT, pass);
        if code == SUCCESS {
            p.xsize = width;
            p.ysize = height;
        }
        code
    }

    ["hip_4.2"] fn hipFree(ptr: *mut c_void) -> i32 |pass| {
        HIP.free(ptr, pass)
    }

    ["hip_4.2"] fn hipMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) -> i32 |pass| {
        let _ = flags;
        HIP.external_malloc(ptr, size, pass)
    }

    ["hip_5.1"] fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: Stream) -> i32 |pass| {
        HIP.stream_named(stream);
        HIP.external_malloc(ptr, size, pass)
    }

    ["hip_5.1"] fn hipMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: MemPool, stream: Stream) -> i32 |pass| {
        let _ = pool;
        HIP.stream_named(stream);
        HIP.external_malloc(ptr, size, pass)
    }

    ["hip_5.1"] fn hipFreeAsync(ptr: *mut c_void, stream: Stream) -> i32 |pass| {
        HIP.stream_named(stream);
        HIP.free_async(ptr, pass)
    }

    ["hip_5.1"] fn hipMemPoolTrimTo(pool: MemPool, min_bytes_to_hold: usize) -> i32 |pass| {
        let _ = pool;
        HIP.trim_to(min_bytes_to_hold, pass)
    }

    ["hip_5.1"] fn hipMemCreate(handle: *mut *mut c_void, size: usize, prop: *const c_void, flags: u64) -> i32 |pass| {
        let _ = flags;
        HIP.mem_create(handle, size, crate::vmm::device_of(prop), true, pass)
    }

    ["hip_5.1"] fn hipMemRelease(handle: *mut c_void) -> i32 |pass| {
        HIP.mem_release(handle, pass)
    }

    ["hip_4.2"] fn hipMemGetAddressRange(base: *mut *mut c_void, size: *mut usize, ptr: *mut c_void) -> i32 |pass| {
        match HIP.block_of(ptr) {
            Some((start, bytes)) if !base.is_null() && !size.is_null() => {
                *base = start as *mut c_void;
                *size = bytes as usize;
                SUCCESS
            }
            _ => pass(),
        }
    }

    ["hip_4.2"] fn hipMemPtrGetInfo(ptr: *mut c_void, size: *mut usize) -> i32 |pass| {
        match HIP.block_of(ptr) {
            Some((_, bytes)) if !size.is_null() => {
                *size = bytes as usize;
                SUCCESS
            }
            _ => pass(),
        }
    }

    ["hip_4.2"] fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> i32 |pass| {
        HIP.mem_get_info(free, total, pass)
    }

    ["hip_4.2"] fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> i32 |pass| {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, HIP.active()) {
            if !bytes.is_null() {
                *bytes = a.total_for(device, *bytes as u64) as usize;
            }
        }
        code
    }

    ["hip_4.2"] fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> i32 |pass| {
        let code = pass();
        if let (SUCCESS, ATTRIBUTE_TOTAL_GLOBAL_MEM, Some(a)) = (code, attr, HIP.active()) {
            if !value.is_null() {
                *value = guard::capped_attribute(*value, |t| a.total_for(device, t), || {
                    let mut total = 0usize;
                    match real::hipDeviceTotalMem.get() {
                        Some(f) if f(&mut total, device) == SUCCESS => Some(total as u64),
                        _ => None,
                    }
                });
            }
        }
        code
    }

    ["hip_4.2"] fn hipGetDeviceProperties(props: *mut c_void, device: c_int) -> i32 |pass| {
        HIP.cap_props(props, PROP_R0000_TOTAL_GLOBAL_MEM, device, pass)
    }

    ["hip_6.0"] fn hipGetDevicePropertiesR0600(props: *mut c_void, device: c_int) -> i32 |pass| {
        HIP.cap_props(props, PROP_R0600_TOTAL_GLOBAL_MEM, device, pass)
    }

    ["hip_4.2"] fn hipDeviceSynchronize() -> i32 |pass| {
        HIP.device_synchronize(pass)
    }

    ["hip_4.2"] fn hipDeviceReset() -> i32 |pass| {
        HIP.device_reset(pass)
    }

    ["hip_4.2"] fn hipGetLastError() -> i32 |pass| {
        guard::last_error(pass(), true)
    }

    ["hip_4.2"] fn hipPeekAtLastError() -> i32 |pass| {
        guard::last_error(pass(), false)
    }

    ["hip_4.2"] fn hipStreamCreate(stream: *mut Stream) -> i32 |pass| {
        let _ = stream;
        HIP.stream_created("hipStreamCreate", pass)
    }

    ["hip_4.2"] fn hipStreamCreateWithFlags(stream: *mut Stream, flags: c_uint) -> i32 |pass| {
        let _ = (stream, flags);
        HIP.stream_created("hipStreamCreateWithFlags", pass)
    }

    ["hip_4.2"] fn hipStreamCreateWithPriority(stream: *mut Stream, flags: c_uint, priority: c_int) -> i32 |pass| {
        let _ = (stream, flags, priority);
        HIP.stream_created("hipStreamCreateWithPriority", pass)
    }

    ["hip_4.2"] fn hipExtStreamCreateWithCUMask(stream: *mut Stream, cu_mask_size: u32, cu_mask: *const u32) -> i32 |pass| {
        let _ = (stream, cu_mask_size, cu_mask);
        HIP.stream_created("hipExtStreamCreateWithCUMask", pass)
    }

    ["hip_4.2"] fn hipIpcGetMemHandle(handle: *mut c_void, ptr: *mut c_void) -> i32 |pass| {
        HIP.ipc_get(handle, ptr, false, pass)
    }

    ["hip_4.2"] fn hipIpcOpenMemHandle(ptr: *mut *mut c_void, handle: crate::platform::ipc::IpcHandle, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        HIP.ipc_open(ptr, handle, pass)
    }

    ["hip_4.2"] fn hipIpcCloseMemHandle(ptr: *mut c_void) -> i32 |pass| {
        HIP.ipc_close(ptr, pass)
    }

    ["hip_4.2"] fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        HIP.peer_access(peer, pass)
    }

    ["hip_4.2"] fn hipStreamBeginCapture(stream: Stream, mode: c_int) -> i32 |pass| {
        let _ = mode;
        HIP.begin_capture(stream, pass)
    }

    ["hip_4.2"] fn hipStreamEndCapture(stream: Stream, graph: *mut *mut c_void) -> i32 |pass| {
        let _ = graph;
        HIP.end_capture(stream, pass)
    }

    ["hip_5.3"] fn hipStreamBeginCapture_spt(stream: Stream, mode: c_int) -> i32 |pass| {
        let _ = mode;
        HIP.begin_capture(stream, pass)
    }

    ["hip_5.3"] fn hipStreamEndCapture_spt(stream: Stream, graph: *mut *mut c_void) -> i32 |pass| {
        let _ = graph;
        HIP.end_capture(stream, pass)
    }

    ["hip_6.1"] fn hipGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_void) -> i32 |pass| {
        let _ = (version, flags, status);
        guard::hooked_answer(pass(), symbol, pfn)
    }
}
