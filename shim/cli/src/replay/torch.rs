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
use super::policy::{Outcome, Timeline};
pub use conf::TorchConf;
use model::{Allocator, NIL};

/// Replays `trace` through PyTorch's allocator with `conf` on a device of `capacity` bytes.
/// With `stop_at_oom` it stops at the first request PyTorch would fail.
pub fn replay(
    trace: &Trace,
    conf: &TorchConf,
    capacity: u64,
    stop_at_oom: bool,
    mut timeline: Option<&mut Timeline>,
) -> Outcome {
    let mut a = Allocator::new(conf, capacity, Clock::new(&MEASURED));
    let mut held = vec![NIL; trace.allocs as usize];
    let mut o = Outcome::default();
    let mut live = 0u64;
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            Op::Alloc { id, size } => {
                o.events += 1;
                match a.malloc(size, trace.stream(id)) {
                    Some(b) => {
                        held[id as usize] = b;
                        live += size;
                        o.peak_live = o.peak_live.max(live);
                    }
                    None => {
                        o.ooms += 1;
                        if stop_at_oom {
                            break;
                        }
                    }
                }
            }
            Op::Free { id, size } => {
                o.events += 1;
                let b = std::mem::replace(&mut held[id as usize], NIL);
                if b != NIL {
                    a.free(b);
                    live -= size;
                }
            }
            Op::SegAlloc { .. } | Op::SegFree { .. } => continue,
        }
        if let Some(t) = timeline.as_deref_mut() {
            t.record(trace, i, live, a.reserved);
        }
    }
    Outcome {
        peak_reserved: a.peak_reserved,
        source_allocs: a.device_allocs,
        source_frees: a.device_frees,
        syncs: a.syncs,
        driver_us: a.clock.us(),
        elapsed: Duration::ZERO,
        ..o
    }
}
