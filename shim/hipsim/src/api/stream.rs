//! The stream exports: creating, destroying and synchronizing streams, and stream capture (the
//! model behind them is `crate::streams`).

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::ptr;

use super::{put, Stream};
use crate::error::{self, *};
use crate::state::{self, current_device, Sim};
use crate::streams;
use crate::work;

/// Resolves a stream that must exist, with the code ROCm gives for one that does not.
fn existing(sim: &Sim, stream: Stream) -> Result<streams::Target, HipError> {
    sim.streams
        .target(stream as usize, current_device(), CONTEXT_IS_DESTROYED)
}

hip_export! {
    "hip_4.2" fn hipStreamCreate(stream: *mut Stream) -> c_int {
        hipStreamCreateWithFlags(stream, 0)
    }
}

hip_export! {
    /// On the current device; flag `hipStreamNonBlocking` (1) is honoured.
    "hip_4.2" fn hipStreamCreateWithFlags(stream: *mut Stream, flags: c_uint) -> c_int {
        error::api(|| {
            if stream.is_null() {
                return Err(INVALID_VALUE);
            }
            let handle = state::with(|s| {
                let device = current_device();
                s.check_device(device).map(|_| s.streams.create(device, flags))
            })?;
            put(stream, handle as Stream)
        })
    }
}

hip_export! {
    /// Work already queued on the stream still runs.
    "hip_4.2" fn hipStreamDestroy(stream: Stream) -> c_int {
        error::api(|| state::with(|s| s.streams.destroy(stream as usize)))
    }
}

hip_export! {
    "hip_4.2" fn hipStreamSynchronize(stream: Stream) -> c_int {
        error::api(|| {
            let target = state::with(|s| {
                let target = existing(s, stream)?;
                match s.streams.is_capturing(target.key) {
                    true => Err(STREAM_CAPTURE_UNSUPPORTED),
                    false => Ok(target),
                }
            })?;
            match target.key {
                0 => work::wait_for_null_stream(target.device),
                key => work::wait_for(|w| w.stream == key),
            }
            state::with(|s| s.counters.stream_syncs += 1);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.3" fn hipStreamBeginCapture(stream: Stream, mode: c_int) -> c_int {
        error::api(|| {
            state::with(|s| {
                let key = existing(s, stream)?.key;
                s.streams.begin_capture(key, mode, state::thread_id())
            })
        })
    }
}

hip_export! {
    /// A fake graph handle, or null with `hipErrorStreamCaptureInvalidated` when a forbidden
    /// call invalidated the capture.
    "hip_4.3" fn hipStreamEndCapture(stream: Stream, graph: *mut *mut c_void) -> c_int {
        error::api(|| {
            if graph.is_null() {
                return Err(INVALID_VALUE);
            }
            let result = state::with(|s| {
                let key = existing(s, stream)?.key;
                s.streams.end_capture(key, state::thread_id())
            });
            match result {
                Ok(handle) => graph.write(handle as *mut c_void),
                Err(STREAM_CAPTURE_INVALIDATED) => graph.write(ptr::null_mut()),
                Err(_) => {}
            }
            result.map(|_| ())
        })
    }
}

hip_export! {
    "hip_4.3" fn hipStreamIsCapturing(stream: Stream, status: *mut c_int) -> c_int {
        error::api(|| {
            if status.is_null() {
                return Err(INVALID_VALUE);
            }
            let v = state::with(|s| {
                let key = existing(s, stream)?.key;
                Ok::<_, HipError>(s.streams.capture_status(key))
            })?;
            put(status, v)
        })
    }
}

hip_export! {
    "hip_5.0" fn hipThreadExchangeStreamCaptureMode(mode: *mut c_int) -> c_int {
        error::api(|| {
            if mode.is_null() || !(streams::MODE_GLOBAL..=streams::MODE_RELAXED).contains(&*mode) {
                return Err(INVALID_VALUE);
            }
            put(mode, state::exchange_capture_mode(*mode))
        })
    }
}

hip_export! {
    /// Graphs are only handles here: the simulator records no nodes and replays nothing.
    "hip_4.3" fn hipGraphDestroy(graph: *mut c_void) -> c_int {
        error::api(|| match state::with(|s| s.streams.is_graph(graph as usize)) {
            true => Ok(()),
            false => Err(INVALID_VALUE),
        })
    }
}
