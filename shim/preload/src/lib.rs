//! librocmguard.so: preloaded into an unmodified program, it routes the program's HIP (and
//! CUDA) device allocations through rocmguard's guard (`rocmguard_guard`, shim/guard). The
//! hooks themselves are the guard's exports (`hipMalloc` and the rest, exported from this
//! library because it links them); what is here is only how Linux brings calls to them that
//! the preload alone would miss: `dlsym` on a handle of the runtime (`dl.rs`).

use std::ffi::c_void;

mod deepbind;
mod dl;

/// The library's version, for `rocmguard doctor` and programs that want to know.
#[no_mangle]
pub extern "C" fn rocmguard_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
#[no_mangle]
pub extern "C" fn rocmguard_active() -> i32 {
    rocmguard_guard::active()
}

/// Pauses (`on` non-zero) or resumes pooling of new allocations: while paused, `hipMalloc` and
/// `cudaMalloc` go to the runtime (counted against the cap); memory the pool handed out stays
/// the pool's. Returns the previous state (1 or 0), or -1 when the guard is off. For timing a
/// program with and without its memory in the pool in one process.
#[no_mangle]
pub extern "C" fn rocmguard_pause(on: i32) -> i32 {
    rocmguard_guard::pause(on != 0)
}

/// 1 when a live pooled block holds `ptr` (its start and size written where not null), 0 when
/// the pool did not hand it out, -1 when the guard is off.
///
/// # Safety
/// `start` and `size` are null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rocmguard_pooled(
    ptr: *const c_void,
    start: *mut usize,
    size: *mut usize,
) -> i32 {
    rocmguard_guard::pooled(ptr, start, size)
}
