//! HIP's virtual memory calls: `hipMemAddressReserve` reserves address space, `hipMemCreate`
//! makes a handle to physical memory (charged to its device like `hipMalloc`), `hipMemMap` puts
//! a handle's memory into a reservation, `hipMemSetAccess` lets devices use it, and
//! `hipMemUnmap`, `hipMemRelease` and `hipMemAddressFree` undo them. Argument checks and codes
//! follow ROCm's `clr` (`hipamd/src/hip_vm.cpp`), which returns `hipErrorInvalidValue` for most
//! misuse; what they leave behind is `crate::vmm`. Linux only (`sys::VMM`); `HIPSIM_VMM=0`
//! turns it off: every call answers `hipErrorNotSupported` and
//! `hipDeviceAttributeVirtualMemoryManagementSupported` reads 0.

use std::ffi::c_void;
use std::os::raw::{c_int, c_ulonglong};
use std::{ptr, slice};

use crate::config;
use crate::cost::Call;
use crate::error::{self, *};
use crate::state::{self, Sim};
use crate::sys::{self, Access};
use crate::vmm::{self, GRANULARITY};
use crate::work;

/// `hipMemAllocationTypePinned`, `hipMemLocationTypeDevice`, `hipMemHandleTypeNone` and
/// `hipMemHandleTypePosixFileDescriptor`, `hipMemAllocationGranularityMinimum|Recommended`.
const ALLOCATION_PINNED: c_int = 1;
const LOCATION_DEVICE: c_int = 1;
const HANDLE_TYPE_NONE: c_int = 0;
const HANDLE_TYPE_POSIX_FD: c_int = 1;
const GRANULARITY_MINIMUM: c_int = 0;
const GRANULARITY_RECOMMENDED: c_int = 1;

// The structs follow ROCm 6.x `include/hip/hip_runtime_api.h` (the CUDA-compatible layout;
// checked with `offsetof` against tags rocm-6.0.0 and rocm-6.2.0 of ROCm/HIP, and unchanged in
// ROCm 7's rocm-systems, where `requestedHandleType` became a union with `requestedHandleTypes`).
// ROCm 5.x headers (Debian's /usr/include/hip) differ and are not what this follows.

/// `hipMemLocation`: 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    /// `hipMemLocationType`.
    pub kind: c_int,
    pub id: c_int,
}

/// `hipMemAllocationProp`: 32 bytes, `location` at 8, `win32HandleMetaData` at 16,
/// `allocFlags` at 24.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocationProp {
    /// `hipMemAllocationType`.
    pub kind: c_int,
    /// `hipMemAllocationHandleType`.
    pub requested_handle_type: c_int,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: AllocFlags,
}

/// The `allocFlags` member of `hipMemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
}

/// `hipMemAccessDesc`: 12 bytes, `flags` at 8.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AccessDesc {
    pub location: MemLocation,
    /// `hipMemAccessFlags`: 0 none, 1 read, 3 read and write.
    pub flags: c_int,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<MemLocation>() == 8);
    assert!(std::mem::size_of::<AllocationProp>() == 32);
    assert!(std::mem::size_of::<AccessDesc>() == 12);
};

/// The checks every call starts with: a device exists, and VMM is supported.
fn begin() -> HipResult {
    let cfg = config::get();
    if cfg.devices == 0 {
        return Err(NO_DEVICE);
    }
    match vmm::supported(cfg) {
        true => Ok(()),
        false => Err(NOT_SUPPORTED),
    }
}

/// A device index that exists, for the checks that answer `hipErrorInvalidValue` otherwise.
fn valid_device(sim: &Sim, id: c_int) -> bool {
    (0..sim.cfg.devices).contains(&id)
}

fn access_of(flags: c_int) -> Option<Access> {
    match flags {
        0 => Some(Access::None),
        1 => Some(Access::Read),
        3 => Some(Access::ReadWrite),
        _ => None,
    }
}

/// `hipMemAddressReserve`. `addr` is a hint, followed when that range is free and aligned.
unsafe fn address_reserve(
    out: *mut *mut c_void,
    size: usize,
    alignment: usize,
    addr: *mut c_void,
    flags: u64,
) -> HipResult {
    begin()?;
    if out.is_null() || flags != 0 {
        return Err(INVALID_VALUE);
    }
    if size == 0 || size % GRANULARITY != 0 || alignment & alignment.wrapping_sub(1) != 0 {
        return Err(INVALID_VALUE);
    }
    out.write(ptr::null_mut());
    let align = alignment.max(GRANULARITY);
    let p = state::with(|s| {
        let p = sys::reserve(size, align, addr as usize).ok_or(OUT_OF_MEMORY)?;
        s.vmm.add_reservation(p as usize, size);
        Ok::<_, HipError>(p)
    })?;
    out.write(p as *mut c_void);
    Ok(())
}

