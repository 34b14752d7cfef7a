//! The simulator's process-wide state behind one lock (devices' memory, streams, virtual
//! memory, counters), the per-thread parts of HIP's model (current device, capture mode), and
//! the time the driver calls cost.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::config::{self, Config};
use crate::cost::{self, Call};
use crate::counters::Counters;
use crate::error::{HipResult, INVALID_DEVICE, NO_DEVICE};
use crate::memory::Memory;
use crate::streams::{Streams, MODE_GLOBAL};
use crate::vmm::Vmm;

pub struct Sim {
    pub cfg: &'static Config,
    pub mem: Memory,
    pub streams: Streams,
    pub counters: Counters,
    pub vmm: Vmm,
}

impl Sim {
    /// Fails unless `device` exists.
    pub fn check_device(&self, device: i32) -> HipResult {
        match self.cfg.devices {
            0 => Err(NO_DEVICE),
            n if (0..n).contains(&device) => Ok(()),
            _ => Err(INVALID_DEVICE),
        }
    }
}

static SIM: Mutex<Option<Sim>> = Mutex::new(None);

/// Runs `f` on the state, creating it on first use. Never call into `work` from inside `f`:
/// the queue's worker takes this lock while it runs queued work.
pub fn with<R>(f: impl FnOnce(&mut Sim) -> R) -> R {
    let mut guard = SIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let sim = guard.get_or_insert_with(|| {
        let cfg = config::get();
        Sim {
            cfg,
            mem: Memory::new(cfg),
            streams: Streams::default(),
            counters: Counters::default(),
            vmm: Vmm::default(),
        }
    });
    f(sim)
}

thread_local! {
    static DEVICE: Cell<i32> = const { Cell::new(0) };
    static CAPTURE_MODE: Cell<i32> = const { Cell::new(MODE_GLOBAL) };
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's current device (`hipSetDevice`), 0 until set.
pub fn current_device() -> i32 {
    DEVICE.try_with(Cell::get).unwrap_or(0)
}

pub fn set_current_device(device: i32) {
    let _ = DEVICE.try_with(|d| d.set(device));
}

/// The calling thread's `hipStreamCaptureMode` (`hipThreadExchangeStreamCaptureMode`).
pub fn capture_mode() -> i32 {
    CAPTURE_MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL)
}

/// Sets the thread's capture mode and returns the previous one.
pub fn exchange_capture_mode(mode: i32) -> i32 {
    CAPTURE_MODE
        .try_with(|m| m.replace(mode))
        .unwrap_or(MODE_GLOBAL)
}

/// A number naming the calling thread (captures remember who began them), never 0.
pub fn thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    THREAD_ID
        .try_with(|id| {
            if id.get() == 0 {
                id.set(NEXT.fetch_add(1, Ordering::Relaxed));
            }
            id.get()
        })
        .unwrap_or(u64::MAX)
}

/// Burns `call`'s cost on `bytes` (`HIPSIM_COST_*`), plus `HIPSIM_LATENCY_US` for the calls it
/// has always applied to (allocating calls, frees, `hipMemCreate`, `hipMemRelease`), as a slow
/// driver would. Call it with the state's lock released.
pub fn pay(call: Call, bytes: usize) {
    let cfg = config::get();
    let flat = match call {
        Call::Malloc | Call::Free | Call::Create | Call::Release => cfg.latency,
        Call::Map | Call::SetAccess | Call::Unmap => std::time::Duration::ZERO,
    };
    cost::spend(flat + cfg.costs.get(call).of(bytes));
}
