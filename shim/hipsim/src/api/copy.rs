//! The synchronous copy and set, `hipMemcpy` and `hipMemset`: host memory moved in place, after
//! the checks and the wait of the legacy null stream.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr;

use crate::error::{self, *};
use crate::selfcall;
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
            if selfcall::on() && dst_on_device != src_on_device {
                return staged(dst, src, bytes, dst_on_device);
            }
            copy(dst as usize, src as usize, bytes, (dst_on_device, src_on_device))
        })
    }
}

/// Moves `bytes` from `src` to `dst` once the device side of each (`on_device`: destination,
/// source) lies in memory the device may write or read.
unsafe fn copy(dst: usize, src: usize, bytes: usize, on_device: (bool, bool)) -> HipResult {
    state::with(|s| {
        let ok =
            |on_device: bool, p: usize, write: bool| !on_device || s.mem.covers(p, bytes, write);
        if !ok(on_device.0, dst, true) || !ok(on_device.1, src, false) {
            return Err(INVALID_VALUE);
        }
        ptr::copy(src as *const u8, dst as *mut u8, bytes);
        Ok(())
    })
}

/// A copy between host and device staged through a device buffer that the runtime takes with
/// `hipMalloc` and gives back with `hipFree` through the dynamic linker (`selfcall`).
unsafe fn staged(dst: *mut c_void, src: *const c_void, bytes: usize, to_device: bool) -> HipResult {
    let mut stage = ptr::null_mut();
    selfcall::malloc(&mut stage, bytes)?;
    let at = stage as usize;
    let copied = copy(at, src as usize, bytes, (true, !to_device))
        .and_then(|()| copy(dst as usize, at, bytes, (to_device, true)));
    let freed = selfcall::free(stage);
    copied.and(freed)
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
