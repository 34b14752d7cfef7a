//! Streams, default memory pools and stream capture, as opaque handles. Capture follows ROCm's
//! rules (`hip_internal.hpp`, `hip_graph.cpp`): a synchronizing call while any capture is active
//! fails and invalidates the captures, so `hipStreamEndCapture` then reports
//! `hipErrorStreamCaptureInvalidated`; that is how tests catch a caller that synchronizes during
//! capture.

use std::collections::HashMap;

use crate::counters::Counters;
use crate::error::*;

/// `hipStreamCaptureMode` values.
pub const MODE_GLOBAL: i32 = 0;
pub const MODE_THREAD_LOCAL: i32 = 1;
pub const MODE_RELAXED: i32 = 2;

/// `hipStreamCaptureStatus` values.
pub const STATUS_NONE: i32 = 0;
pub const STATUS_ACTIVE: i32 = 1;
pub const STATUS_INVALIDATED: i32 = 2;

/// `hipStreamNonBlocking`: the stream does not order itself against the null stream.
pub const NON_BLOCKING: u32 = 1;

/// Handles are fake addresses, never dereferenced; each kind has its own range.
const STREAM_BASE: usize = 0x5157_0000_0000;
const POOL_BASE: usize = 0x5150_0000_0000;
const GRAPH_BASE: usize = 0x5156_0000_0000;
const HANDLE_STEP: usize = 0x40;

/// The stream a queued operation belongs to: the null stream of a device is 0.
pub type StreamKey = usize;

#[derive(Clone, Copy, Debug)]
pub struct Stream {
    pub device: i32,
    pub non_blocking: bool,
}

#[derive(Clone, Copy, Debug)]
struct Capture {
    mode: i32,
    /// The thread that began it (see `state::thread_id`).
    thread: u64,
    invalidated: bool,
}

#[derive(Default)]
pub struct Streams {
    streams: HashMap<StreamKey, Stream>,
    /// Active (possibly invalidated) captures by stream, until `hipStreamEndCapture`.
    captures: HashMap<StreamKey, Capture>,
    created: usize,
    graphs: usize,
}

/// A stream as the queue sees it: which device, which key, whether it orders against the null
/// stream.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub device: i32,
    pub key: StreamKey,
    pub blocking: bool,
}

impl Streams {
    /// Creates a stream on `device`; its handle.
    pub fn create(&mut self, device: i32, flags: u32) -> usize {
        self.created += 1;
        let handle = STREAM_BASE + self.created * HANDLE_STEP;
        let stream = Stream {
            device,
            non_blocking: flags & NON_BLOCKING != 0,
        };
        self.streams.insert(handle, stream);
        handle
    }

    pub fn destroy(&mut self, handle: usize) -> HipResult {
        if handle == 0 {
            return Err(INVALID_HANDLE);
        }
        self.streams.remove(&handle).ok_or(CONTEXT_IS_DESTROYED)?;
        self.captures.remove(&handle);
        Ok(())
    }

    /// Resolves a handle (null, `hipStreamLegacy` = 1 and `hipStreamPerThread` = 2 mean the null
    /// stream of `current`); `invalid` is the code for an unknown handle.
    pub fn target(
        &self,
        handle: usize,
        current: i32,
        invalid: HipError,
    ) -> Result<Target, HipError> {
        if handle <= 2 {
            return Ok(Target {
                device: current,
                key: 0,
                blocking: true,
            });
        }
        let s = self.streams.get(&handle).ok_or(invalid)?;
        Ok(Target {
            device: s.device,
            key: handle,
            blocking: !s.non_blocking,
        })
    }

    /// The handle of `device`'s default memory pool.
    pub fn pool(device: i32) -> usize {
        POOL_BASE + (device as usize + 1) * HANDLE_STEP
    }

    /// The device of a default pool handle.
    pub fn pool_device(handle: usize, devices: i32) -> Option<i32> {
        let offset = handle.checked_sub(POOL_BASE)?;
        let device = (offset / HANDLE_STEP).checked_sub(1)? as i32;
        (offset % HANDLE_STEP == 0 && device < devices).then_some(device)
    }

    pub fn is_capturing(&self, key: StreamKey) -> bool {
        self.captures.contains_key(&key)
    }

    /// `hipStreamIsCapturing`.
    pub fn capture_status(&self, key: StreamKey) -> i32 {
        match self.captures.get(&key) {
            None => STATUS_NONE,
            Some(c) if c.invalidated => STATUS_INVALIDATED,
            Some(_) => STATUS_ACTIVE,
        }
    }

    /// `hipStreamBeginCapture`: the null stream cannot be captured.
    pub fn begin_capture(&mut self, key: StreamKey, mode: i32, thread: u64) -> HipResult {
        if key == 0 {
            return Err(STREAM_CAPTURE_UNSUPPORTED);
        }
        if !(MODE_GLOBAL..=MODE_RELAXED).contains(&mode) {
            return Err(INVALID_VALUE);
        }
        if self.captures.contains_key(&key) {
            return Err(ILLEGAL_STATE);
        }
        let capture = Capture {
            mode,
            thread,
            invalidated: false,
        };
        self.captures.insert(key, capture);
        Ok(())
    }

