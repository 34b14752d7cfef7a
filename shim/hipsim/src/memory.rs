//! Simulated device memory: a table of live allocations (host mappings standing in for VRAM),
//! per-device capacity, and the fault injection that decides which allocation calls fail.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::error::{HipError, HipResult, INVALID_VALUE, OUT_OF_MEMORY};
use crate::state::Counters;
use crate::sys;

/// How a block was allocated, which `hipPointerGetAttributes` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `hipMalloc`, `hipExtMallocWithFlags`, and the stream-ordered calls.
    Device,
    /// `hipMallocManaged`.
    Managed,
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

    pub fn used(&self, device: i32) -> u64 {
        self.used.get(device as usize).copied().unwrap_or(0)
    }

    /// Allocates `size > 0` bytes on `device`, unless a fault knob or the capacity says no.
    pub fn alloc(
        &mut self,
        cfg: &Config,
        counters: &mut Counters,
        size: usize,
        device: i32,
        kind: Kind,
        flags: u32,
    ) -> Result<*mut u8, HipError> {
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
        let ptr = match (fits && !injected).then(|| sys::map(size)).flatten() {
            Some(ptr) => ptr,
            None => {
                counters.failed_allocs += 1;
                return Err(OUT_OF_MEMORY);
            }
        };
        self.blocks.insert(
            ptr as usize,
            Block {
                size,
                device,
                kind,
                flags,
                freeing: false,
            },
        );
        self.used[device as usize] += size as u64;
        counters.allocs += 1;
        counters.live_allocs += 1;
        counters.live_bytes += size as u64;
        counters.peak_bytes = counters.peak_bytes.max(counters.live_bytes);
        Ok(ptr)
    }

    /// The block that starts at `ptr`, if it is live and not already being freed.
    pub fn block_at(&self, ptr: usize) -> Option<Block> {
        self.blocks.get(&ptr).copied().filter(|b| !b.freeing)
    }

    /// The block containing `ptr` and its start, interior pointers included.
    pub fn block_containing(&self, ptr: usize) -> Option<(usize, Block)> {
        let (&start, block) = self.blocks.range(..=ptr).next_back()?;
        (ptr < start + block.size.max(1)).then_some((start, *block))
    }

    /// Whether `[ptr, ptr + len)` lies inside one live block.
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        self.block_containing(ptr)
            .map_or(false, |(start, b)| ptr + len <= start + b.size)
    }

    /// Marks the block at `ptr` as having a stream-ordered free queued; its device.
    pub fn mark_freeing(&mut self, ptr: usize) -> Result<i32, HipError> {
        match self.blocks.get_mut(&ptr) {
            Some(b) if !b.freeing => {
                b.freeing = true;
                Ok(b.device)
            }
            _ => Err(INVALID_VALUE),
        }
    }

    /// Unmaps the block at `ptr` and returns its bytes to its device.
    pub fn release(&mut self, counters: &mut Counters, ptr: usize) -> HipResult {
        let block = self.blocks.remove(&ptr).ok_or(INVALID_VALUE)?;
        // SAFETY: the table held the only record of this mapping, made by `sys::map(size)`.
        unsafe { sys::unmap(ptr as *mut u8, block.size) };
        self.used[block.device as usize] -= block.size as u64;
        counters.frees += 1;
        counters.live_allocs -= 1;
        counters.live_bytes -= block.size as u64;
        Ok(())
    }

    /// Addresses of every block of `device`.
    pub fn blocks_of(&self, device: i32) -> Vec<usize> {
        self.blocks
            .iter()
            .filter(|(_, b)| b.device == device)
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
