//! Sharing virtual memory between processes: `hipMemExportToShareableHandle` and
//! `hipMemImportFromShareableHandle` with POSIX file descriptors (clr `hip_vm.cpp`). The
//! simulated device memory behind a handle is a `memfd`, so a descriptor passed to another
//! process (over a Unix socket) maps the same bytes there.

use std::ffi::c_void;
use std::os::raw::{c_int, c_ulonglong};

use crate::api::{export_shareable, import_shareable};
use crate::error;

hip_export! {
    "hip_5.1" fn hipMemExportToShareableHandle(
        shareable: *mut c_void,
        handle: *mut c_void,
        handle_type: c_int,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| export_shareable(shareable, handle, handle_type, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemImportFromShareableHandle(
        handle: *mut *mut c_void,
        os_handle: *mut c_void,
        handle_type: c_int,
    ) -> c_int {
        error::api(|| import_shareable(handle, os_handle, handle_type))
    }
}
