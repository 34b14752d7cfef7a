//! What the driver calls of a replay would cost in time: a model of each call's duration by
//! size, summed over the calls a policy makes, so designs are compared on driver time as well
//! as on bytes and call counts.
//!
//! Figures: data/driver_cost.csv, the medians of 200 calls each on one H100 80GB HBM3 (driver
//! 13.0, 2026-11-25, `scripts/gpu/driver_cost.cu`), one handle per call, from 2 MiB to 2 GiB;
//! linear between sizes, flat beyond the ends (below 2 MiB, the 2 MiB figure). A test keeps
//! [`MEASURED`] equal to the file. A mapping opens its pieces one `cuMemSetAccess` each (the
//! file times one handle per call), so a range of many pieces costs as many calls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
}

/// data/driver_cost.csv's figures (see the module's doc).
pub const MEASURED: CostModel = CostModel {
    points: [
        // cudaMalloc
        &[
            (2 << 20, 42.01),
            (8 << 20, 32.33),
            (32 << 20, 35.91),
            (128 << 20, 39.64),
            (512 << 20, 67.68),
            (2048 << 20, 186.03),
        ],
        // cudaFree
        &[
            (2 << 20, 35.54),
            (8 << 20, 31.17),
            (32 << 20, 42.38),
            (128 << 20, 67.59),
            (512 << 20, 202.05),
            (2048 << 20, 878.37),
        ],
        // cuMemCreate
        &[
            (2 << 20, 8.49),
            (8 << 20, 7.36),
            (32 << 20, 13.96),
            (128 << 20, 12.09),
            (512 << 20, 15.65),
            (2048 << 20, 36.25),
        ],
        // cuMemMap
        &[
            (2 << 20, 0.64),
            (8 << 20, 0.55),
            (32 << 20, 0.65),
            (128 << 20, 0.68),
            (512 << 20, 0.66),
            (2048 << 20, 1.41),
        ],
        // cuMemSetAccess
        &[
            (2 << 20, 20.88),
            (8 << 20, 19.04),
            (32 << 20, 35.03),
            (128 << 20, 36.11),
            (512 << 20, 48.10),
            (2048 << 20, 91.90),
        ],
        // cuMemUnmap
        &[
            (2 << 20, 15.00),
            (8 << 20, 13.85),
            (32 << 20, 22.00),
            (128 << 20, 22.49),
            (512 << 20, 26.53),
            (2048 << 20, 41.41),
        ],
        // cuMemRelease
        &[
            (2 << 20, 10.35),
            (8 << 20, 12.08),
            (32 << 20, 19.13),
            (128 << 20, 51.58),
            (512 << 20, 149.89),
            (2048 << 20, 563.85),
        ],
    ],
};

/// The names data/driver_cost.csv gives the calls, in [`Call`]'s order.
pub const OPS: [&str; 7] = [
    "cudaMalloc",
    "cudaFree",
    "cuMemCreate",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuMemRelease",
];

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
    /// Frees that waited for the device: `cudaFree`/`hipFree` of plain memory wait for all the
    /// work queued before them, which is a synchronize for the program; only the first after
    /// the program ran waits for its work (the rest find the device idle).
    waits: AtomicU64,
    /// Whether the program ran since the last synchronize or waiting free.
    ran: AtomicBool,
}

impl Clock {
    pub fn new(model: &'static CostModel) -> Clock {
        Clock {
            model,
            us: AtomicU64::new(0f64.to_bits()),
            waits: AtomicU64::new(0),
            ran: AtomicBool::new(false),
        }
    }

    /// The program ran (queued work) between driver calls.
    pub fn program_ran(&self) {
        self.ran.store(true, Ordering::Relaxed);
    }

