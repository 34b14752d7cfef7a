//! A simulated device that only counts: fresh 2 MiB-aligned addresses, a capacity, no memory
//! behind them. What replays, benchmarks and tests put under the pool.

use std::sync::atomic::{AtomicU64, Ordering};

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
        }
    }

    /// Bytes currently handed out to the pool.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

impl DeviceSource for CountingSource {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        let used = self.used.fetch_add(size, Ordering::Relaxed);
        if used + size > self.capacity {
            self.used.fetch_sub(size, Ordering::Relaxed);
            return Err(SourceError {
                code: OUT_OF_MEMORY,
                out_of_memory: true,
            });
        }
        self.allocs.fetch_add(1, Ordering::Relaxed);
        let aligned = (size + (2 << 20) - 1) & !((2 << 20) - 1);
        Ok(self.next.fetch_add(aligned, Ordering::Relaxed))
    }

    fn free(&self, _addr: u64, size: u64) -> Result<(), SourceError> {
        self.used.fetch_sub(size, Ordering::Relaxed);
        self.frees.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        Ok((self.capacity.saturating_sub(self.used()), self.capacity))
    }

    fn synchronize(&self) -> Result<(), SourceError> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
