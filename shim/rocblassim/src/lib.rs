//! rocblassim: a simulated rocBLAS, built as `librocblas.so` (soname `librocblas.so.4`), for
//! testing rocmguard's guard around BLAS handle creation without an AMD GPU. Like the real
//! library, `rocblas_create_handle` allocates the handle's device workspace with `hipMalloc`
//! (32 MiB, or `ROCBLAS_DEVICE_MEMORY_SIZE` bytes) and fails with `rocblas_status_memory_error`
//! when that allocation fails. It does no linear algebra.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// `rocblas_status` values.
const STATUS_SUCCESS: c_int = 0;
const STATUS_INVALID_HANDLE: c_int = 1;
const STATUS_MEMORY_ERROR: c_int = 5;
const STATUS_INTERNAL_ERROR: c_int = 6;

/// Default device workspace of a handle (rocBLAS on gfx11).
const DEFAULT_WORKSPACE: usize = 32 << 20;

/// The HIP calls rocBLAS makes, bound by the dynamic linker to whichever definition wins the
/// ordinary lookup (a preloaded library's, else the runtime's).
mod hip {
    use std::ffi::c_void;
    use std::os::raw::c_int;

    extern "C" {
        pub fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> c_int;
        pub fn hipFree(ptr: *mut c_void) -> c_int;
    }
}

/// What a `rocblas_handle` points to.
pub struct Handle {
    workspace: *mut c_void,
}

/// Runs an entry point's body; a panic becomes `rocblas_status_internal_error`.
fn guard(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(STATUS_INTERNAL_ERROR)
}

/// The workspace size: `ROCBLAS_DEVICE_MEMORY_SIZE` bytes when set to a positive number.
fn workspace_size() -> usize {
    let value = match std::env::var("ROCBLAS_DEVICE_MEMORY_SIZE") {
        Ok(value) => value,
        Err(_) => return DEFAULT_WORKSPACE,
    };
    match value.trim().parse::<usize>() {
        Ok(0) => DEFAULT_WORKSPACE,
        Ok(n) => n,
        Err(_) => {
            eprintln!(
                "rocblassim (simulated rocBLAS): ignoring ROCBLAS_DEVICE_MEMORY_SIZE={:?}: \
                 expected a byte count; using {} bytes",
                value, DEFAULT_WORKSPACE
            );
            DEFAULT_WORKSPACE
        }
    }
}

/// Creates a handle and `hipMalloc`s its workspace. On failure `*handle` is left untouched.
///
/// # Safety
/// `handle` is null or points to writable storage for a `rocblas_handle`.
#[no_mangle]
pub unsafe extern "C" fn rocblas_create_handle(handle: *mut *mut Handle) -> c_int {
    guard(|| {
        if handle.is_null() {
            return STATUS_INVALID_HANDLE;
        }
        let mut workspace = ptr::null_mut();
        if hip::hipMalloc(&mut workspace, workspace_size()) != 0 {
            return STATUS_MEMORY_ERROR;
        }
        handle.write(Box::into_raw(Box::new(Handle { workspace })));
        STATUS_SUCCESS
    })
}

/// Frees the workspace with `hipFree` and the handle.
///
/// # Safety
/// `handle` is null or came from `rocblas_create_handle` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rocblas_destroy_handle(handle: *mut Handle) -> c_int {
    guard(|| {
        if handle.is_null() {
            return STATUS_INVALID_HANDLE;
        }
        let handle = Box::from_raw(handle);
        match hip::hipFree(handle.workspace) {
            0 => STATUS_SUCCESS,
            _ => STATUS_INTERNAL_ERROR,
        }
    })
}
