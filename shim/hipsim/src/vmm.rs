//! The virtual memory of the process, as HIP's virtual memory calls leave it (the calls
//! themselves, their argument checks and codes, are `api/virtual_memory.rs`): the reserved
//! address ranges, the handles to physical memory (charged to their device like `hipMalloc`),
//! and the mappings of handles into ranges with the access each device was granted. Linux only
//! (`sys::VMM`); `HIPSIM_VMM=0` turns it off.
//!
//! Each mapping is also a block of kind `Mapped` in the memory table, so copies, sets, fills and
//! `hipPointerGetAttributes` treat it as device memory of the handle's device, across
//! neighbouring mappings too, and only where access was granted; `hipFree` refuses it.
//!
//! `hipMemRelease` of a handle that is still mapped is allowed, as in CUDA and ROCm (which
//! reference-count it): the memory is freed, and its bytes returned to the device, when its last
//! mapping is unmapped. A second release of the same handle is `hipErrorInvalidValue`.

use std::collections::BTreeMap;
use std::os::raw::c_int;

use crate::config::{self, Config, DeferredRelease};
use crate::counters::Counters;
use crate::error::*;
use crate::memory::Memory;
use crate::sys::{self, Access};

/// What `hipMemGetAllocationGranularity` reports, minimum and recommended alike; sizes,
/// reservations and mapping addresses must be multiples of it.
pub const GRANULARITY: usize = 2 << 20;

/// Whether the calls work here: on Linux unless `HIPSIM_VMM=0`.
pub fn supported(cfg: &Config) -> bool {
    cfg.vmm && sys::VMM
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
    /// Records the range `sys::reserve` gave at `ptr`.
    pub fn add_reservation(&mut self, ptr: usize, size: usize) {
        self.made += 1;
        let reservation = Reservation {
            size,
            id: self.made,
            deferred: Vec::new(),
        };
        self.reservations.insert(ptr, reservation);
    }

    /// A descriptor for a live `handle` made to be shared (`hipMemExportToShareableHandle`).
    pub fn export(&self, handle: usize) -> Result<c_int, HipError> {
        let h = self
            .handles
            .get(&handle)
            .filter(|h| !h.released && h.shareable)
            .ok_or(INVALID_VALUE)?;
        h.physical.export().ok_or(OUT_OF_MEMORY)
    }

    /// The size of `handle`'s memory, 0 for no such handle.
    pub fn handle_size(&self, handle: usize) -> usize {
        self.handles.get(&handle).map_or(0, |h| h.size)
    }

    /// What `device` may do at byte `at` of a mapping; `None` where nothing is mapped.
    pub fn access_at(&self, at: usize, device: usize) -> Option<Access> {
        self.mapping_at(at).map(|(_, m)| m.access[device])
    }

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

    /// Maps `size` bytes of `handle` at `ptr`, inside one reservation, over nothing mapped.
    pub fn map(&mut self, mem: &mut Memory, ptr: usize, size: usize, handle: usize) -> HipResult {
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

    pub fn set_access(
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
    pub fn devices_using(&self, ptr: usize, size: usize) -> Result<Vec<i32>, HipError> {
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

    pub fn unmap(
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
    pub fn add_handle(
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

    pub fn release(
        &mut self,
        mem: &mut Memory,
        counters: &mut Counters,
        handle: usize,
    ) -> HipResult {
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

    pub fn free_reservation(
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
