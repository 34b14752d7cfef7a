//! The exported HIP entry points. Each one checks its arguments the way ROCm's `clr` does, then
//! works on the state (`state`), the queue of simulated work (`work`) or both. Every function
//! that returns `hipError_t` runs its body through `error::api`, which records failures as the
//! thread's last error and keeps panics from crossing into C.
//!
//! One file per API family under `api/`: `allocation`, `device`, `stream`, `copy`, `pointer`,
//! `runtime`, `virtual_memory`, and `extras` (the simulator's own exports).

use std::ffi::c_void;

use crate::error::*;

mod allocation;
mod copy;
mod device;
mod extras;
mod pointer;
mod runtime;
mod stream;
mod virtual_memory;

pub(crate) use allocation::{allocate, Alloc};
pub(crate) use virtual_memory::{export_shareable, get_access, import_shareable, MemLocation};

type Stream = *mut c_void;

/// Writes through a C out-pointer; a null one is `hipErrorInvalidValue`.
unsafe fn put<T>(out: *mut T, value: T) -> HipResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    out.write(value);
    Ok(())
}
