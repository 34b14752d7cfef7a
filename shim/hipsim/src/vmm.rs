//! HIP's virtual memory management: `hipMemAddressReserve` reserves address space,
//! `hipMemCreate` makes a handle to physical memory (charged to its device like `hipMalloc`),
//! `hipMemMap` puts a handle's memory into a reservation, `hipMemSetAccess` lets devices use it,
//! and `hipMemUnmap`, `hipMemRelease` and `hipMemAddressFree` undo them. Argument checks and
//! codes follow ROCm's `clr` (`hipamd/src/hip_vm.cpp`), which returns `hipErrorInvalidValue` for
//! most misuse. Linux only (`sys::VMM`); `HIPSIM_VMM=0` turns it off: every call answers
//! `hipErrorNotSupported` and `hipDeviceAttributeVirtualMemoryManagementSupported` reads 0.
//!
//! Each mapping is also a block of kind `Mapped` in the memory table, so copies, sets, fills and
//! `hipPointerGetAttributes` treat it as device memory of the handle's device, across
//! neighbouring mappings too, and only where access was granted; `hipFree` refuses it.
//!
//! `hipMemRelease` of a handle that is still mapped is allowed, as in CUDA and ROCm (which
//! reference-count it): the memory is freed, and its bytes returned to the device, when its last
//! mapping is unmapped. A second release of the same handle is `hipErrorInvalidValue`.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::{ptr, slice};

use crate::config::{self, Config, DeferredRelease};
use crate::cost::{self, Call};
use crate::error::*;
use crate::memory::{Access, Memory};
use crate::state::{self, Counters, Sim};
use crate::sys;
use crate::work;

/// What `hipMemGetAllocationGranularity` reports, minimum and recommended alike; sizes,
/// reservations and mapping addresses must be multiples of it.
pub const GRANULARITY: usize = 2 << 20;

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

/// Whether the calls work here: on Linux unless `HIPSIM_VMM=0`.
pub fn supported(cfg: &Config) -> bool {
    cfg.vmm && sys::VMM
}

