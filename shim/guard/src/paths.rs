//! The hook bodies for the allocation paths beside `Malloc` and `Free`, both faces: pitched
//! allocations (through the pool), physical memory the program maps itself (`MemCreate`,
//! counted against the cap like the runtime's other allocations), and the address-range
//! queries, which describe the pooled block holding an address.

use std::ffi::c_void;

use crate::guard::{Guard, Handed, SUCCESS};

impl Guard {
    /// `MallocPitch` and its kin: `height * depth` rows of `width` bytes, each padded to a
    /// multiple of `alignment` (the runtime's pitch), through the pool like `Malloc`. A zero
    /// extent or a bad argument goes to the runtime, which answers it.
    ///
    /// # Safety
    /// `pitch` is null or valid for writes, as the runtime requires.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn malloc_pitched(
        &'static self,
        ptr: *mut *mut c_void,
        pitch: *mut usize,
        width: usize,
        height: usize,
        depth: usize,
        alignment: usize,
        mut pass: impl FnMut() -> i32,
    ) -> i32 {
        let row = width
            .checked_add(alignment - 1)
            .map(|w| w / alignment * alignment);
        let size = row.and_then(|r| r.checked_mul(height)?.checked_mul(depth));
        match (row, size) {
            (Some(row), Some(size)) if !pitch.is_null() && self.active().is_some() => {
                *pitch = row;
                self.malloc(ptr, size, pass)
            }
            _ => pass(),
        }
    }

    /// `MemCreate`: physical memory the program maps itself, counted against the cap of the
    /// device it is made on (`None`: not device memory, passed through). `sticky`: the call
    /// sets the runtime's last error (HIP's does; the CUDA driver has none).
    pub fn mem_create(
        &'static self,
        handle: *mut *mut c_void,
        size: usize,
        device: Option<i32>,
        sticky: bool,
        mut pass: impl FnMut() -> i32,
    ) -> i32 {
        match (self.active(), device) {
            (Some(a), Some(d)) if !handle.is_null() && size > 0 => {
                a.external_alloc_on(d, Handed::Handle, sticky, handle, size, pass)
            }
            _ => pass(),
        }
    }

    /// `MemRelease`: the runtime releases the handle; we stop counting it.
    pub fn mem_release(&'static self, handle: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            a.external_forget(Handed::Handle, handle);
        }
        code
    }

    /// The live pooled block holding `ptr` (any byte of it), `(start, size)`, for the
    /// address-range queries; `None` for memory the pool does not hand out.
    pub fn block_of(&'static self, ptr: *const c_void) -> Option<(u64, u64)> {
        let a = self.active()?;
        let found = a
            .existing_pools()
            .find_map(|(_, p)| p.block_containing(ptr as u64));
        found
    }
}
