//! The runtime's last-error semantics, kept while the pool works underneath: since ROCm 7 the
//! last error is sticky, so an out-of-memory we recovered from must not be left behind for
//! `GetLastError`, and an error pending before the call must still be there after it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Api, SUCCESS};

/// Device calls of ours that failed, in every thread: a hook that sees the count unchanged
/// since it began knows none of its own failed, without touching its thread's slots (a
/// thread-local costs a call into the dynamic linker from a preloaded library).
static FAILURES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last error pending before the pool's own device call failed, to restore after a
    /// recovery: `Some(code)` once a device call of ours failed during the current hook
    /// (emptied when the hook ends, see [`forget_pending`]).
    static PENDING_BEFORE: Cell<Option<i32>> = const { Cell::new(None) };
    /// An error the program should still see from `GetLastError` although the runtime's own
    /// slot no longer holds it (we consumed the runtime's after recovering, or refused by cap).
    pub(super) static SHADOW_ERROR: Cell<i32> = const { Cell::new(SUCCESS) };
}

/// Remembers the error that was pending before the first failed device call of ours in this
/// hook, so that a recovery can restore it.
pub(super) fn keep_pending(before: i32) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    PENDING_BEFORE.with(|c| {
        if c.get().is_none() {
            c.set(Some(before));
        }
    });
}

/// The count of our failed device calls so far: what a hook reads as it begins.
#[inline]
pub fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// At the end of a hook that began when [`failures`] was `since`: a failure it recovered from
/// is forgotten, so the next hook starts with an empty slot.
#[inline]
pub fn forget_pending(since: u64) {
    if failures() != since {
        let _ = PENDING_BEFORE.try_with(|c| c.take());
    }
}

/// After a pooled allocation that began when [`failures`] was `since` succeeded: if one of our
/// device calls failed on the way (and we recovered), clear that error from the runtime and
/// keep what was pending before it.
pub(super) fn settle_errors(api: &Api, since: u64) {
    if failures() == since {
        return;
    }
    if let Some(before) = PENDING_BEFORE.with(|c| c.take()) {
        // SAFETY: no arguments.
        unsafe { (api.get_last_error)() };
        if before != SUCCESS {
            SHADOW_ERROR.with(|c| c.set(before));
        }
    }
}

/// `GetLastError` as the program should see it: the runtime's, else one we hold for it.
pub fn last_error(real: i32, reset: bool) -> i32 {
    SHADOW_ERROR.with(|c| {
        let shadow = c.get();
        if reset {
            c.set(SUCCESS);
        }
        if real != SUCCESS {
            real
        } else {
            shadow
        }
    })
}
