//! Simulated device memory: a table of live allocations (host mappings standing in for VRAM),
//! per-device capacity, and the fault injection that decides which allocation calls fail.
//! Ranges that the virtual memory calls map (`vmm`) are in the table too, as blocks of kind
//! `Mapped`: device memory for every check, but charged through their handle, not here, and
//! never freed by `hipFree`.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::counters::Counters;
use crate::error::{HipError, HipResult, INVALID_VALUE, OUT_OF_MEMORY};
use crate::sys::{self, Access};

/// How a block was allocated, which `hipPointerGetAttributes` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `hipMalloc`, `hipExtMallocWithFlags`, and the stream-ordered calls.
    Device,
    /// `hipMallocManaged`.
    Managed,
    /// A `hipMemMap` of a `hipMemCreate` handle: `hipFree`, `hipFreeAsync` and `hipDeviceReset`
    /// leave it alone (only `hipMemUnmap` removes it), and its bytes are charged by the handle.
    Mapped,
}

/// One live allocation. Its key in the table is its address.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    /// Bytes asked for; capacity is charged exactly this much.
    pub size: usize,
    pub device: i32,
    pub kind: Kind,
    /// The flags argument of the allocating call, for `hipPointerGetAttributes`.
    pub flags: u32,
    /// A `hipFreeAsync` is queued for it: it may not be freed again.
    pub freeing: bool,
    pub access: Access,
    /// A `memfd` now holding its bytes, made at its first `hipIpcGetMemHandle` (`ipc`); -1 until
    /// then.
    pub shared_fd: i32,
}

pub struct Memory {
    blocks: BTreeMap<usize, Block>,
    /// Bytes charged per device; always the sum of the sizes of that device's blocks.
    used: Vec<u64>,
    /// Allocation calls (of at least one byte) so far, numbering them for `HIPSIM_FAIL_NTH`.
    calls: u64,
    /// splitmix64 state behind `HIPSIM_FAIL_PROB`, seeded by `HIPSIM_SEED`.
    rng: u64,
}

impl Memory {
    pub fn new(cfg: &Config) -> Memory {
        Memory {
            blocks: BTreeMap::new(),
            used: vec![0; cfg.devices.max(0) as usize],
            calls: 0,
            rng: cfg.seed,
        }
    }

    /// How many devices there are.
    pub fn devices(&self) -> usize {
        self.used.len()
    }

    pub fn used(&self, device: i32) -> u64 {
        self.used.get(device as usize).copied().unwrap_or(0)
    }

    /// Charges `size > 0` bytes to `device`, unless a fault knob or the capacity says no, and
    /// counts an allocation; `back` makes what stands behind the bytes (`None`: out of memory,
    /// nothing charged). Every allocating call, `hipMemCreate` included, comes through here.
    pub fn charge<T>(
        &mut self,
        cfg: &Config,
        counters: &mut Counters,
        size: usize,
        device: i32,
        back: impl FnOnce() -> Option<T>,
    ) -> Result<T, HipError> {
        self.calls += 1;
        let draw = if cfg.fail_prob > 0.0 {
            self.next_unit()
        } else {
            1.0
        };
        let fits = (size as u64) <= cfg.vram.saturating_sub(self.used(device));
        let injected = cfg.fail_nth.contains(&self.calls)
            || draw < cfg.fail_prob
            || cfg.fail_above.map_or(false, |limit| size as u64 > limit);
        let backing = match (fits && !injected).then(back).flatten() {
            Some(backing) => backing,
            None => {
                counters.failed_allocs += 1;
                return Err(OUT_OF_MEMORY);
            }
        };
        self.used[device as usize] += size as u64;
        counters.allocs += 1;
        counters.live_allocs += 1;
        counters.live_bytes += size as u64;
        counters.peak_bytes = counters.peak_bytes.max(counters.live_bytes);
        Ok(backing)
    }

    /// Returns bytes charged by `charge` and counts a free.
    pub fn uncharge(&mut self, counters: &mut Counters, size: usize, device: i32) {
        self.used[device as usize] -= size as u64;
        counters.frees += 1;
        counters.live_allocs -= 1;
        counters.live_bytes -= size as u64;
    }

    /// Allocates `size > 0` bytes of host memory standing in for VRAM on `device`.
    pub fn alloc(
        &mut self,
        cfg: &Config,
        counters: &mut Counters,
        size: usize,
        device: i32,
        kind: Kind,
        flags: u32,
    ) -> Result<*mut u8, HipError> {
        let ptr = self.charge(cfg, counters, size, device, || sys::map(size))?;
        self.insert(ptr as usize, size, device, kind, flags, Access::ReadWrite);
        Ok(ptr)
    }

    fn insert(
        &mut self,
        ptr: usize,
        size: usize,
        device: i32,
        kind: Kind,
        flags: u32,
        access: Access,
    ) {
        let block = Block {
            size,
            device,
            kind,
            flags,
            freeing: false,
            access,
            shared_fd: -1,
        };
        self.blocks.insert(ptr, block);
    }

