//! `hipError_t` codes, their names and messages (as ROCm's `hip_error.cpp` spells them), and the
//! per-thread last error with ROCm 7 semantics: a failing call records its code, a successful one
//! leaves it alone, `hipGetLastError` returns and clears it, `hipPeekAtLastError` only returns it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A `hipError_t` value.
pub type HipError = i32;

pub const SUCCESS: HipError = 0;
pub const INVALID_VALUE: HipError = 1;
pub const OUT_OF_MEMORY: HipError = 2;
pub const INVALID_DEVICE_POINTER: HipError = 17;
pub const INVALID_MEMCPY_DIRECTION: HipError = 21;
pub const NO_DEVICE: HipError = 100;
pub const INVALID_DEVICE: HipError = 101;
pub const INVALID_HANDLE: HipError = 400;
pub const ILLEGAL_STATE: HipError = 401;
pub const NOT_FOUND: HipError = 500;
pub const NOT_READY: HipError = 600;
pub const CONTEXT_IS_DESTROYED: HipError = 709;
pub const NOT_SUPPORTED: HipError = 801;
pub const STREAM_CAPTURE_UNSUPPORTED: HipError = 900;
pub const STREAM_CAPTURE_INVALIDATED: HipError = 901;
pub const STREAM_CAPTURE_UNMATCHED: HipError = 903;
pub const STREAM_CAPTURE_IMPLICIT: HipError = 906;
pub const STREAM_CAPTURE_WRONG_THREAD: HipError = 908;
pub const UNKNOWN: HipError = 999;

/// The result of an API body: `Err` carries the failing code.
pub type HipResult = Result<(), HipError>;

/// (code, name, message), NUL-terminated for C.
const TABLE: &[(HipError, &str, &str)] = &[
    (SUCCESS, "hipSuccess\0", "no error\0"),
    (
        INVALID_VALUE,
        "hipErrorInvalidValue\0",
        "invalid argument\0",
    ),
    (OUT_OF_MEMORY, "hipErrorOutOfMemory\0", "out of memory\0"),
    (
        INVALID_DEVICE_POINTER,
        "hipErrorInvalidDevicePointer\0",
        "invalid device pointer\0",
    ),
    (
        INVALID_MEMCPY_DIRECTION,
        "hipErrorInvalidMemcpyDirection\0",
        "invalid copy direction for memcpy\0",
    ),
    (
        NO_DEVICE,
        "hipErrorNoDevice\0",
        "no ROCm-capable device is detected\0",
    ),
    (
        INVALID_DEVICE,
        "hipErrorInvalidDevice\0",
        "invalid device ordinal\0",
    ),
    (
        INVALID_HANDLE,
        "hipErrorInvalidHandle\0",
        "invalid resource handle\0",
    ),
    (
        ILLEGAL_STATE,
        "hipErrorIllegalState\0",
        "the operation cannot be performed in the present state\0",
    ),
    (NOT_FOUND, "hipErrorNotFound\0", "named symbol not found\0"),
    (NOT_READY, "hipErrorNotReady\0", "device not ready\0"),
    (
        CONTEXT_IS_DESTROYED,
        "hipErrorContextIsDestroyed\0",
        "context is destroyed\0",
    ),
    (
        NOT_SUPPORTED,
        "hipErrorNotSupported\0",
        "operation not supported\0",
    ),
    (
        STREAM_CAPTURE_UNSUPPORTED,
        "hipErrorStreamCaptureUnsupported\0",
        "operation not permitted when stream is capturing\0",
    ),
    (
        STREAM_CAPTURE_INVALIDATED,
        "hipErrorStreamCaptureInvalidated\0",
        "operation failed due to a previous error during capture\0",
    ),
    (
        STREAM_CAPTURE_UNMATCHED,
        "hipErrorStreamCaptureUnmatched\0",
        "capture was not ended in the same stream as it began\0",
    ),
    (
        STREAM_CAPTURE_IMPLICIT,
        "hipErrorStreamCaptureImplicit\0",
        "operation would make the legacy stream depend on a capturing blocking stream\0",
    ),
    (
        STREAM_CAPTURE_WRONG_THREAD,
        "hipErrorStreamCaptureWrongThread\0",
        "attempt to terminate a thread-local capture sequence from another thread\0",
    ),
    (UNKNOWN, "hipErrorUnknown\0", "unknown error\0"),
];

fn entry(code: HipError) -> (&'static str, &'static str) {
    TABLE
        .iter()
        .find(|e| e.0 == code)
        .map(|e| (e.1, e.2))
        .unwrap_or(("hipErrorUnknown\0", "unknown error\0"))
}

/// `hipGetErrorName`: a static NUL-terminated string.
pub fn name(code: HipError) -> *const u8 {
    entry(code).0.as_ptr()
}

/// `hipGetErrorString`: a static NUL-terminated string.
pub fn message(code: HipError) -> *const u8 {
    entry(code).1.as_ptr()
}

thread_local! {
    static LAST: Cell<HipError> = const { Cell::new(SUCCESS) };
}

/// Runs an API body: converts its result to a code, records a failure as the thread's last error,
/// and turns a panic into `hipErrorUnknown` so none crosses the C boundary.
pub fn api(body: impl FnOnce() -> HipResult) -> HipError {
    let code = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    };
    if code != SUCCESS {
        // A thread that is exiting has no last error left to keep.
        let _ = LAST.try_with(|last| last.set(code));
    }
    code
}

/// `hipGetLastError` (`clear`) and `hipPeekAtLastError`.
pub fn last(clear: bool) -> HipError {
    LAST.try_with(|last| match clear {
        true => last.replace(SUCCESS),
        false => last.get(),
    })
    .unwrap_or(SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_error_is_sticky_until_read() {
        assert_eq!(api(|| Err(OUT_OF_MEMORY)), OUT_OF_MEMORY);
        assert_eq!(api(|| Ok(())), SUCCESS);
        assert_eq!(last(false), OUT_OF_MEMORY);
        assert_eq!(last(true), OUT_OF_MEMORY);
        assert_eq!(last(true), SUCCESS);
    }

    #[test]
    fn every_name_is_terminated() {
        for (_, name, message) in TABLE {
            assert!(name.ends_with('\0') && message.ends_with('\0'));
        }
        assert_eq!(entry(12345).0, "hipErrorUnknown\0");
    }
}