/// The checks every call starts with: a device exists, and VMM is supported.
fn begin() -> HipResult {
    let cfg = config::get();
    if cfg.devices == 0 {
        return Err(NO_DEVICE);
    }
    match supported(cfg) {
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

struct Reservation {
    size: usize,
    /// Numbers it apart from a later reservation at the same address.
    id: u64,
    /// Bytes of released handles last mapped here, per device, held until the range is freed
    /// (`HIPSIM_VMM_DEFERRED_RELEASE`).
    deferred: Vec<(usize, i32)>,
}

struct Handle {
    size: usize,
    device: i32,
    physical: sys::Physical,
    /// Mappings of it that are live.
    maps: usize,
    /// `hipMemRelease` was called: it goes when `maps` reaches 0.
    released: bool,
    /// Made with `requestedHandleTypes` = POSIX file descriptor: it may be exported.
    shareable: bool,
    /// Imported from another process's export: its memory is not this process's device's.
    imported: bool,
    /// The reservation it was last mapped in: its address and `id`.
    reservation: Option<(usize, u64)>,
}

struct Mapping {
    size: usize,
    handle: usize,
    /// When it was made, from `Vmm::made`: ROCm 7.2 lists a reservation's mappings in this order.
    made: u64,
    /// What each device may do (index: device); the host protection is the widest of them.
    access: Vec<Access>,
}

/// The reservations, handles and mappings of the process.
#[derive(Default)]
pub struct Vmm {
    reservations: BTreeMap<usize, Reservation>,
    handles: BTreeMap<usize, Handle>,
    mappings: BTreeMap<usize, Mapping>,
    /// Handles are numbers, never addresses: the last one handed out.
    last_handle: usize,
    /// Reservations and mappings made so far, numbering each.
    made: u64,
}

impl Vmm {
    /// The starts of the whole mappings that follow each other from `ptr` and end exactly at
    /// `ptr + size`, as `hipMemSetAccess` and `hipMemUnmap` require (ROCm checks the same).
    fn run(&self, ptr: usize, size: usize) -> Result<Vec<usize>, HipError> {
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        let mut starts = Vec::new();
        let mut at = ptr;
        while at < end {
            let mapping = self.mappings.get(&at).ok_or(INVALID_VALUE)?;
            starts.push(at);
            at += mapping.size;
        }
        match at == end {
            true => Ok(starts),
            false => Err(INVALID_VALUE),
        }
    }

    /// ROCm 7.2's size check of `hipMemSetAccess` (`Config::vmm_set_access_from_first`): `ptr`
    /// lies in a mapping, and `size` is the summed size of the first mappings, in the order
    /// they were made, of the reservation holding it (clr 7.2 summed `parent()->subBuffers()`,
    /// stopping with `hipErrorInvalidValue` once past `size`).
    fn sizes_from_first(&self, ptr: usize, size: usize) -> bool {
        let start = match self.mapping_at(ptr) {
            Some((start, _)) => start,
            None => return false,
        };
        let (first, end) = match self.reservation_at(start) {
            Some((first, r)) => (first, first + r.size),
            None => return false,
        };
        let mut inside: Vec<(u64, usize)> = self
            .mappings
            .range(first..end)
            .map(|(_, m)| (m.made, m.size))
            .collect();
        inside.sort_unstable();
        let mut sum = 0;
        for (_, bytes) in inside {
            sum += bytes;
            if sum >= size {
                return sum == size;
            }
        }
        false
    }

    /// The mapping holding byte `at`: its start and record.
    fn mapping_at(&self, at: usize) -> Option<(usize, &Mapping)> {
        self.mappings
            .range(..=at)
            .next_back()
            .filter(|(&start, m)| at < start + m.size)
            .map(|(&start, m)| (start, m))
    }

    /// The reservation holding byte `at`: its start and record.
    fn reservation_at(&self, at: usize) -> Option<(usize, &Reservation)> {
        self.reservations
            .range(..=at)
            .next_back()
            .filter(|(&start, r)| at < start + r.size)
            .map(|(&start, r)| (start, r))
    }

    /// Whether any mapping overlaps `[ptr, end)`.
    fn mapped_within(&self, ptr: usize, end: usize) -> bool {
        self.mappings
            .range(..end)
            .next_back()
            .map_or(false, |(&start, m)| start + m.size > ptr)
    }

    fn map(&mut self, mem: &mut Memory, ptr: usize, size: usize, handle: usize) -> HipResult {
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        let inside = self
            .reservation_at(ptr)
            .filter(|(start, r)| end <= start + r.size)
            .map(|(start, r)| (start, r.id));
        if inside.is_none() || self.mapped_within(ptr, end) {
            return Err(INVALID_VALUE);
        }
        let h = self
            .handles
            .get_mut(&handle)
            .filter(|h| !h.released && size <= h.size)
            .ok_or(INVALID_VALUE)?;
        // SAFETY: aligned to the granularity (checked by the caller), inside a reservation, not
        // mapped, and no larger than the handle's memory.
        if !unsafe { sys::map_physical(ptr as *mut u8, size, &h.physical) } {
            return Err(OUT_OF_MEMORY);
        }
        h.maps += 1;
        h.reservation = inside;
        self.made += 1;
        let mapping = Mapping {
            size,
            handle,
            made: self.made,
            access: vec![Access::None; mem.devices()],
        };
        self.mappings.insert(ptr, mapping);
        mem.add_mapping(ptr, size, h.device);
        Ok(())
    }

    fn set_access(
        &mut self,
        mem: &mut Memory,
        ptr: usize,
        size: usize,
        grants: &[(usize, Access)],
    ) -> HipResult {
        if config::get().vmm_set_access_from_first && !self.sizes_from_first(ptr, size) {
            return Err(INVALID_VALUE);
        }
        for start in self.run(ptr, size)? {
            let mapping = self.mappings.get_mut(&start).ok_or(INVALID_VALUE)?;
            for &(device, access) in grants {
                mapping.access[device] = access;
            }
            let widest = mapping.access.iter().copied().max().unwrap_or(Access::None);
            // SAFETY: a live mapping made by `sys::map_physical`; the state lock is held, so no
            // simulated copy or fill is inside it.
            if !unsafe { sys::protect(start as *mut u8, mapping.size, widest) } {
                return Err(UNKNOWN);
            }
            mem.set_access(start, widest);
        }
        Ok(())
    }

    /// The devices whose work may still touch the mappings of `[ptr, ptr + size)`: their owner
    /// and every device granted access.
    fn devices_using(&self, ptr: usize, size: usize) -> Result<Vec<i32>, HipError> {
        let mut devices = Vec::new();
        for start in self.run(ptr, size)? {
            let mapping = &self.mappings[&start];
            if let Some(h) = self.handles.get(&mapping.handle) {
                devices.push(h.device);
            }
            for (device, access) in mapping.access.iter().enumerate() {
                if *access != Access::None {
                    devices.push(device as i32);
                }
            }
        }
        devices.sort_unstable();
        devices.dedup();
        Ok(devices)
    }

    fn unmap(
        &mut self,
        mem: &mut Memory,
        counters: &mut Counters,
        ptr: usize,
        size: usize,
    ) -> HipResult {
        for start in self.run(ptr, size)? {
            let mapping = self.mappings.remove(&start).ok_or(INVALID_VALUE)?;
            mem.remove_mapping(start);
            // SAFETY: exactly a mapping made by `sys::map_physical`, gone from every table, and
            // the state lock keeps simulated copies and fills out of it.
            if !unsafe { sys::unmap_physical(start as *mut u8, mapping.size) } {
                return Err(UNKNOWN);
            }
            let handle = mapping.handle;
            if let Some(h) = self.handles.get_mut(&handle) {
                h.maps -= 1;
                if h.released && h.maps == 0 {
                    self.drop_handle(mem, counters, handle);
                }
            }
        }
        Ok(())
    }

    /// Records a new handle (made here, or `imported` from another process); its number.
    fn add_handle(
        &mut self,
        size: usize,
        device: i32,
        physical: sys::Physical,
        shareable: bool,
        imported: bool,
    ) -> usize {
        self.last_handle += 16;
        let record = Handle {
            size,
            device,
            physical,
            maps: 0,
            released: false,
            shareable,
            imported,
            reservation: None,
        };
        self.handles.insert(self.last_handle, record);
        self.last_handle
    }

    fn release(&mut self, mem: &mut Memory, counters: &mut Counters, handle: usize) -> HipResult {
        let h = self
            .handles
            .get_mut(&handle)
            .filter(|h| !h.released)
            .ok_or(INVALID_VALUE)?;
        h.released = true;
        if h.maps == 0 {
            self.drop_handle(mem, counters, handle);
        }
        Ok(())
    }

    /// Frees a handle's memory and returns its bytes to its device.
    fn drop_handle(&mut self, mem: &mut Memory, counters: &mut Counters, handle: usize) {
        if let Some(h) = self.handles.remove(&handle) {
            // The reservation it was last mapped in, if that one is still there.
            let range = h
                .reservation
                .filter(|(r, id)| self.reservations.get(r).map_or(false, |res| res.id == *id))
                .map(|(r, _)| r);
            let deferred = match config::get().vmm_deferred_release {
                DeferredRelease::Never => false,
                DeferredRelease::UntilRangeFreed => true,
                DeferredRelease::WhileRangeInUse => range.map_or(false, |r| {
                    let size = self.reservations.get(&r).map_or(0, |res| res.size);
                    self.mapped_within(r, r + size)
                }),
            };
            let held = range
                .filter(|_| deferred)
                .and_then(|r| self.reservations.get_mut(&r));
            match held {
                _ if h.imported => {}
                Some(r) => r.deferred.push((h.size, h.device)),
                None => mem.uncharge(counters, h.size, h.device),
            }
        }
    }

    fn free_reservation(
        &mut self,
        mem: &mut Memory,
        counters: &mut Counters,
        ptr: usize,
        size: usize,
    ) -> HipResult {
        match self.reservations.get(&ptr) {
            Some(r) if r.size == size && !self.mapped_within(ptr, ptr + size) => {}
            _ => return Err(INVALID_VALUE),
        }
        if let Some(r) = self.reservations.remove(&ptr) {
            for (bytes, device) in r.deferred {
                mem.uncharge(counters, bytes, device);
            }
        }
        // SAFETY: exactly a range `sys::reserve` returned, with nothing mapped in it any more.
        unsafe { sys::free_reservation(ptr as *mut u8, size) };
        Ok(())
    }
}

/// `hipMemAddressReserve`. `addr` is a hint, followed when that range is free and aligned.
pub unsafe fn address_reserve(
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
        s.vmm.made += 1;
        let reservation = Reservation {
            size,
            id: s.vmm.made,
            deferred: Vec::new(),
        };
        s.vmm.reservations.insert(p as usize, reservation);
        Ok::<_, HipError>(p)
    })?;
    out.write(p as *mut c_void);
    Ok(())
}

