//! Everything the guard needs that differs by OS, behind one set of names (the way hipsim's
//! `sys.rs` separates the simulator from the OS):
//!
//! - `find_symbol`: a real runtime function by name (`dlvsym`/`dlsym` and the loaded objects on
//!   Linux, the loaded modules' exports on Windows);
//! - `write_stderr`, `thread_id`: the logger's and the trace recorder's sinks;
//! - `unified_memory_ceiling`: what an integrated GPU may use (sysfs GTT on Linux, WDDM's shared
//!   memory on Windows);
//! - `on_sigterm`: where the trace's tail is written on a polite kill;
//! - `process`: duties at first use, exit and fork, and the background reclaimer's permits;
//! - `group` and `ipc`: the cap shared by processes and IPC of pooled blocks, Linux only (on
//!   Windows they are what "none" means, and IPC goes to the runtime).

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;
