//! What the guard (shim/preload/src/guard/) asks of the process. On Windows the background reclaimer stays off: threads
//! are killed before DLL detach at exit, and one killed inside the runtime's synchronize could
//! hang its teardown. Freed blocks are reused after synchronizes on demand, as before.

pub fn reclaimer_started() {}

/// Never: the reclaimer thread ends at once.
pub fn reclaim_permit() -> Option<()> {
    None
}
