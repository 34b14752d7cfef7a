//! The HIP face: the exports that stand in front of `libamdhip64`. Each hook only translates
//! the ABI and calls the guard; `pass()` is the plain runtime call.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::guard::{self, Api, Face, GetDeviceFn, Guard, SetDeviceFn, SUCCESS, SYMBOL_NOT_FOUND};
use crate::hooks::hooks;
use crate::resolve::Real;

pub type Stream = *mut c_void;
pub type MemPool = *mut c_void;

/// File names the HIP runtime goes by (`libamdhip64.so`, `.so.5|6|7`).
pub const LIBS: &[&str] = &["libamdhip64"];

const ATTRIBUTE_INTEGRATED: c_int = 16;
const ATTRIBUTE_TOTAL_GLOBAL_MEM: c_int = 84;
/// `hipExtMallocWithFlags`' default flag: ordinary device memory, which the pool serves.
const DEVICE_MALLOC_DEFAULT: u32 = 0;
/// `totalGlobalMem` in `hipDeviceProp_tR0600` and in the older `hipDeviceProp_t` (R0000).
const PROP_R0600_TOTAL_GLOBAL_MEM: usize = 288;
const PROP_R0000_TOTAL_GLOBAL_MEM: usize = 256;

/// Runtime functions the pool needs but the program's calls to which we leave alone.
static GET_DEVICE: Real<GetDeviceFn> = Real::new(c"hipGetDevice", c"hip_4.2", LIBS);
static SET_DEVICE: Real<SetDeviceFn> = Real::new(c"hipSetDevice", c"hip_4.2", LIBS);

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

/// Writes the capped total into a properties struct at `offset`, if the runtime filled it.
unsafe fn cap_total_in_props(props: *mut c_void, offset: usize, device: c_int) {
    let Some(a) = HIP.active() else { return };
    let field = (props as *mut u8).add(offset) as *mut usize;
    let total = field.read_unaligned() as u64;
    field.write_unaligned(a.total_for(device, total) as usize);
}

hooks! {
    libs = LIBS, missing = SYMBOL_NOT_FOUND;

    ["hip_4.2"] fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> i32 |pass| {
        match HIP.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.alloc(ptr, size).unwrap_or_else(pass),
            _ => pass(),
        }
    }

    ["hip_4.2"] fn hipExtMallocWithFlags(ptr: *mut *mut c_void, size: usize, flags: u32) -> i32 |pass| {
        match HIP.active() {
            Some(a) if !ptr.is_null() && size > 0 && flags == DEVICE_MALLOC_DEFAULT => {
                a.alloc(ptr, size).unwrap_or_else(pass)
            }
            Some(a) if !ptr.is_null() && size > 0 => a.external_alloc(ptr, size, pass),
            _ => pass(),
        }
    }

    ["hip_4.2"] fn hipFree(ptr: *mut c_void) -> i32 |pass| {
        match HIP.active() {
            Some(a) if !ptr.is_null() => {
                if a.free(ptr) {
                    return SUCCESS;
                }
                let code = pass();
                if code == SUCCESS {
                    a.external_free(ptr);
                }
                code
            }
            _ => pass(),
        }
    }

    ["hip_4.2"] fn hipMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) -> i32 |pass| {
        let _ = flags;
        match HIP.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.external_alloc(ptr, size, pass),
            _ => pass(),
        }
    }

    ["hip_5.1"] fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: Stream) -> i32 |pass| {
        let _ = stream;
        match HIP.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.external_alloc(ptr, size, pass),
            _ => pass(),
        }
    }

    ["hip_5.1"] fn hipMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: MemPool, stream: Stream) -> i32 |pass| {
        let _ = (pool, stream);
        match HIP.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.external_alloc(ptr, size, pass),
            _ => pass(),
        }
    }

    ["hip_5.1"] fn hipFreeAsync(ptr: *mut c_void, stream: Stream) -> i32 |pass| {
        let _ = stream;
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, HIP.active()) {
            a.external_free(ptr);
        }
        code
    }

    ["hip_5.1"] fn hipMemPoolTrimTo(pool: MemPool, min_bytes_to_hold: usize) -> i32 |pass| {
        let _ = pool;
        if let Some(a) = HIP.active() {
            a.trim_current(min_bytes_to_hold as u64);
        }
        pass()
    }

    ["hip_4.2"] fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> i32 |pass| {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, HIP.active()) {
            if !free.is_null() && !total.is_null() {
                let (f, t) = a.mem_view(*free as u64, *total as u64);
                *free = f as usize;
                *total = t as usize;
            }
        }
        code
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
        let code = pass();
        if code == SUCCESS && !props.is_null() {
            cap_total_in_props(props, PROP_R0000_TOTAL_GLOBAL_MEM, device);
        }
        code
    }

    ["hip_6.0"] fn hipGetDevicePropertiesR0600(props: *mut c_void, device: c_int) -> i32 |pass| {
        let code = pass();
        if code == SUCCESS && !props.is_null() {
            cap_total_in_props(props, PROP_R0600_TOTAL_GLOBAL_MEM, device);
        }
        code
    }

    ["hip_4.2"] fn hipDeviceSynchronize() -> i32 |pass| {
        match HIP.active() {
            Some(a) => a.synchronize(pass),
            None => pass(),
        }
    }

    ["hip_4.2"] fn hipDeviceReset() -> i32 |pass| {
        if let Some(a) = HIP.active() {
            a.device_reset();
        }
        pass()
    }

    ["hip_4.2"] fn hipGetLastError() -> i32 |pass| {
        guard::last_error(pass(), true)
    }

    ["hip_4.2"] fn hipPeekAtLastError() -> i32 |pass| {
        guard::last_error(pass(), false)
    }

    ["hip_4.2"] fn hipStreamBeginCapture(stream: Stream, mode: c_int) -> i32 |pass| {
        let _ = mode;
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, HIP.active()) {
            a.capture_began(stream as usize);
        }
        code
    }

    ["hip_4.2"] fn hipStreamEndCapture(stream: Stream, graph: *mut *mut c_void) -> i32 |pass| {
        let _ = graph;
        let code = pass();
        if let Some(a) = HIP.active() {
            a.capture_ended(stream as usize);
        }
        code
    }

    ["hip_6.1"] fn hipGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_void) -> i32 |pass| {
        let _ = (version, flags, status);
        let code = pass();
        if code == SUCCESS && !symbol.is_null() && !pfn.is_null() && !(*pfn).is_null() {
            if let Some(hook) = crate::dl::hook_for(CStr::from_ptr(symbol).to_bytes(), *pfn as usize) {
                *pfn = hook as *mut c_void;
            }
        }
        code
    }
}
