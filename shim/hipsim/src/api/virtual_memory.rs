//! The virtual memory exports (reserve, create, map, set access), each a thin wrapper over
//! `crate::vmm`, which checks and does the work.

use std::ffi::c_void;
use std::os::raw::{c_int, c_ulonglong};

use crate::error;
use crate::vmm;

hip_export! {
    /// Reserves address space (inaccessible, charged nothing) aligned to at least 2 MiB.
    "hip_5.1" fn hipMemAddressReserve(
        ptr: *mut *mut c_void,
        size: usize,
        alignment: usize,
        addr: *mut c_void,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::address_reserve(ptr, size, alignment, addr, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemAddressFree(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| vmm::address_free(ptr, size))
    }
}

hip_export! {
    /// Physical memory, charged to `prop->location.id` and counted like `hipMalloc`.
    "hip_5.1" fn hipMemCreate(
        handle: *mut *mut c_void,
        size: usize,
        prop: *const vmm::AllocationProp,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::create(handle, size, prop, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemRelease(handle: *mut c_void) -> c_int {
        error::api(|| vmm::release(handle))
    }
}

hip_export! {
    "hip_5.1" fn hipMemMap(
        ptr: *mut c_void,
        size: usize,
        offset: usize,
        handle: *mut c_void,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::map(ptr, size, offset, handle, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemSetAccess(
        ptr: *mut c_void,
        size: usize,
        desc: *const vmm::AccessDesc,
        count: usize,
    ) -> c_int {
        error::api(|| vmm::set_access(ptr, size, desc, count))
    }
}

hip_export! {
    "hip_5.1" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| vmm::unmap(ptr, size))
    }
}

hip_export! {
    "hip_5.1" fn hipMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const vmm::AllocationProp,
        option: c_int,
    ) -> c_int {
        error::api(|| vmm::granularity(granularity, prop, option))
    }
}
