//! IPC of pooled blocks rests on exporting virtual memory as POSIX file descriptors over a Unix
//! socket (Linux, `platform/unix/ipc.rs`); the Windows DLL keeps to plain segments, whose
//! handles the runtime makes with the block's offset (clr `hipIpcGetMemHandle`), so here every
//! IPC call goes to the runtime. The shared hooks and guard call these.

use std::ffi::c_void;

use crate::guard::Guard;

/// `hipIpcMemHandle_t`, passed by value to `hipIpcOpenMemHandle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle(pub [u8; 64]);

impl Guard {
    pub unsafe fn ipc_get(
        &'static self,
        _handle: *mut c_void,
        _ptr: *mut c_void,
        _whole_allocation: bool,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        pass()
    }

    pub unsafe fn ipc_open(
        &'static self,
        _ptr: *mut *mut c_void,
        _handle: IpcHandle,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        pass()
    }

    pub fn ipc_close(&'static self, _ptr: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        pass()
    }
}

/// No piece is ever exported here.
pub fn forget(_token: u64) {}
