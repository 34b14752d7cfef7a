//! The simulator's process-wide state behind one lock, the counters tests read, and the
//! per-thread parts of HIP's model (current device, capture mode).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::config::{self, Config};
use crate::error::{HipResult, INVALID_DEVICE, NO_DEVICE};
use crate::memory::Memory;
use crate::streams::{Streams, MODE_GLOBAL};
use crate::vmm::Vmm;

/// What happened so far, for tests (`hipsimCounters`; the C layout is in `tests/c/hipsim.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful allocations (every allocating call that returned a pointer, and every
    /// `hipMemCreate` that returned a handle).
    pub allocs: u64,
    /// Blocks released (`hipFree`, `hipFreeAsync` when it takes effect, `hipDeviceReset`), and
    /// `hipMemCreate` memory freed (by `hipMemRelease`, or the last unmap after it).
    pub frees: u64,
    /// Device synchronizations: `hipDeviceSynchronize` and the implicit one of each `hipFree`.
    pub syncs: u64,
    /// Bytes charged to the devices, `hipMemCreate` handles included, and their high mark.
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub mempool_trims: u64,
    /// Captures invalidated by a call that is not allowed during capture.
    pub capture_invalidations: u64,
    /// Allocation calls that returned `hipErrorOutOfMemory` (capacity or an injected fault).
    pub failed_allocs: u64,
    pub live_allocs: u64,
    /// `hipStreamSynchronize` calls that waited.
    pub stream_syncs: u64,
    /// `hipsimLaunchFill` work that ran, and work dropped because its memory was gone.
    pub fills: u64,
    pub dropped_fills: u64,
}

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
