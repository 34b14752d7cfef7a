//! Reuse of freed blocks: while all the program's work is in one stream's order a freed block
//! is free at once; after that, blocks wait for a device synchronize, which the reclaimer
//! thread makes in the background. Stream captures, during which nothing may synchronize.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use once_cell::sync::OnceCell;
use rocmguard_core::config::{PYTORCH_CACHE_OFF, STREAMS_STEP_COST};

use super::{Active, SUCCESS};
use crate::log;

/// The background reclaim thread, asleep while no freed block waits: a thread polling every
/// 200 us cost an idle program 60 ms of CPU a second (3,700 wake-ups).
#[derive(Default)]
pub struct Reclaimer {
    thread: OnceCell<Option<std::thread::Thread>>,
    /// Set by the thread before it parks; the free that puts a block in a quarantine wakes it.
    idle: AtomicBool,
}

impl Reclaimer {
    /// After a pooled free: wakes the thread if it sleeps and `waits()` (a block now waits in
    /// the pool's quarantine). One relaxed load while it runs or was never started.
    #[inline]
    pub fn wake_if(&self, waits: impl FnOnce() -> bool) {
        if self.idle.load(Ordering::Relaxed) && waits() && self.idle.swap(false, Ordering::AcqRel) {
            if let Some(Some(thread)) = self.thread.get() {
                thread.unpark();
            }
        }
    }
}

impl Active {
    /// The program showed work outside one stream's order (`why`): from now on freed blocks
    /// wait for a synchronize, and blocks freed in order so far become free for any stream
    /// after one synchronize per device, before the caller hands the new stream out.
    pub fn leave_in_order(&'static self, why: std::fmt::Arguments) {
        if !self.in_order.swap(false, Ordering::AcqRel) {
            return;
        }
        for (_, pool) in self.existing_pools() {
            pool.reclaim();
        }
        self.start_reclaimer();
        // With PyTorch's cache off every free reaches the pool, and the cost is the user's to
        // avoid: said at the default level, with the remedy.
        let (emit, cost): (fn(std::fmt::Arguments), String) = if pytorch_cache_off() {
            (
                log::warn,
                format!(
                    ", which can slow each step (against PyTorch's cache: {}): for such programs \
                     leave PyTorch's cache on (unset PYTORCH_NO_HIP_MEMORY_CACHING / \
                     PYTORCH_NO_CUDA_MEMORY_CACHING)",
                    STREAMS_STEP_COST
                ),
            )
        } else {
            (log::info, String::new())
        };
        emit(format_args!(
            "{}: the program {}; freed blocks now wait for a device synchronize before reuse{}",
            self.face.name, why, cost
        ));
    }

    /// Starts the thread that releases freed blocks in the background, once, where configured
    /// and needed (blocks wait in quarantine only once work is out of one order).
    pub(super) fn start_reclaimer(&'static self) {
        if !self.config.reclaim || self.existing_pools().next().is_none() {
            return;
        }
        self.reclaimer.thread.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("rocmguard-reclaim".into())
                .spawn(move || self.reclaim_loop());
            if spawned.is_err() {
                log::warn(format_args!(
                    "no background reclaim thread; freed blocks are reused after synchronizes on demand"
                ));
            }
            spawned.ok().map(|h| h.thread().clone())
        });
    }

    /// While freed blocks wait in a pool's quarantine, synchronizes the device (from this
    /// thread, so the program's threads do not stall) and releases them; while none waits,
    /// sleeps until a free wakes it (or 5 s pass, should a wake-up race past it: the
    /// allocation path synchronizes on demand meanwhile). Stops at exit.
    pub(super) fn reclaim_loop(&'static self) {
        crate::platform::process::reclaimer_started();
        let waiting = || self.existing_pools().any(|(_, p)| p.has_quarantine());
        loop {
            if !waiting() {
                let idle = &self.reclaimer.idle;
                idle.store(true, Ordering::SeqCst);
                if !waiting() {
                    std::thread::park_timeout(Duration::from_secs(5));
                }
                idle.store(false, Ordering::SeqCst);
                continue;
            }
            let mut synced = false;
            for (_, pool) in self.existing_pools() {
                if !pool.has_quarantine() || self.capture_active() {
                    continue;
                }
                let _permit = match crate::platform::process::reclaim_permit() {
                    Some(p) => p,
                    None => return,
                };
                let _gate = self.sync_gate.read().unwrap_or_else(|e| e.into_inner());
                synced |= pool.reclaim();
            }
            if !synced {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Runs the program's own device synchronize, and lets the pool reuse what was freed
    /// before it.
    pub fn synchronize(&self, call: impl FnOnce() -> i32) -> i32 {
        let device = self.current_device().unwrap_or(0);
        let pool = self.pools.get(device as usize).and_then(|c| c.get());
        let mark = pool.map(|p| p.quarantine_mark());
        let code = call();
        if let (SUCCESS, Some(p), Some(m)) = (code, pool, mark) {
            p.synchronized(m);
        }
        code
    }

    /// The device was reset: its memory is gone, so is our pool's bookkeeping of it.
    pub fn device_reset(&self) {
        let device = self.current_device().unwrap_or(0);
        if let Some(p) = self.pools.get(device as usize).and_then(|c| c.get()) {
            p.forget_all();
        }
        self.external
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (d, _)| *d != device);
    }

    pub fn capture_began(&self, stream: usize) {
        self.capturing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream);
        self.captures.fetch_add(1, Ordering::AcqRel);
    }

    pub fn capture_ended(&self, stream: usize) {
        let mut c = self.capturing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = c.iter().position(|&s| s == stream) {
            c.swap_remove(i);
            self.captures.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub fn capture_active(&self) -> bool {
        self.captures.load(Ordering::Acquire) > 0
    }
}

/// Whether PyTorch's cache is off, so that its every free reaches the pool.
fn pytorch_cache_off() -> bool {
    PYTORCH_CACHE_OFF
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// The default stream: null, or CUDA's `cudaStreamLegacy` handle (1), which it stands for.
pub(super) fn is_default_stream(stream: *mut c_void) -> bool {
    stream as usize <= 1
}
