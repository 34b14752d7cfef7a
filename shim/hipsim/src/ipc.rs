//! `hipIpcGetMemHandle` / `hipIpcOpenMemHandle` / `hipIpcCloseMemHandle` between real
//! processes, after clr's `hip_memory.cpp`: a handle names the allocation holding the pointer
//! (`ihipIpcMemHandle_t`: the runtime's IPC handle in bytes 0..32, the allocation's size
//! `psize` at 32, the pointer's offset in it `poffset` at 40), and the opener gets the
//! allocation mapped at an address of its own plus `poffset` (`IpcAttach`). clr refuses a null
//! pointer or flags other than `hipIpcMemLazyEnablePeerAccess` and a handle of size 0 with
//! `hipErrorInvalidValue`, and memory it cannot share or attach with
//! `hipErrorInvalidDevicePointer`.
//!
//! The simulator's stand-in for the runtime's handle: the exporter's pid and a file descriptor
//! of the allocation's memory. At the first export an allocation's bytes move into a `memfd`
//! mapped over the same addresses (`sys::share_in_place`), and the opener maps that file from
//! `/proc/<pid>/fd/<n>`: the same bytes in both processes, as device memory shared over IPC is.

use std::collections::HashMap;
use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::sync::Mutex;

use crate::error::{self, *};
use crate::memory::Kind;
use crate::state::{self, current_device};
use crate::sys;

const MAGIC: &[u8; 16] = b"hipsim-ipc-v1\0\0\0";
/// `hipIpcMemLazyEnablePeerAccess`, the only flag clr's `hipIpcOpenMemHandle` accepts.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// `hipIpcMemHandle_t`: 64 bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle([u8; 64]);

/// What this process opened: the address handed out -> (mapping start, its size).
static OPENED: Mutex<Option<HashMap<usize, (usize, usize)>>> = Mutex::new(None);

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

hip_export! {
    "hip_4.2" fn hipIpcGetMemHandle(handle: *mut IpcHandle, ptr: *mut c_void) -> c_int {
        error::api(|| {
            if handle.is_null() || ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            let (start, size, fd) = state::with(|s| {
                let (start, block) = s
                    .mem
                    .block_containing(ptr as usize)
                    .filter(|(_, b)| b.kind == Kind::Device && !b.freeing)
                    .ok_or(INVALID_DEVICE_POINTER)?;
                let fd = s.mem.share(start).ok_or(INVALID_DEVICE_POINTER)?;
                Ok::<_, HipError>((start, block.size, fd))
            })?;
            let mut bytes = [0u8; 64];
            bytes[..16].copy_from_slice(MAGIC);
            bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
            bytes[20..24].copy_from_slice(&fd.to_le_bytes());
            bytes[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            bytes[40..48].copy_from_slice(&((ptr as usize - start) as u64).to_le_bytes());
            handle.write(IpcHandle(bytes));
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipIpcOpenMemHandle(ptr: *mut *mut c_void, handle: IpcHandle, flags: c_uint) -> c_int {
        error::api(|| {
            let (size, offset) = (word(&handle.0, 32) as usize, word(&handle.0, 40) as usize);
            if ptr.is_null() || flags != LAZY_ENABLE_PEER_ACCESS || size == 0 {
                return Err(INVALID_VALUE);
            }
            if handle.0[..16] != MAGIC[..] || offset >= size {
                return Err(INVALID_DEVICE_POINTER);
            }
            let pid = u32::from_le_bytes([handle.0[16], handle.0[17], handle.0[18], handle.0[19]]);
            let fd = c_int::from_le_bytes([handle.0[20], handle.0[21], handle.0[22], handle.0[23]]);
            let base = sys::open_shared(pid, fd, size).ok_or(INVALID_DEVICE_POINTER)? as usize;
            let device = current_device();
            state::with(|s| s.mem.add_opened(base, size, device));
            OPENED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .insert(base + offset, (base, size));
            ptr.write((base + offset) as *mut c_void);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipIpcCloseMemHandle(ptr: *mut c_void) -> c_int {
        error::api(|| {
            if ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            let opened = OPENED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .remove(&(ptr as usize));
            let (base, size) = opened.ok_or(INVALID_VALUE)?;
            state::with(|s| s.mem.remove_mapping(base));
            // A mapping `open_shared` made, no longer in the table (the export's unsafe context
            // covers the call).
            sys::unmap(base as *mut u8, size);
            Ok(())
        })
    }
}
