//! The `pytorch[:CONF]` policy: a trace replayed through a model of PyTorch's CUDA/HIP caching
//! allocator, written from PyTorch 2.11's c10/cuda/CUDACachingAllocator.cpp (the
//! `DeviceCachingAllocator` class; the functions each part follows are named in `model.rs`,
//! `expandable.rs` and `release.rs`) and its settings from c10/core/AllocatorConfig.{h,cpp} and
//! c10/cuda/CUDAAllocatorConfig.cpp (`conf.rs`). What a trace cannot say is left out: no
//! block is used on a second stream (`recordStream`), no CUDA graph or private pool, no
//! `empty_cache()` call, and the device holds nothing but this program's memory.

pub mod conf;
mod expandable;
pub mod model;
mod release;

use std::time::Duration;

use super::cost::{Clock, MEASURED};
use super::load::{Op, Trace};
use super::policy::{drive, Outcome, Run, Step, Timeline};
pub use conf::TorchConf;
use model::{Allocator, NIL};

/// Replays `trace` through PyTorch's allocator with `conf` on a device of `capacity` bytes.
/// With `stop_at_oom` it stops at the first request PyTorch would fail.
pub fn replay(
    trace: &Trace,
    conf: &TorchConf,
    capacity: u64,
    stop_at_oom: bool,
    timeline: Option<&mut Timeline>,
) -> Outcome {
    let mut run = TorchRun::new(trace, conf, capacity);
    drive(&mut run, trace, stop_at_oom, timeline);
    let a = &run.allocator;
    Outcome {
        peak_reserved: a.peak_reserved,
        source_allocs: a.device_allocs,
        source_frees: a.device_frees,
        syncs: a.syncs + a.clock.waits(),
        driver_us: a.clock.us(),
        elapsed: Duration::ZERO,
        ..run.outcome
    }
}

/// One replay of a trace through the model of PyTorch's allocator, an event at a time.
pub(super) struct TorchRun {
    pub(super) allocator: Allocator,
    /// The block of each allocation, [`NIL`] while it is not live.
    pub(super) held: Vec<u32>,
    pub(super) live: u64,
    outcome: Outcome,
}

impl TorchRun {
    pub(super) fn new(trace: &Trace, conf: &TorchConf, capacity: u64) -> TorchRun {
        TorchRun {
            allocator: Allocator::new(conf, capacity, Clock::new(&MEASURED)),
            held: vec![NIL; trace.allocs as usize],
            live: 0,
            outcome: Outcome::default(),
        }
    }
}

impl Run for TorchRun {
    fn step(&mut self, trace: &Trace, op: &Op) -> Step {
        let o = &mut self.outcome;
        match *op {
            Op::Alloc { id, size } => {
                o.events += 1;
                self.allocator.clock.program_ran();
                match self.allocator.malloc(size, trace.stream(id)) {
                    Some(b) => {
                        self.held[id as usize] = b;
                        self.live += size;
                        o.peak_live = o.peak_live.max(self.live);
                        Step::Done
                    }
                    None => {
                        o.ooms += 1;
                        Step::Failed
                    }
                }
            }
            Op::Free { id, size } => {
                o.events += 1;
                self.allocator.clock.program_ran();
                let b = std::mem::replace(&mut self.held[id as usize], NIL);
                if b != NIL {
                    self.allocator.free(b);
                    self.live -= size;
                }
                Step::Done
            }
            Op::SegAlloc { .. } | Op::SegFree { .. } => Step::Skipped,
        }
    }

    fn live(&self) -> u64 {
        self.live
    }

    fn reserved(&self) -> u64 {
        self.allocator.reserved
    }
}