    /// Enters a mapping made by `hipMemMap` (kind `Mapped`, no access yet); charges nothing.
    pub fn add_mapping(&mut self, ptr: usize, size: usize, device: i32) {
        self.insert(ptr, size, device, Kind::Mapped, 0, Access::None);
    }

    /// Enters another process's allocation opened by `hipIpcOpenMemHandle`: device memory for
    /// every check, charged nothing here, removed by `hipIpcCloseMemHandle`.
    pub fn add_opened(&mut self, ptr: usize, size: usize, device: i32) {
        self.insert(ptr, size, device, Kind::Mapped, 0, Access::ReadWrite);
    }

    /// A descriptor of the allocation at `start`'s memory for another process to map, its bytes
    /// moved into a `memfd` at the first call (`sys::share_in_place`).
    pub fn share(&mut self, start: usize) -> Option<i32> {
        let b = self.blocks.get_mut(&start)?;
        if b.shared_fd < 0 {
            // SAFETY: a live allocation made by `sys::map(b.size)`.
            b.shared_fd = unsafe { sys::share_in_place(start as *mut u8, b.size) }?;
        }
        Some(b.shared_fd)
    }

    /// Removes the mapping that starts at `ptr`; false if there is none.
    pub fn remove_mapping(&mut self, ptr: usize) -> bool {
        match self.blocks.get(&ptr) {
            Some(b) if b.kind == Kind::Mapped => self.blocks.remove(&ptr).is_some(),
            _ => false,
        }
    }

    /// Records what `hipMemSetAccess` granted on the mapping at `ptr`.
    pub fn set_access(&mut self, ptr: usize, access: Access) {
        if let Some(b) = self.blocks.get_mut(&ptr).filter(|b| b.kind == Kind::Mapped) {
            b.access = access;
        }
    }

    /// Makes the device allocation at `ptr` a managed one (`hipMallocManaged` over `hipMalloc`,
    /// `selfcall`); anything else is left alone.
    pub fn make_managed(&mut self, ptr: usize, flags: u32) {
        if let Some(b) = self.blocks.get_mut(&ptr).filter(|b| b.kind == Kind::Device) {
            b.kind = Kind::Managed;
            b.flags = flags;
        }
    }

    /// The allocation that starts at `ptr`, if it is live and not already being freed (never a
    /// mapping: `hipFree` of one is `hipErrorInvalidValue`).
    pub fn block_at(&self, ptr: usize) -> Option<Block> {
        self.blocks
            .get(&ptr)
            .copied()
            .filter(|b| !b.freeing && b.kind != Kind::Mapped)
    }

    /// The block containing `ptr` and its start, interior pointers included.
    pub fn block_containing(&self, ptr: usize) -> Option<(usize, Block)> {
        let (&start, block) = self.blocks.range(..=ptr).next_back()?;
        (ptr < start + block.size.max(1)).then_some((start, *block))
    }

    /// Whether the device may write (`write`) or read `[ptr, ptr + len)`: the range lies inside
    /// one live block, or runs across mappings that follow each other without a gap (what a
    /// virtual memory reservation is for), with access granted on every part.
    pub fn covers(&self, ptr: usize, len: usize, write: bool) -> bool {
        let need = if write {
            Access::ReadWrite
        } else {
            Access::Read
        };
        let end = match ptr.checked_add(len) {
            Some(end) => end,
            None => return false,
        };
        let mut at = ptr;
        let mut first = true;
        loop {
            let (start, b) = match self.block_containing(at) {
                Some(found) => found,
                None => return false,
            };
            if b.access < need || (!first && (start != at || b.kind != Kind::Mapped)) {
                return false;
            }
            if end <= start + b.size {
                return true;
            }
            if b.kind != Kind::Mapped {
                return false;
            }
            at = start + b.size;
            first = false;
        }
    }

