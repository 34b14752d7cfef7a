//! Sharing virtual memory between processes: `hipMemExportToShareableHandle` and
//! `hipMemImportFromShareableHandle` with POSIX file descriptors (clr `hip_vm.cpp`). The
//! simulated device memory behind a handle is a `memfd`, so a descriptor passed to another
//! process (over a Unix socket) maps the same bytes there. The `hipIpc*` calls keep clr's
//! argument checks but share nothing: the simulator's `hipMalloc` memory is not shareable.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint, c_ulonglong};

use crate::error::{self, *};
use crate::state;
use crate::vmm;

hip_export! {
    "hip_5.1" fn hipMemExportToShareableHandle(
        shareable: *mut c_void,
        handle: *mut c_void,
        handle_type: c_int,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::export_shareable(shareable, handle, handle_type, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemImportFromShareableHandle(
        handle: *mut *mut c_void,
        os_handle: *mut c_void,
        handle_type: c_int,
    ) -> c_int {
        error::api(|| vmm::import_shareable(handle, os_handle, handle_type))
    }
}

/// `hipIpcMemLazyEnablePeerAccess`, the only flag clr's `hipIpcOpenMemHandle` accepts.
const IPC_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

hip_export! {
    /// The simulator does not share `hipMalloc` memory between processes (it is anonymous
    /// memory): a live allocation is `hipErrorNotSupported`, anything else
    /// `hipErrorInvalidDevicePointer` as in clr.
    "hip_4.2" fn hipIpcGetMemHandle(handle: *mut c_void, ptr: *mut c_void) -> c_int {
        error::api(|| {
            if handle.is_null() || ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            match state::with(|s| s.mem.contains(ptr as usize, 1)) {
                true => Err(NOT_SUPPORTED),
                false => Err(INVALID_DEVICE_POINTER),
            }
        })
    }
}

hip_export! {
    /// clr's checks: a null `ptr` or other flags are `hipErrorInvalidValue`, so is a handle whose
    /// size (bytes 32..40 of `ihipIpcMemHandle_t`) is 0; any other handle is not one this
    /// simulator made, which clr answers with `hipErrorInvalidDevicePointer`.
    "hip_4.2" fn hipIpcOpenMemHandle(ptr: *mut *mut c_void, handle: IpcHandle, flags: c_uint) -> c_int {
        error::api(|| {
            let size = u64::from_le_bytes(handle.0[32..40].try_into().map_err(|_| INVALID_VALUE)?);
            if ptr.is_null() || flags != IPC_LAZY_ENABLE_PEER_ACCESS || size == 0 {
                return Err(INVALID_VALUE);
            }
            Err(INVALID_DEVICE_POINTER)
        })
    }
}

hip_export! {
    /// Nothing is ever opened here.
    "hip_4.2" fn hipIpcCloseMemHandle(ptr: *mut c_void) -> c_int {
        let _ = ptr;
        error::api(|| Err(INVALID_VALUE))
    }
}

/// `hipIpcMemHandle_t`: 64 bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle([u8; 64]);
