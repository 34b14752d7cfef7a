//! The library's own C API, exported as is by both loaders (`librocmguard.so` and
//! `rocmguard.dll` link this crate): what a program may ask rocmguard itself.

use std::ffi::c_void;
use std::os::raw::c_char;

use crate::{active, boundary, guard, GUARDS};

/// The library's version, for `rocmguard doctor` and programs that want to know.
#[no_mangle]
pub extern "C" fn rocmguard_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
#[no_mangle]
pub extern "C" fn rocmguard_active() -> i32 {
    active()
}

/// Pauses (`on` non-zero) or resumes pooling of new device allocations: while paused,
/// `hipMalloc` and `cudaMalloc` go to the runtime (counted against the cap); memory the pool
/// handed out stays the pool's (`guard/pause.rs` says why that is sound). Returns the previous
/// state (1 or 0), or -1 when the guard is off. For timing a program with its memory in the
/// pool and in the runtime's own allocations in one process.
#[no_mangle]
pub extern "C" fn rocmguard_pause(on: i32) -> i32 {
    guard::pause(on != 0)
}

/// Whether a live pooled block (either face's) holds `ptr`: 1, with its start and size written
/// where `start` and `size` are not null; 0 for memory the pool did not hand out (the runtime's
/// own, or freed); -1 when the guard is off. Lets a program check where its memory lives, e.g.
/// that [`rocmguard_pause`] moved it.
///
/// # Safety
/// `start` and `size` are null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rocmguard_pooled(
    ptr: *const c_void,
    start: *mut usize,
    size: *mut usize,
) -> i32 {
    if active() == 0 {
        return -1;
    }
    // It takes the pools' locks: no panic of ours may reach the caller from here either.
    let lookup = || GUARDS.iter().find_map(|g| g.pooled_block(ptr));
    match boundary("rocmguard_pooled", lookup, || None) {
        Some((s, n)) => {
            if !start.is_null() {
                *start = s as usize;
            }
            if !size.is_null() {
                *size = n as usize;
            }
            1
        }
        None => 0,
    }
}