/// `hipMemAddressFree`: the whole of one reservation, with nothing mapped in it.
pub unsafe fn address_free(ptr: *mut c_void, size: usize) -> HipResult {
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
pub unsafe fn create(
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
    cost::pay(Call::Create, size);
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
pub unsafe fn export_shareable(
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
    let fd = state::with(|s| {
        let h = s
            .vmm
            .handles
            .get(&(handle as usize))
            .filter(|h| !h.released && h.shareable)
            .ok_or(INVALID_VALUE)?;
        h.physical.export().ok_or(OUT_OF_MEMORY)
    })?;
    (out as *mut c_int).write(fd);
    Ok(())
}

/// `hipMemImportFromShareableHandle`: the descriptor is passed as the pointer's value, as clr's
/// `ImportShareableHSAHandle` reads it; the handle belongs to the current device.
pub unsafe fn import_shareable(
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
pub unsafe fn release(handle: *mut c_void) -> HipResult {
    begin()?;
    if handle.is_null() {
        return Err(INVALID_VALUE);
    }
    let size = state::with(|s| s.vmm.handles.get(&(handle as usize)).map_or(0, |h| h.size));
    cost::pay(Call::Release, size);
    state::with(|s| s.vmm.release(&mut s.mem, &mut s.counters, handle as usize))
}

/// `hipMemMap`: offset 0 (as ROCm requires), `size` a multiple of the granularity and at most
/// the handle's size, at a granularity-aligned `ptr` inside one reservation, over nothing mapped.
pub unsafe fn map(
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
    cost::pay(Call::Map, size);
    state::with(|s| s.vmm.map(&mut s.mem, ptr as usize, size, handle as usize))
}

/// `hipMemSetAccess`: `[ptr, ptr + size)` must be whole mappings without gaps; each descriptor
/// names a device and `hipMemAccessFlags`. The host protection of a mapping (what the
/// simulator's copies see) is the widest access any device has. `HIPSIM_VMM_SETACCESS_FAILS=1`
/// makes every call `hipErrorInvalidValue`, a device that claims support it does not have;
/// `HIPSIM_VMM_SETACCESS_FROM_FIRST=1` adds ROCm 7.2's size check (`Vmm::sizes_from_first`).
pub unsafe fn set_access(
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
    cost::pay(Call::SetAccess, size);
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
pub unsafe fn get_access(
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
        let (_, mapping) = s.vmm.mapping_at(ptr as usize).ok_or(INVALID_VALUE)?;
        *flags = mapping.access[location.id as usize] as u64;
        Ok(())
    })
}

/// `hipMemUnmap`: `[ptr, ptr + size)` must be whole mappings without gaps. Waits first for the
/// queued work of the devices that may use them, as ROCm synchronizes their streams.
pub unsafe fn unmap(ptr: *mut c_void, size: usize) -> HipResult {
    begin()?;
    if ptr.is_null() || size == 0 {
        return Err(INVALID_VALUE);
    }
    let devices = state::with(|s| s.vmm.devices_using(ptr as usize, size))?;
    for device in devices {
        work::wait_for(|w| w.device == device);
    }
    cost::pay(Call::Unmap, size);
    state::with(|s| s.vmm.unmap(&mut s.mem, &mut s.counters, ptr as usize, size))
}

/// `hipMemGetAllocationGranularity`.
pub unsafe fn granularity(
    out: *mut usize,
    prop: *const AllocationProp,
    option: c_int,
) -> HipResult {
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
