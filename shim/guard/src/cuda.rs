//! The CUDA face: the same guard in front of `libcudart` (`cudaMalloc` has `hipMalloc`'s shape
//! and codes), which is how the design is proven under real PyTorch on real GPUs. Dormant until
//! the CUDA runtime is loaded; a process that uses HIP never touches it.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::guard::{Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::hooks;
use crate::resolve::{Real, VirtualMemory};
use crate::vmm::Vmm;

pub type Stream = *mut c_void;
pub type MemPool = *mut c_void;

/// File names of the CUDA runtime (`libcudart.so.12|13`).
pub const LIBS: &[&str] = &["libcudart"];

const ATTRIBUTE_INTEGRATED: c_int = 18;
/// `totalGlobalMem` in `cudaDeviceProp` (after name[256], uuid, luid, luidDeviceNodeMask).
const PROP_TOTAL_GLOBAL_MEM: usize = 288;

static GET_DEVICE: Real<GetDeviceFn> = Real::new(cstr!("cudaGetDevice"), cstr!(""), LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new(cstr!("cudaSetDevice"), cstr!(""), LIBS);
static DEVICE_COUNT: Real<GetDeviceFn> = Real::new(cstr!("cudaGetDeviceCount"), cstr!(""), LIBS);
static GET_ATTRIBUTE: Real<unsafe extern "C" fn(*mut c_int, c_int, c_int) -> i32> =
    Real::new(cstr!("cudaDeviceGetAttribute"), cstr!(""), LIBS);

/// The CUDA driver, where the virtual memory functions are (`libcuda.so.1`, loaded by the
/// runtime; the prefix keeps `libcudart` out).
const DRIVER: &[&str] = &["libcuda.so"];

static VIRTUAL_MEMORY: VirtualMemory = VirtualMemory {
    granularity: Real::new(cstr!("cuMemGetAllocationGranularity"), cstr!(""), DRIVER),
    reserve: Real::new(cstr!("cuMemAddressReserve"), cstr!(""), DRIVER),
    address_free: Real::new(cstr!("cuMemAddressFree"), cstr!(""), DRIVER),
    create: Real::new(cstr!("cuMemCreate"), cstr!(""), DRIVER),
    release: Real::new(cstr!("cuMemRelease"), cstr!(""), DRIVER),
    map: Real::new(cstr!("cuMemMap"), cstr!(""), DRIVER),
    unmap: Real::new(cstr!("cuMemUnmap"), cstr!(""), DRIVER),
    set_access: Real::new(cstr!("cuMemSetAccess"), cstr!(""), DRIVER),
    copy,
    export: Real::new(cstr!("cuMemExportToShareableHandle"), cstr!(""), DRIVER),
    import: Real::new(cstr!("cuMemImportFromShareableHandle"), cstr!(""), DRIVER),
};

static MEMCPY: Real<unsafe extern "C" fn(u64, u64, usize) -> i32> =
    Real::new(cstr!("cuMemcpy"), cstr!(""), DRIVER);

/// The driver's `cuMemcpy` (unified addressing) for the virtual memory check.
fn copy(dst: u64, src: u64, n: usize) -> i32 {
    match MEMCPY.get() {
        // SAFETY: the check copies between its own mapping and its own host buffers.
        Some(f) => unsafe { f(dst, src, n) },
        None => SYMBOL_NOT_FOUND,
    }
}

static FACE: Face = Face {
    name: "CUDA",
    api: resolve_api,
    integrated,
    virtual_memory,
};

/// The driver's virtual memory for `device` (what `expandable_segments` uses), if it maps at a
/// granularity that divides 2 MiB. Called after a runtime call, so the driver is loaded.
fn virtual_memory(device: c_int) -> Option<Vmm> {
    VIRTUAL_MEMORY.for_device(device)
}

pub static CUDA: Guard = Guard::new(&FACE);

fn resolve_api() -> Option<Api> {
    Some(Api {
        malloc: real::cudaMalloc.get()?,
        free: real::cudaFree.get()?,
        mem_get_info: real::cudaMemGetInfo.get()?,
        get_device: GET_DEVICE.get()?,
        set_device: SET_DEVICE.get()?,
        device_count: DEVICE_COUNT.get()?,
        synchronize: real::cudaDeviceSynchronize.get()?,
        get_last_error: real::cudaGetLastError.get()?,
        peek_last_error: real::cudaPeekAtLastError.get()?,
        runtime: &real::RUNTIME,
    })
}

fn integrated(device: i32) -> bool {
    let mut v = 0;
    match GET_ATTRIBUTE.get() {
        // SAFETY: valid out-pointer.
        Some(f) => unsafe { f(&mut v, ATTRIBUTE_INTEGRATED, device) == SUCCESS && v != 0 },
        None => false,
    }
}

hooks! {
    libs = LIBS, missing = SYMBOL_NOT_FOUND;

    [""] fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> i32 |pass| {
        CUDA.malloc(ptr, size, pass)
    }

    [""] fn cudaFree(ptr: *mut c_void) -> i32 |pass| {
        CUDA.free(ptr, pass)
    }

    [""] fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) -> i32 |pass| {
        let _ = flags;
        CUDA.external_malloc(ptr, size, pass)
    }

    [""] fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: Stream) -> i32 |pass| {
        CUDA.stream_named(stream);
        CUDA.external_malloc(ptr, size, pass)
    }

    [""] fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: MemPool, stream: Stream) -> i32 |pass| {
        let _ = pool;
        CUDA.stream_named(stream);
        CUDA.external_malloc(ptr, size, pass)
    }

    [""] fn cudaFreeAsync(ptr: *mut c_void, stream: Stream) -> i32 |pass| {
        CUDA.stream_named(stream);
        CUDA.free_async(ptr, pass)
    }

    [""] fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: Stream) -> i32 |pass| {
        CUDA.stream_named(stream);
        CUDA.external_malloc(ptr, size, pass)
    }

    [""] fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: MemPool, stream: Stream) -> i32 |pass| {
        let _ = pool;
        CUDA.stream_named(stream);
        CUDA.external_malloc(ptr, size, pass)
    }

    [""] fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> i32 |pass| {
        CUDA.stream_named(stream);
        CUDA.free_async(ptr, pass)
    }

    [""] fn cudaMemPoolTrimTo(pool: MemPool, min_bytes_to_hold: usize) -> i32 |pass| {
        let _ = pool;
        CUDA.trim_to(min_bytes_to_hold, pass)
    }

    [""] fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> i32 |pass| {
        CUDA.mem_get_info(free, total, pass)
    }

    [""] fn cudaGetDeviceProperties(props: *mut c_void, device: c_int) -> i32 |pass| {
        CUDA.cap_props(props, PROP_TOTAL_GLOBAL_MEM, device, pass)
    }

    [""] fn cudaGetDeviceProperties_v2(props: *mut c_void, device: c_int) -> i32 |pass| {
        CUDA.cap_props(props, PROP_TOTAL_GLOBAL_MEM, device, pass)
    }

    [""] fn cudaDeviceSynchronize() -> i32 |pass| {
        CUDA.device_synchronize(pass)
    }

    [""] fn cudaDeviceReset() -> i32 |pass| {
        CUDA.device_reset(pass)
    }

    [""] fn cudaGetLastError() -> i32 |pass| {
        crate::guard::last_error(pass(), true)
    }

    [""] fn cudaPeekAtLastError() -> i32 |pass| {
        crate::guard::last_error(pass(), false)
    }

    [""] fn cudaStreamCreate(stream: *mut Stream) -> i32 |pass| {
        let _ = stream;
        CUDA.stream_created("cudaStreamCreate", pass)
    }

    [""] fn cudaStreamCreateWithFlags(stream: *mut Stream, flags: c_uint) -> i32 |pass| {
        let _ = (stream, flags);
        CUDA.stream_created("cudaStreamCreateWithFlags", pass)
    }

    [""] fn cudaStreamCreateWithPriority(stream: *mut Stream, flags: c_uint, priority: c_int) -> i32 |pass| {
        let _ = (stream, flags, priority);
        CUDA.stream_created("cudaStreamCreateWithPriority", pass)
    }

    [""] fn cudaDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        CUDA.peer_access(peer, pass)
    }

    [""] fn cudaStreamBeginCapture(stream: Stream, mode: c_int) -> i32 |pass| {
        let _ = mode;
        CUDA.begin_capture(stream, pass)
    }

    [""] fn cudaStreamEndCapture(stream: Stream, graph: *mut *mut c_void) -> i32 |pass| {
        let _ = graph;
        CUDA.end_capture(stream, pass)
    }

    [""] fn cudaStreamBeginCapture_ptsz(stream: Stream, mode: c_int) -> i32 |pass| {
        let _ = mode;
        CUDA.begin_capture(stream, pass)
    }

    [""] fn cudaStreamEndCapture_ptsz(stream: Stream, graph: *mut *mut c_void) -> i32 |pass| {
        let _ = graph;
        CUDA.end_capture(stream, pass)
    }

    [""] fn cudaIpcGetMemHandle(handle: *mut c_void, ptr: *mut c_void) -> i32 |pass| {
        CUDA.ipc_get(handle, ptr, true, pass)
    }

    [""] fn cudaIpcOpenMemHandle(ptr: *mut *mut c_void, handle: crate::platform::ipc::IpcHandle, flags: c_uint) -> i32 |pass| {
        let _ = flags;
        CUDA.ipc_open(ptr, handle, pass)
    }

    [""] fn cudaIpcCloseMemHandle(ptr: *mut c_void) -> i32 |pass| {
        CUDA.ipc_close(ptr, pass)
    }

    [""] fn cudaGetDriverEntryPoint(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_void) -> i32 |pass| {
        let _ = (flags, status);
        crate::cuda_driver::lookup_answer(pass(), symbol, pfn, c_int::MAX)
    }

    [""] fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_void) -> i32 |pass| {
        let _ = (flags, status);
        crate::cuda_driver::lookup_answer(pass(), symbol, pfn, version.min(c_int::MAX as c_uint) as c_int)
    }
}