    /// A `cudaFree`/`hipFree` of `size` bytes: it waits for the program's work, if any ran.
    pub fn free(&self, size: u64) {
        self.add(Call::Free, size, 1);
        if self.ran.swap(false, Ordering::Relaxed) {
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The device was synchronized: a free after it finds nothing to wait for.
    pub fn synchronized(&self) {
        self.ran.store(false, Ordering::Relaxed);
    }

    /// The frees that waited for the program's work (see [`Clock::waits`]'s field).
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Adds `count` calls of `size` bytes.
    pub fn add(&self, call: Call, size: u64, count: u64) {
        let now = self.us() + self.model.us(call, size) * count as f64;
        self.us.store(now.to_bits(), Ordering::Relaxed);
    }

    /// Mapping `size` bytes in pieces of `piece`: create, map and open each.
    pub fn map(&self, size: u64, piece: u64) {
        let (whole, rest) = (size / piece, size % piece);
        for (n, s) in [(whole, piece), (u64::from(rest > 0), rest)] {
            self.add(Call::Create, s, n);
            self.add(Call::Map, s, n);
            self.add(Call::SetAccess, s, n);
        }
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
        self.clock.free(size);
        self.inner.free(addr, size)
    }
    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        self.inner.mem_info()
    }
    fn synchronize(&self) -> Result<(), SourceError> {
        self.clock.synchronized();
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
    fn moves_memory(&self) -> bool {
        self.inner.moves_memory()
    }
    fn detach(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.clock.add(Call::Unmap, size, 1);
        self.inner.detach(addr, size, token)
    }
    fn remap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.clock.add(Call::Map, size, 1);
        self.clock.add(Call::SetAccess, size, 1);
        self.inner.remap(addr, size, token)
    }
    fn release(&self, size: u64, token: u64) -> Result<(), SourceError> {
        self.clock.add(Call::Release, size, 1);
        self.inner.release(size, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`MEASURED`] is data/driver_cost.csv's one-handle rows, figure for figure.
    #[test]
    fn the_table_is_the_measured_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/driver_cost.csv");
        let text = std::fs::read_to_string(path).unwrap();
        let mut rows = 0;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let Some(call) = OPS.iter().position(|op| *op == f[3]) else {
                continue;
            };
            let (size, us): (u64, f64) = (f[4].parse().unwrap(), f[6].parse().unwrap());
            assert!(
                MEASURED.points[call].contains(&(size, us)),
                "{} of {} B: {} us in the file",
                f[3],
                size,
                us
            );
            rows += 1;
        }
        let points: usize = MEASURED.points.iter().map(|p| p.len()).sum();
        assert_eq!(rows, points, "every point of the table is in the file");
    }

    #[test]
    fn costs_interpolate_by_size() {
        assert_eq!(MEASURED.us(Call::Malloc, 4096), 42.01);
        assert_eq!(MEASURED.us(Call::Free, 4 << 30), 878.37);
        let mid = MEASURED.us(Call::Free, 5 << 20);
        assert!((mid - (35.54 + 31.17) / 2.0).abs() < 1e-9, "{}", mid);
    }

    /// A free waits for the work the program queued since the last wait or synchronize: the
    /// first of a run of frees waits, the rest find the device idle.
    #[test]
    fn a_free_after_the_program_ran_waits_once() {
        let clock = Clock::new(&MEASURED);
        clock.free(2 << 20);
        assert_eq!(clock.waits(), 0, "nothing ran before it");
        clock.program_ran();
        clock.free(2 << 20);
        clock.free(8 << 20);
        assert_eq!(clock.waits(), 1, "two frees in a row wait once");
        clock.program_ran();
        clock.synchronized();
        clock.free(2 << 20);
        assert_eq!(clock.waits(), 1, "a synchronize waited already");
        clock.program_ran();
        clock.free(2 << 20);
        assert_eq!(clock.waits(), 2);
        let us = 4.0 * MEASURED.us(Call::Free, 2 << 20) + MEASURED.us(Call::Free, 8 << 20);
        assert!(
            (clock.us() - us).abs() < 1e-9,
            "each free's time is counted"
        );
    }
}
