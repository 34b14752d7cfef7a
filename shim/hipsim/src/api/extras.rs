//! The simulator's own exports, not part of HIP: a delayed fill standing in for a kernel, and
//! the counters the tests read.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::time::Duration;

use super::Stream;
use crate::counters::Counters;
use crate::error::{self, *};
use crate::state::{self, current_device};
use crate::work::{self, Op};

/// Simulator extra: queues a "kernel" on `stream` that, `delay_us` after the work queued before
/// it, writes `value` to `bytes` bytes at `dst` on a background thread. `dst` must lie inside a
/// live allocation when launched; if the memory is freed before the fill runs, the fill is
/// dropped (counted in `dropped_fills`). On a capturing stream it is accepted and never run:
/// the simulator keeps no graph to replay.
///
/// # Safety
/// A C entry point; `dst` is checked against the allocation table, never trusted.
#[no_mangle]
pub unsafe extern "C" fn hipsimLaunchFill(
    dst: *mut c_void,
    value: c_int,
    bytes: usize,
    delay_us: c_uint,
    stream: Stream,
) -> c_int {
    error::api(|| {
        if bytes == 0 {
            return Ok(());
        }
        let target = state::with(|s| {
            let target = s
                .streams
                .target(stream as usize, current_device(), INVALID_HANDLE)?;
            if !s.mem.contains(dst as usize, bytes) {
                return Err(INVALID_VALUE);
            }
            Ok((!s.streams.is_capturing(target.key)).then_some(target))
        })?;
        if let Some(target) = target {
            let op = Op::Fill {
                dst: dst as usize,
                value: value as u8,
                bytes,
            };
            work::submit(target, Duration::from_micros(delay_us.into()), op);
        }
        Ok(())
    })
}

/// Simulator extra: copies the counters into `*out` (layout in `tests/c/hipsim.h`).
///
/// # Safety
/// `out` is null (ignored) or points to a writable `struct hipsimCounters`.
#[no_mangle]
pub unsafe extern "C" fn hipsimCounters(out: *mut Counters) {
    if !out.is_null() {
        out.write(state::with(|s| s.counters));
    }
}
