//! A simulated device that only counts: fresh 2 MiB-aligned addresses, a capacity, no memory
//! behind them, and virtual memory (reservations that cost nothing, mappings that count). What
//! replays, benchmarks and tests put under the pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::source::{DeviceSource, SourceError};

/// `hipErrorOutOfMemory`, which the counting device reports like the real runtime.
pub const OUT_OF_MEMORY: i32 = 2;

pub struct CountingSource {
    capacity: u64,
    next: AtomicU64,
    used: AtomicU64,
    pub allocs: AtomicU64,
    pub frees: AtomicU64,
    pub syncs: AtomicU64,
    /// Address space reserved and not given back.
    pub reserved: AtomicU64,
    /// Ranges with memory behind them (allocations and mappings): start -> size.
    backed: Mutex<BTreeMap<u64, u64>>,
    /// Whether it reports all work in one order ([`DeviceSource::in_order`]).
    in_order: AtomicBool,
    /// Ranges that work queued before the last synchronize may still touch (see
    /// [`CountingSource::queued_use`]).
    queued: Mutex<Vec<(u64, u64)>>,
    /// Mappings given back while work queued on the device might still touch them.
    pub unsafe_unmaps: AtomicU64,
    /// Whether a synchronize fails (and so leaves queued work queued).
    pub failing_syncs: AtomicBool,
    /// Pieces unmapped and kept ([`DeviceSource::detach`]): token -> size.
    kept: Mutex<BTreeMap<u64, u64>>,
    /// Whether it moves memory ([`DeviceSource::moves_memory`]); on unless turned off.
    pub moves_memory: AtomicBool,
    /// Pieces mapped again ([`DeviceSource::remap`]).
    pub remaps: AtomicU64,
    /// The last token handed out: tokens are numbers, never addresses, as a kept piece may be
    /// mapped again elsewhere.
    tokens: AtomicU64,
}

impl CountingSource {
    pub fn new(capacity: u64) -> CountingSource {
        CountingSource {
            capacity,
            next: AtomicU64::new(0x7f00_0000_0000),
            used: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            backed: Mutex::new(BTreeMap::new()),
            in_order: AtomicBool::new(false),
            queued: Mutex::new(Vec::new()),
            unsafe_unmaps: AtomicU64::new(0),
            failing_syncs: AtomicBool::new(false),
            kept: Mutex::new(BTreeMap::new()),
            moves_memory: AtomicBool::new(true),
            remaps: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
        }
    }

    /// Makes the device report all work in one order, or not.
    pub fn set_in_order(&self, in_order: bool) {
        self.in_order.store(in_order, Ordering::Relaxed);
    }

    /// Records that work queued before now may still use `[addr, addr + size)` (a test frees a
    /// block the device was working on): until the next synchronize, giving its memory back is
    /// counted in `unsafe_unmaps`, and [`CountingSource::is_queued`] says so.
    pub fn queued_use(&self, addr: u64, size: u64) {
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((addr, size.max(1)));
    }