/// `hipMemAddressFree`: the whole of one reservation, with nothing mapped in it.
unsafe fn address_free(ptr: *mut c_void, size: usize) -> HipResult {
    begin()?;
    if ptr.is_null() || size == 0 {
        return Err(INVALID_VALUE);
    }
    state::with(|s| {
        s.vmm
            .free_reservation(&mut s.mem, &mut s.counters, ptr as usize, size)
    })
}

/// `hipMemCreate`: an allocating call like `hipMalloc` for capacity, counters and the fault
/// knobs; the handle is a number, not an address.
unsafe fn create(
    out: *mut *mut c_void,
    size: usize,
    prop: *const AllocationProp,
    flags: u64,
) -> HipResult {
    begin()?;
    if out.is_null() || size == 0 || flags != 0 || prop.is_null() {
        return Err(INVALID_VALUE);
    }
    let prop = prop.read();
    if prop.kind != ALLOCATION_PINNED || prop.location.kind != LOCATION_DEVICE {
        return Err(INVALID_VALUE);
    }
    let device = prop.location.id;
    state::with(|s| s.check_device(device))?;
    if prop.requested_handle_type != HANDLE_TYPE_NONE
        && prop.requested_handle_type != HANDLE_TYPE_POSIX_FD
    {
        return Err(NOT_SUPPORTED);
    }
    if size % GRANULARITY != 0 {
        return Err(INVALID_VALUE);
    }
    out.write(ptr::null_mut());
    state::pay(Call::Create, size);
    let handle = state::with(|s| {
        let physical = s.mem.charge(s.cfg, &mut s.counters, size, device, || {
            sys::Physical::create(size)
        })?;
        let shareable = prop.requested_handle_type == HANDLE_TYPE_POSIX_FD;
        Ok::<_, HipError>(s.vmm.add_handle(size, device, physical, shareable, false))
    })?;
    out.write(handle as *mut c_void);
    Ok(())
}

/// `hipMemExportToShareableHandle` for a POSIX file descriptor, written to `*(int*)out`
/// (clr `ExportShareableVMMHandle`): only for a live handle made with that handle type
/// requested, as the CUDA driver requires too.
pub(crate) unsafe fn export_shareable(
    out: *mut c_void,
    handle: *mut c_void,
    handle_type: c_int,
    flags: u64,
) -> HipResult {
    begin()?;
    if out.is_null() || handle.is_null() || flags != 0 {
        return Err(INVALID_VALUE);
    }
    if handle_type != HANDLE_TYPE_POSIX_FD {
        return Err(NOT_SUPPORTED);
    }
    let fd = state::with(|s| s.vmm.export(handle as usize))?;
    (out as *mut c_int).write(fd);
    Ok(())
}

/// `hipMemImportFromShareableHandle`: the descriptor is passed as the pointer's value, as clr's
/// `ImportShareableHSAHandle` reads it; the handle belongs to the current device.
pub(crate) unsafe fn import_shareable(
    out: *mut *mut c_void,
    os_handle: *mut c_void,
    handle_type: c_int,
) -> HipResult {
    begin()?;
    if out.is_null() || os_handle.is_null() {
        return Err(INVALID_VALUE);
    }
    if handle_type != HANDLE_TYPE_POSIX_FD {
        return Err(NOT_SUPPORTED);
    }
    let (physical, size) =
        sys::Physical::import(os_handle as usize as c_int).ok_or(INVALID_VALUE)?;
    let device = state::current_device();
    let handle = state::with(|s| s.vmm.add_handle(size, device, physical, true, true));
    out.write(handle as *mut c_void);
    Ok(())
}

/// `hipMemRelease`.
unsafe fn release(handle: *mut c_void) -> HipResult {
    begin()?;
    if handle.is_null() {
        return Err(INVALID_VALUE);
    }
    let size = state::with(|s| s.vmm.handle_size(handle as usize));
    state::pay(Call::Release, size);
    state::with(|s| s.vmm.release(&mut s.mem, &mut s.counters, handle as usize))
}