    /// `covers` for writing, what a memset or a fill needs.
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        self.covers(ptr, len, true)
    }

    /// Marks the block at `ptr` as having a stream-ordered free queued; its device.
    pub fn mark_freeing(&mut self, ptr: usize) -> Result<i32, HipError> {
        match self.blocks.get_mut(&ptr) {
            Some(b) if !b.freeing && b.kind != Kind::Mapped => {
                b.freeing = true;
                Ok(b.device)
            }
            _ => Err(INVALID_VALUE),
        }
    }

    /// Unmaps the allocation at `ptr` and returns its bytes to its device.
    pub fn release(&mut self, counters: &mut Counters, ptr: usize) -> HipResult {
        match self.blocks.get(&ptr) {
            Some(b) if b.kind != Kind::Mapped => {}
            _ => return Err(INVALID_VALUE),
        }
        let block = self.blocks.remove(&ptr).ok_or(INVALID_VALUE)?;
        // SAFETY: the table held the only record of this mapping, made by `sys::map(size)`, and
        // of its shared file, if any.
        unsafe { sys::unmap(ptr as *mut u8, block.size) };
        if block.shared_fd >= 0 {
            sys::close(block.shared_fd);
        }
        self.uncharge(counters, block.size, block.device);
        Ok(())
    }

    /// Addresses of every allocation of `device` (mappings not included).
    pub fn blocks_of(&self, device: i32) -> Vec<usize> {
        self.blocks
            .iter()
            .filter(|(_, b)| b.device == device && b.kind != Kind::Mapped)
            .map(|(&p, _)| p)
            .collect()
    }

    /// A uniform draw from [0, 1) (splitmix64).
    fn next_unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vram: u64) -> Config {
        Config {
            vram,
            ..Config::default()
        }
    }

    #[test]
    fn capacity_is_charged_exactly_and_returned() {
        let c = cfg(8 << 20);
        let mut n = Counters::default();
        let mut m = Memory::new(&c);
        let a = m.alloc(&c, &mut n, 6 << 20, 0, Kind::Device, 0).unwrap();
        assert_eq!(a as usize % sys::LARGE, 0);
        assert_eq!(
            m.alloc(&c, &mut n, 3 << 20, 0, Kind::Device, 0),
            Err(OUT_OF_MEMORY)
        );
        let b = m.alloc(&c, &mut n, 2 << 20, 0, Kind::Device, 0).unwrap();
        assert_eq!(m.used(0), 8 << 20);
        assert!(m.contains(b as usize + 100, 100));
        assert!(!m.contains(b as usize + (2 << 20) - 1, 2));
        m.release(&mut n, a as usize).unwrap();
        m.release(&mut n, b as usize).unwrap();
        assert_eq!(m.release(&mut n, b as usize), Err(INVALID_VALUE));
        assert_eq!(
            (m.used(0), n.allocs, n.frees, n.failed_allocs),
            (0, 2, 2, 1)
        );
        assert_eq!(n.peak_bytes, 8 << 20);
    }

    #[test]
    fn neighbouring_mappings_cover_a_range_once_accessible() {
        let c = cfg(1 << 30);
        let mut n = Counters::default();
        let mut m = Memory::new(&c);
        // Addresses only: the table is never asked to touch mapped memory here.
        let (a, b, far) = (0x4000_0000, 0x4020_0000, 0x5000_0000);
        m.add_mapping(a, 2 << 20, 0);
        m.add_mapping(b, 2 << 20, 0);
        m.add_mapping(far, 2 << 20, 0);
        let across = (a + (1 << 20), 2 << 20);
        assert!(!m.covers(across.0, across.1, false));
        m.set_access(a, Access::ReadWrite);
        assert!(!m.covers(across.0, across.1, false));
        m.set_access(b, Access::Read);
        assert!(m.covers(across.0, across.1, false));
        assert!(!m.covers(across.0, across.1, true));
        m.set_access(b, Access::ReadWrite);
        assert!(m.contains(across.0, across.1));
        assert!(!m.contains(a, (4 << 20) + 1));
        m.set_access(far, Access::ReadWrite);
        assert!(!m.contains(b, far - b + 1));
        // Mappings are not allocations: hipFree, hipFreeAsync and hipDeviceReset leave them.
        assert!(m.block_at(a).is_none());
        assert_eq!(m.mark_freeing(a), Err(INVALID_VALUE));
        assert_eq!(m.release(&mut n, a), Err(INVALID_VALUE));
        assert!(m.blocks_of(0).is_empty());
        assert_eq!(m.block_containing(b + 5).map(|(p, _)| p), Some(b));
        assert!(m.remove_mapping(a));
        assert!(!m.remove_mapping(a));
        assert!(!m.contains(across.0, across.1));
        assert_eq!(m.used(0), 0);
    }

    #[test]
    fn nth_calls_fail() {
        let c = Config {
            fail_nth: vec![2],
            ..cfg(1 << 30)
        };
        let mut n = Counters::default();
        let mut m = Memory::new(&c);
        let results: Vec<bool> = (0..3)
            .map(|_| m.alloc(&c, &mut n, 4096, 0, Kind::Device, 0).is_ok())
            .collect();
        assert_eq!(results, [true, false, true]);
    }

    #[test]
    fn the_draws_follow_the_seed() {
        let c = Config {
            fail_prob: 0.5,
            seed: 42,
            ..cfg(1 << 30)
        };
        let run = || {
            let mut n = Counters::default();
            let mut m = Memory::new(&c);
            (0..64)
                .map(|_| m.alloc(&c, &mut n, 4096, 0, Kind::Device, 0).is_ok())
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        let failed = first.iter().filter(|ok| !**ok).count();
        assert!((16..=48).contains(&failed), "{} of 64 failed", failed);
    }
}
