//! What the guard asks of the process on Windows. The background reclaimer stays off: threads
//! are killed before DLL detach at exit, and one killed inside the runtime's synchronize could
//! hang its teardown. Freed blocks are reused after synchronizes on demand. The exit table is
//! the DLL's (`DllMain` detach).

use rocmguard_core::Config;

/// At first use: the trace recorder.
pub fn install(config: &Config) {
    if let Some(path) = &config.trace {
        crate::trace::start(path);
    }
}

pub fn reclaimer_started() {}

/// Windows has no per-process limit on handles of this kind to raise.
pub fn raise_open_files() {}

/// What Linux's permit holds while the reclaimer synchronizes; never handed out here.
pub struct Permit;

/// Never: the reclaimer thread ends at once.
pub fn reclaim_permit() -> Option<Permit> {
    None
}