/// `hipMemMap`: offset 0 (as ROCm requires), `size` a multiple of the granularity and at most
/// the handle's size, at a granularity-aligned `ptr` inside one reservation, over nothing mapped.
unsafe fn map(
    ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> HipResult {
    begin()?;
    if ptr.is_null() || handle.is_null() || size == 0 || offset != 0 || flags != 0 {
        return Err(INVALID_VALUE);
    }
    if size % GRANULARITY != 0 || ptr as usize % GRANULARITY != 0 {
        return Err(INVALID_VALUE);
    }
    state::pay(Call::Map, size);
    state::with(|s| s.vmm.map(&mut s.mem, ptr as usize, size, handle as usize))
}

/// `hipMemSetAccess`: `[ptr, ptr + size)` must be whole mappings without gaps; each descriptor
/// names a device and `hipMemAccessFlags`. The host protection of a mapping (what the
/// simulator's copies see) is the widest access any device has. `HIPSIM_VMM_SETACCESS_FAILS=1`
/// makes every call `hipErrorInvalidValue`, a device that claims support it does not have;
/// `HIPSIM_VMM_SETACCESS_FROM_FIRST=1` adds ROCm 7.2's size check (`Vmm::sizes_from_first`).
unsafe fn set_access(
    ptr: *mut c_void,
    size: usize,
    desc: *const AccessDesc,
    count: usize,
) -> HipResult {
    begin()?;
    if ptr.is_null() || size == 0 || desc.is_null() || count == 0 {
        return Err(INVALID_VALUE);
    }
    if config::get().vmm_set_access_fails {
        return Err(INVALID_VALUE);
    }
    let descs = slice::from_raw_parts(desc, count);
    state::pay(Call::SetAccess, size);
    state::with(|s| {
        let mut grants = Vec::with_capacity(descs.len());
        for d in descs {
            let access = access_of(d.flags).ok_or(INVALID_VALUE)?;
            if d.location.kind != LOCATION_DEVICE || !valid_device(s, d.location.id) {
                return Err(INVALID_VALUE);
            }
            grants.push((d.location.id as usize, access));
        }
        s.vmm.set_access(&mut s.mem, ptr as usize, size, &grants)
    })
}

/// `hipMemGetAccess`: what device `location` may do at `ptr`, which must lie in a mapping
/// (clr `hip_vm.cpp`: a null argument or an address that is not mapped is
/// `hipErrorInvalidValue`).
pub(crate) unsafe fn get_access(
    flags: *mut u64,
    location: *const MemLocation,
    ptr: *mut c_void,
) -> HipResult {
    begin()?;
    if flags.is_null() || location.is_null() || ptr.is_null() {
        return Err(INVALID_VALUE);
    }
    let location = *location;
    state::with(|s| {
        if location.kind != LOCATION_DEVICE || !valid_device(s, location.id) {
            return Err(INVALID_VALUE);
        }
        let access = s.vmm.access_at(ptr as usize, location.id as usize);
        *flags = access.ok_or(INVALID_VALUE)? as u64;
        Ok(())
    })
}

/// `hipMemUnmap`: `[ptr, ptr + size)` must be whole mappings without gaps. Waits first for the
/// queued work of the devices that may use them, as ROCm synchronizes their streams.
unsafe fn unmap(ptr: *mut c_void, size: usize) -> HipResult {
    begin()?;
    if ptr.is_null() || size == 0 {
        return Err(INVALID_VALUE);
    }
    let devices = state::with(|s| s.vmm.devices_using(ptr as usize, size))?;
    for device in devices {
        work::wait_for(|w| w.device == device);
    }
    state::pay(Call::Unmap, size);
    state::with(|s| s.vmm.unmap(&mut s.mem, &mut s.counters, ptr as usize, size))
}

/// `hipMemGetAllocationGranularity`.
unsafe fn granularity(out: *mut usize, prop: *const AllocationProp, option: c_int) -> HipResult {
    begin()?;
    if out.is_null() || prop.is_null() {
        return Err(INVALID_VALUE);
    }
    let prop = prop.read();
    let device_ok = state::with(|s| valid_device(s, prop.location.id));
    if prop.kind != ALLOCATION_PINNED
        || prop.location.kind != LOCATION_DEVICE
        || !device_ok
        || (option != GRANULARITY_MINIMUM && option != GRANULARITY_RECOMMENDED)
    {
        return Err(INVALID_VALUE);
    }
    out.write(GRANULARITY);
    Ok(())
}

hip_export! {
    /// Reserves address space (inaccessible, charged nothing) aligned to at least 2 MiB.
    "hip_5.1" fn hipMemAddressReserve(
        ptr: *mut *mut c_void,
        size: usize,
        alignment: usize,
        addr: *mut c_void,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| address_reserve(ptr, size, alignment, addr, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemAddressFree(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| address_free(ptr, size))
    }
}

hip_export! {
    /// Physical memory, charged to `prop->location.id` and counted like `hipMalloc`.
    "hip_5.1" fn hipMemCreate(
        handle: *mut *mut c_void,
        size: usize,
        prop: *const AllocationProp,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| create(handle, size, prop, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemRelease(handle: *mut c_void) -> c_int {
        error::api(|| release(handle))
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
        error::api(|| map(ptr, size, offset, handle, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemSetAccess(
        ptr: *mut c_void,
        size: usize,
        desc: *const AccessDesc,
        count: usize,
    ) -> c_int {
        error::api(|| set_access(ptr, size, desc, count))
    }
}

hip_export! {
    "hip_5.1" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| unmap(ptr, size))
    }
}

hip_export! {
    "hip_5.1" fn hipMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const AllocationProp,
        option: c_int,
    ) -> c_int {
        error::api(|| self::granularity(granularity, prop, option))
    }
}