    /// Whether work queued before the last synchronize may still use part of the range.
    pub fn is_queued(&self, addr: u64, size: u64) -> bool {
        let end = addr + size.max(1);
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|&(a, n)| a < end && addr < a + n)
    }

    /// Whether `[addr, addr + size)` lies in memory this device handed out (an allocation or a
    /// mapping, adjacent ones together): what a block given to a program must be.
    pub fn is_backed(&self, addr: u64, size: u64) -> bool {
        let backed = self.backed.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = addr;
        let end = addr + size.max(1);
        while at < end {
            match backed.range(..=at).next_back() {
                Some((&start, &n)) if at < start + n => at = start + n,
                _ => return false,
            }
        }
        true
    }

    fn note(&self, addr: u64, size: Option<u64>) {
        let mut backed = self.backed.lock().unwrap_or_else(|e| e.into_inner());
        match size {
            Some(n) => backed.insert(addr, n),
            None => backed.remove(&addr),
        };
    }

    /// Bytes of pieces kept by [`DeviceSource::detach`] and not yet mapped again or released.
    pub fn kept(&self) -> u64 {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Bytes currently handed out to the pool.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

impl CountingSource {
    /// Charges `size` bytes of memory, within the capacity.
    fn charge(&self, size: u64) -> Result<(), SourceError> {
        let used = self.used.fetch_add(size, Ordering::Relaxed);
        if used + size > self.capacity {
            self.used.fetch_sub(size, Ordering::Relaxed);
            return Err(SourceError {
                code: OUT_OF_MEMORY,
                out_of_memory: true,
            });
        }
        self.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn uncharge(&self, size: u64) {
        self.used.fetch_sub(size, Ordering::Relaxed);
        self.frees.fetch_add(1, Ordering::Relaxed);
    }

    fn forget_queued(&self) {
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Unmaps the piece `token` at `addr`, keeping its memory if `keep`: an unmap of memory
    /// queued work may still use is counted in `unsafe_unmaps`.
    fn detach_kept(&self, addr: u64, size: u64, token: u64, keep: bool) {
        if self.is_queued(addr, size) {
            self.unsafe_unmaps.fetch_add(1, Ordering::Relaxed);
        }
        self.note(addr, None);
        if keep {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            assert!(
                kept.insert(token, size).is_none(),
                "{:#x} kept twice",
                token
            );
        }
    }

    fn addresses(&self, size: u64) -> u64 {
        let aligned = (size + (2 << 20) - 1) & !((2 << 20) - 1);
        self.next.fetch_add(aligned, Ordering::Relaxed)
    }
}

impl DeviceSource for CountingSource {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        self.charge(size)?;
        let addr = self.addresses(size);
        self.note(addr, Some(size));
        Ok(addr)
    }

    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        // Like `hipFree`, waits for the device first.
        self.forget_queued();
        self.uncharge(size);
        self.note(addr, None);
        Ok(())
    }

    fn has_virtual_memory(&self) -> bool {
        true
    }

    fn reserve(&self, size: u64) -> Result<u64, SourceError> {
        self.reserved.fetch_add(size, Ordering::Relaxed);
        Ok(self.addresses(size))
    }

    fn unreserve(&self, _addr: u64, size: u64) -> Result<(), SourceError> {
        self.reserved.fetch_sub(size, Ordering::Relaxed);
        Ok(())
    }

    fn map(&self, addr: u64, size: u64, chunk: u64) -> Result<Vec<u64>, SourceError> {
        self.charge(size)?;
        // Counted as one call per piece, as a real device creates each piece's memory.
        let pieces = (size + chunk - 1) / chunk;
        self.allocs.fetch_add(pieces - 1, Ordering::Relaxed);
        let mut tokens = Vec::new();
        let mut at = addr;
        while at < addr + size {
            let n = chunk.min(addr + size - at);
            self.note(at, Some(n));
            tokens.push(self.tokens.fetch_add(1, Ordering::Relaxed) + 1);
            at += n;
        }
        Ok(tokens)
    }

    fn unmap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.detach_kept(addr, size, token, false);
        self.uncharge(size);
        Ok(())
    }

    fn moves_memory(&self) -> bool {
        self.moves_memory.load(Ordering::Relaxed)
    }

    fn detach(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.detach_kept(addr, size, token, true);
        Ok(())
    }

    fn remap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        match kept.get(&token) {
            Some(&n) if n == size => kept.remove(&token),
            _ => panic!("remap of {:#x}: not a kept piece of {} bytes", token, size),
        };
        self.note(addr, Some(size));
        self.remaps.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn release(&self, size: u64, token: u64) -> Result<(), SourceError> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&token);
        assert_eq!(
            kept,
            Some(size),
            "release of {:#x}: not a kept piece",
            token
        );
        self.uncharge(size);
        Ok(())
    }

    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        Ok((self.capacity.saturating_sub(self.used()), self.capacity))
    }

    fn synchronize(&self) -> Result<(), SourceError> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if self.failing_syncs.load(Ordering::Relaxed) {
            return Err(SourceError {
                code: 999,
                out_of_memory: false,
            });
        }
        self.forget_queued();
        Ok(())
    }

    fn in_order(&self) -> bool {
        self.in_order.load(Ordering::Relaxed)
    }
}
