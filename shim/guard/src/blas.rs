//! Guards around the creation of BLAS and MIOpen handles, which allocate a device workspace
//! (rocBLAS 32 MiB, more on gfx94x) and crash programs when that fails — the crash users hit
//! with `PYTORCH_NO_HIP_MEMORY_CACHING=1`. Before creating, make room on the device; on a
//! memory failure, trim, synchronize and retry; never report success with a NULL handle.

use std::ffi::c_void;

use crate::hip::HIP;
use crate::hooks::hooks;
use crate::log;

/// The libraries these live in (`librocblas.so*`; on Windows `rocblas.dll` and kin: the
/// `lib` prefix is dropped there); names are unique across them.
pub const LIBS: &[&str] = &["librocblas", "libhipblas", "libhipblaslt", "libMIOpen"];
/// `rocblas_status_internal_error`, `HIPBLAS_STATUS_INTERNAL_ERROR`: the library is missing
/// or returned success without a handle.
const INTERNAL_ERROR: i32 = 6;

/// How one library reports things.
struct Library {
    name: &'static str,
    success: i32,
    memory_error: i32,
    internal_error: i32,
    /// Device memory the handle's creation allocates, if known.
    workspace: fn() -> u64,
}

fn rocblas_workspace() -> u64 {
    std::env::var("ROCBLAS_DEVICE_MEMORY_SIZE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(32 << 20)
}

const ROCBLAS: Library = Library {
    name: "rocblas_create_handle",
    success: 0,
    memory_error: 5,
    internal_error: 6,
    workspace: rocblas_workspace,
};
const HIPBLAS: Library = Library {
    name: "hipblasCreate",
    success: 0,
    memory_error: 2,
    internal_error: 6,
    workspace: rocblas_workspace,
};
const HIPBLASLT: Library = Library {
    name: "hipblasLtCreate",
    success: 0,
    memory_error: 2,
    internal_error: 6,
    workspace: || 64 << 10,
};
const MIOPEN: Library = Library {
    name: "miopenCreate",
    success: 0,
    memory_error: 4,
    internal_error: 5,
    workspace: || 0,
};

fn guarded_create(lib: &Library, handle: *mut *mut c_void, create: impl Fn() -> i32) -> i32 {
    let active = match HIP.active() {
        Some(a) if !handle.is_null() => a,
        _ => return create(),
    };
    let workspace = (lib.workspace)();
    let released = active.make_room(workspace);
    if released > 0 {
        log::info(format_args!(
            "{}: released {} of cached memory to make room for its workspace",
            lib.name,
            rocmguard_core::format_size(released)
        ));
    }
    let mut code = create();
    let mut attempt = 0;
    while code == lib.memory_error && attempt < active.config.retries {
        attempt += 1;
        log::warn(format_args!(
            "{} ran out of device memory; trimming the cache and retrying ({}/{})",
            lib.name, attempt, active.config.retries
        ));
        active.trim_current(0);
        if !active.capture_active() {
            // SAFETY: the real hipDeviceSynchronize, no arguments.
            active.synchronize(|| unsafe { (active.api.synchronize)() });
        }
        code = create();
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    if code == lib.success && unsafe { *handle }.is_null() {
        log::error(format_args!(
            "{} reported success without a handle",
            lib.name
        ));
        return lib.internal_error;
    }
    if code == lib.success && attempt > 0 {
        log::warn(format_args!(
            "{} succeeded after {} retries",
            lib.name, attempt
        ));
    }
    code
}

hooks! {
    libs = LIBS, missing = INTERNAL_ERROR;

    [""] fn rocblas_create_handle(handle: *mut *mut c_void) -> i32 |pass| {
        guarded_create(&ROCBLAS, handle, pass)
    }

    [""] fn hipblasCreate(handle: *mut *mut c_void) -> i32 |pass| {
        guarded_create(&HIPBLAS, handle, pass)
    }

    [""] fn hipblasLtCreate(handle: *mut *mut c_void) -> i32 |pass| {
        guarded_create(&HIPBLASLT, handle, pass)
    }

    [""] fn miopenCreate(handle: *mut *mut c_void) -> i32 |pass| {
        guarded_create(&MIOPEN, handle, pass)
    }
}
