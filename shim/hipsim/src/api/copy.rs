//! The synchronous copy and set, `hipMemcpy` and `hipMemset`: host memory moved in place, after
//! the checks and the wait of the legacy null stream.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr;

use crate::error::{self, *};
use crate::state::{self, current_device};
use crate::work;

/// `hipMemcpyKind` values.
const HOST_TO_HOST: c_int = 0;
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;
const DEFAULT: c_int = 4;

/// Before a synchronous copy or set: refused during capture, then waits like the legacy null
/// stream does.
fn before_sync_op() -> HipResult {
    state::with(|s| {
        s.streams
            .check_no_capture(&mut s.counters, STREAM_CAPTURE_IMPLICIT)
    })?;
    work::wait_for_null_stream(current_device());
    Ok(())
}

hip_export! {
    /// A plain memmove, since device memory is host memory here; the device side of the
    /// direction must lie inside a live allocation (or neighbouring mappings) that the device may
    /// write (destination) or read (source).
    "hip_4.2" fn hipMemcpy(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: c_int,
    ) -> c_int {
        error::api(|| {
            if bytes == 0 {
                return Ok(());
            }
            if dst.is_null() || src.is_null() {
                return Err(INVALID_VALUE);
            }
            let (dst_on_device, src_on_device) = match kind {
                HOST_TO_HOST | DEFAULT => (false, false),
                HOST_TO_DEVICE => (true, false),
                DEVICE_TO_HOST => (false, true),
                DEVICE_TO_DEVICE => (true, true),
                _ => return Err(INVALID_MEMCPY_DIRECTION),
            };
            before_sync_op()?;
            state::with(|s| {
                let ok = |on_device: bool, p: usize, write: bool| {
                    !on_device || s.mem.covers(p, bytes, write)
                };
                if !ok(dst_on_device, dst as usize, true) || !ok(src_on_device, src as usize, false) {
                    return Err(INVALID_VALUE);
                }
                ptr::copy(src as *const u8, dst as *mut u8, bytes);
                Ok(())
            })
        })
    }
}

hip_export! {
    "hip_4.2" fn hipMemset(dst: *mut c_void, value: c_int, bytes: usize) -> c_int {
        error::api(|| {
            if bytes == 0 {
                return Ok(());
            }
            before_sync_op()?;
            state::with(|s| {
                if !s.mem.contains(dst as usize, bytes) {
                    return Err(INVALID_VALUE);
                }
                ptr::write_bytes(dst as *mut u8, value as u8, bytes);
                Ok(())
            })
        })
    }
}