    /// `hipStreamEndCapture`: a graph handle, or the reason there is none.
    pub fn end_capture(&mut self, key: StreamKey, thread: u64) -> Result<usize, HipError> {
        if key == 0 {
            return Err(ILLEGAL_STATE);
        }
        let capture = *self.captures.get(&key).ok_or(ILLEGAL_STATE)?;
        if capture.mode != MODE_RELAXED && capture.thread != thread {
            return Err(STREAM_CAPTURE_WRONG_THREAD);
        }
        self.captures.remove(&key);
        if capture.invalidated {
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        self.graphs += 1;
        Ok(GRAPH_BASE + self.graphs * HANDLE_STEP)
    }

    /// Whether `handle` is a graph that `end_capture` returned.
    pub fn is_graph(&self, handle: usize) -> bool {
        handle > GRAPH_BASE
            && (handle - GRAPH_BASE) % HANDLE_STEP == 0
            && (handle - GRAPH_BASE) / HANDLE_STEP <= self.graphs
    }

    /// The check before a call that is unsafe during capture (`hipMalloc`, `hipFree`; ROCm's
    /// `CHECK_STREAM_CAPTURE_SUPPORTED`): with the calling thread in global mode, any global
    /// capture or a non-relaxed capture of this thread forbids it; in thread-local mode only the
    /// latter; relaxed mode allows it. Forbidding invalidates the captures concerned.
    pub fn check_unsafe_call(
        &mut self,
        counters: &mut Counters,
        thread: u64,
        thread_mode: i32,
    ) -> HipResult {
        let own = |c: &Capture| c.thread == thread && c.mode != MODE_RELAXED;
        let hit = match thread_mode {
            MODE_RELAXED => false,
            MODE_THREAD_LOCAL => self.invalidate(counters, own),
            _ => {
                self.invalidate(counters, own)
                    || self.invalidate(counters, |c| c.mode == MODE_GLOBAL)
            }
        };
        match hit {
            true => Err(STREAM_CAPTURE_UNSUPPORTED),
            false => Ok(()),
        }
    }

    /// The check before a synchronizing call: any capture at all makes it fail with `code` and
    /// invalidates every capture (ROCm's `CHECK_SUPPORTED_DURING_CAPTURE` and
    /// `CHECK_STREAM_CAPTURING`).
    pub fn check_no_capture(&mut self, counters: &mut Counters, code: HipError) -> HipResult {
        match self.invalidate(counters, |_| true) {
            true => Err(code),
            false => Ok(()),
        }
    }

    /// Invalidates the captures `which` selects; whether it selected any. Counts each capture
    /// that was still valid.
    fn invalidate(&mut self, counters: &mut Counters, which: impl Fn(&Capture) -> bool) -> bool {
        let mut any = false;
        for c in self.captures.values_mut().filter(|c| which(c)) {
            any = true;
            if !c.invalidated {
                c.invalidated = true;
                counters.capture_invalidations += 1;
            }
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synchronize_during_capture_invalidates_it() {
        let mut n = Counters::default();
        let mut s = Streams::default();
        let h = s.create(0, 0);
        s.begin_capture(h, MODE_GLOBAL, 1).unwrap();
        assert_eq!(s.begin_capture(h, MODE_GLOBAL, 1), Err(ILLEGAL_STATE));
        assert_eq!(
            s.check_no_capture(&mut n, STREAM_CAPTURE_UNSUPPORTED),
            Err(STREAM_CAPTURE_UNSUPPORTED)
        );
        assert_eq!(s.capture_status(h), STATUS_INVALIDATED);
        assert_eq!(s.end_capture(h, 1), Err(STREAM_CAPTURE_INVALIDATED));
        assert_eq!(
            s.check_no_capture(&mut n, STREAM_CAPTURE_UNSUPPORTED),
            Ok(())
        );
        assert_eq!(n.capture_invalidations, 1);
    }

    #[test]
    fn relaxed_threads_may_allocate_during_capture() {
        let mut n = Counters::default();
        let mut s = Streams::default();
        let h = s.create(0, 0);
        s.begin_capture(h, MODE_RELAXED, 1).unwrap();
        assert_eq!(s.check_unsafe_call(&mut n, 2, MODE_GLOBAL), Ok(()));
        let g = s.end_capture(h, 1).unwrap();
        assert!(s.is_graph(g));
        s.begin_capture(h, MODE_GLOBAL, 1).unwrap();
        assert_eq!(s.check_unsafe_call(&mut n, 2, MODE_RELAXED), Ok(()));
        assert_eq!(
            s.check_unsafe_call(&mut n, 2, MODE_GLOBAL),
            Err(STREAM_CAPTURE_UNSUPPORTED)
        );
    }

    #[test]
    fn pool_handles_name_their_device() {
        assert_eq!(Streams::pool_device(Streams::pool(1), 2), Some(1));
        assert_eq!(Streams::pool_device(Streams::pool(1), 1), None);
        assert_eq!(Streams::pool_device(Streams::pool(0) + 1, 1), None);
        assert_eq!(Streams::pool_device(0, 1), None);
    }
}
