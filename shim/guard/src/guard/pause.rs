//! `Malloc`, and the switch that sends it past the pool: while paused, a NEW device allocation
//! goes to the runtime, so a program can time the same steps with its memory in the pool and
//! in the runtime's own allocations, in one process (`scripts/gpu/overhead.py --in-process`;
//! separate processes differ by more than the 1% it has to resolve).
//!
//! Sound to flip at any moment, since ownership decides everything else as before: a pooled
//! block freed while paused goes back to the pool, a runtime allocation freed after the pause
//! goes to the runtime (`Guard::free` asks the pools, then passes), and range queries, pointer
//! attributes and IPC look at the pools as always. Every other hook behaves as unpaused.
//!
//! The cap still holds: what the runtime hands out while paused is counted against it like
//! the runtime's other allocations around the pool (`Active::external_alloc`: refused past the
//! cap, our cache trimmed and the call retried on out-of-memory, uncounted at its free).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Guard;

/// One switch for the process (both faces): a program pauses what it allocates, whatever the
/// runtime.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Pauses (`on`) or resumes pooling of new allocations; returns the previous state (1 paused,
/// 0 not), or -1 when the guard is not on (disabled or degraded), and then changes nothing.
pub fn pause(on: bool) -> i32 {
    if crate::active() == 0 {
        return -1;
    }
    PAUSED.swap(on, Ordering::SeqCst) as i32
}

impl Guard {
    /// `Malloc`: through the pool of the current device, or while paused to the runtime,
    /// counted against the cap. A toggle racing with the call may go either way; both are sound.
    pub fn malloc(
        &'static self,
        ptr: *mut *mut c_void,
        size: usize,
        mut pass: impl FnMut() -> i32,
    ) -> i32 {
        if PAUSED.load(Ordering::Relaxed) {
            return self.external_malloc(ptr, size, pass);
        }
        match self.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.alloc(ptr, size).unwrap_or_else(pass),
            _ => pass(),
        }
    }
}

impl Guard {
    /// The live pooled block holding `ptr`, `(start, size)`, without starting the guard (a face
    /// not started holds no block, and starting one looks up its runtime's functions each time
    /// while that runtime is not loaded).
    pub fn pooled_block(&self, ptr: *const c_void) -> Option<(u64, u64)> {
        let a = self.state.get()?.as_ref()?;
        let found = a
            .existing_pools()
            .find_map(|(_, p)| p.block_containing(ptr as u64));
        found
    }
}
