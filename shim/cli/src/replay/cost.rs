//! What the driver calls of a replay would cost in time: a model of each call's duration by
//! size, summed over the calls a policy makes, so designs are compared on driver time as well
//! as on bytes and call counts.
//!
//! Figures: `cudaMalloc` + `cudaFree` cost about 45 + 37 us on the H100 of the `device` machine
//! (2 MiB to 20 MiB; /work/shared/DESIGN.md, "Testing without an AMD GPU"). The virtual-memory
//! calls are not measured yet: until they are, creating, mapping and opening a piece is taken to
//! cost what `cudaMalloc` of its size does (20 + 15 + 10 us) and unmapping and releasing it what
//! `cudaFree` does (17 + 20 us). Each figure is flat over sizes; the tables take points by size
//! so measured costs drop in.

use std::sync::atomic::{AtomicU64, Ordering};

use rocmguard_core::{CountingSource, DeviceSource, SourceError};

/// A driver call whose time the replay counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `cudaMalloc` / `hipMalloc`.
    Malloc,
    /// `cudaFree` / `hipFree` (it waits for the device first).
    Free,
    /// `cuMemCreate`: physical memory for one piece.
    Create,
    /// `cuMemMap`: one piece into a reserved range.
    Map,
    /// `cuMemSetAccess`: once per mapped range.
    SetAccess,
    /// `cuMemUnmap`: one piece.
    Unmap,
    /// `cuMemRelease`: one piece's physical memory.
    Release,
}

/// Microseconds per call of each kind, as (size in bytes, us) points: linear between points,
/// flat beyond the ends.
#[derive(Clone, Debug)]
pub struct CostModel {
    points: [&'static [(u64, f64)]; 7],
    /// Where the figures come from, for the table's note.
    pub source: &'static str,
}

/// The figures used until measured ones land (see the module's doc).
pub const PROVISIONAL: CostModel = CostModel {
    points: [
        &[(2 << 20, 45.0)],
        &[(2 << 20, 37.0)],
        &[(2 << 20, 20.0)],
        &[(2 << 20, 15.0)],
        &[(2 << 20, 10.0)],
        &[(2 << 20, 17.0)],
        &[(2 << 20, 20.0)],
    ],
    source: "provisional: cudaMalloc 45 us + cudaFree 37 us on the H100 (2-20 MiB); \
             virtual-memory calls assumed to cost the same per piece",
};

impl CostModel {
    /// Microseconds of one call of `size` bytes.
    pub fn us(&self, call: Call, size: u64) -> f64 {
        let points = self.points[call as usize];
        match points.iter().position(|&(s, _)| s >= size) {
            None => points.last().map_or(0.0, |p| p.1),
            Some(0) => points[0].1,
            Some(i) => {
                let ((s0, t0), (s1, t1)) = (points[i - 1], points[i]);
                t0 + (t1 - t0) * (size - s0) as f64 / (s1 - s0) as f64
            }
        }
    }
}

/// Modelled time of the driver calls made so far (an `f64` of microseconds kept in an atomic,
/// as the pool's device must be `Sync`; a replay runs on one thread).
#[derive(Debug)]
pub struct Clock {
    model: &'static CostModel,
    us: AtomicU64,
}

impl Clock {
    pub fn new(model: &'static CostModel) -> Clock {
        Clock {
            model,
            us: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Adds `count` calls of `size` bytes.
    pub fn add(&self, call: Call, size: u64, count: u64) {
        let now = self.us() + self.model.us(call, size) * count as f64;
        self.us.store(now.to_bits(), Ordering::Relaxed);
    }

    /// Mapping `size` bytes in pieces of `piece`: create and map each, open the range once.
    pub fn map(&self, size: u64, piece: u64) {
        let (whole, rest) = (size / piece, size % piece);
        for (n, s) in [(whole, piece), (u64::from(rest > 0), rest)] {
            self.add(Call::Create, s, n);
            self.add(Call::Map, s, n);
        }
        self.add(Call::SetAccess, size, 1);
    }

    /// Unmapping and releasing `count` pieces of `piece` bytes.
    pub fn unmap(&self, piece: u64, count: u64) {
        self.add(Call::Unmap, piece, count);
        self.add(Call::Release, piece, count);
    }

    pub fn us(&self) -> f64 {
        f64::from_bits(self.us.load(Ordering::Relaxed))
    }
}

/// The pool's device with the time of its calls counted: the counting device of replays,
/// whose calls are timed as the driver's would be.
pub struct TimedSource {
    pub inner: CountingSource,
    pub clock: Clock,
}

impl DeviceSource for TimedSource {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        let addr = self.inner.alloc(size)?;
        self.clock.add(Call::Malloc, size, 1);
        Ok(addr)
    }
    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        self.clock.add(Call::Free, size, 1);
        self.inner.free(addr, size)
    }
    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        self.inner.mem_info()
    }
    fn synchronize(&self) -> Result<(), SourceError> {
        self.inner.synchronize()
    }
    fn in_order(&self) -> bool {
        self.inner.in_order()
    }
    fn has_virtual_memory(&self) -> bool {
        self.inner.has_virtual_memory()
    }
    fn reserve(&self, size: u64) -> Result<u64, SourceError> {
        self.inner.reserve(size)
    }
    fn unreserve(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        self.inner.unreserve(addr, size)
    }
    fn map(&self, addr: u64, size: u64, chunk: u64) -> Result<Vec<u64>, SourceError> {
        let tokens = self.inner.map(addr, size, chunk)?;
        self.clock.map(size, chunk);
        Ok(tokens)
    }
    fn unmap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.clock.unmap(size, 1);
        self.inner.unmap(addr, size, token)
    }
}
