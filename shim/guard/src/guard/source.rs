//! The pool's view of one device through the real runtime: plain allocations, virtual memory,
//! memory queries and synchronization, each a real call on the device the pool belongs to.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use rocmguard_core::trace::Action;
use rocmguard_core::{DeviceSource, SourceError};

use super::errors::keep_pending;
use super::{Active, Api, OUT_OF_MEMORY, SUCCESS};
use crate::hooks::calling;
use crate::log;
use crate::vmm::Vmm;

/// The pool's view of one device through the real runtime.
pub struct Source {
    pub(super) device: i32,
    /// An integrated GPU, whose figures the unified-memory view replaces.
    pub(super) integrated: bool,
    pub(super) api: Api,
    pub(super) captures: &'static AtomicUsize,
    /// Whether all the program's work is still in one order (see [`Active::leave_in_order`]).
    pub(super) in_order: &'static AtomicBool,
    /// Virtual memory for the pool's virtual segments, if the device offers it.
    pub(super) vmm: Option<Vmm>,
    /// The cap, shared with the `ROCMGUARD_GROUP` this process is in (if any): device memory
    /// is taken from the group before the runtime is asked for it.
    pub(super) group_cap: u64,
    /// Other devices the program enabled peer access to this device's memory for (a bit
    /// each): every piece of the virtual segments is made accessible to them too.
    pub(super) peers: &'static AtomicU64,
}

impl Source {
    /// Runs one virtual memory call with the device current (the CUDA driver needs its
    /// context). A failure other than out-of-memory is logged once: the pool then keeps to
    /// plain segments, or passes the code on.
    fn virtual_call<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Vmm) -> Result<T, i32>,
    ) -> Result<T, SourceError> {
        let vmm = self.vmm.as_ref().ok_or(SourceError::NOT_SUPPORTED)?;
        let mut current = self.device;
        // SAFETY: real runtime calls with valid out-pointers.
        let before = unsafe {
            let before = (self.api.peek_last_error)();
            (self.api.get_device)(&mut current);
            (self.api.set_device)(self.device);
            before
        };
        let r = calling(self.api.runtime, || f(vmm));
        if current != self.device {
            // SAFETY: the device that was current before, made current again.
            unsafe { (self.api.set_device)(current) };
        }
        r.map_err(|code| {
            keep_pending(before);
            if code != OUT_OF_MEMORY && !VMM_WARNED.swap(true, Ordering::Relaxed) {
                log::warn(format_args!(
                    "dev{}: virtual memory {} failed with code {}; plain segments from now on where it matters",
                    self.device, what, code
                ));
            }
            source_error(code)
        })
    }

    /// Gives the devices in `peers` access to every piece `pool` has mapped now (pieces
    /// mapped later read `peers` themselves).
    pub(super) fn grant_mapped(&self, pool: &rocmguard_core::Pool<Source>) {
        let peers = self.peers.load(Ordering::Acquire);
        pool.for_each_mapping(|addr, size| {
            let _ = self.virtual_call("peer access", |v| v.grant(addr, size, peers));
        });
    }

    /// The virtual memory functions the pool maps with, if it does.
    pub fn virtual_memory(&self) -> Option<&Vmm> {
        self.vmm.as_ref()
    }

    /// Runs `f` with `self.device` current, restoring the caller's device.
    pub(super) fn on_device<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut current = self.device;
        // SAFETY: real runtime calls with valid out-pointers.
        unsafe { (self.api.get_device)(&mut current) };
        if current == self.device {
            return f();
        }
        // SAFETY: real runtime calls with devices the runtime gave us.
        unsafe { (self.api.set_device)(self.device) };
        let r = f();
        // SAFETY: as above, the caller's device back.
        unsafe { (self.api.set_device)(current) };
        r
    }
}

pub(super) fn source_error(code: i32) -> SourceError {
    SourceError {
        code,
        out_of_memory: code == OUT_OF_MEMORY,
    }
}

impl DeviceSource for Source {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        if !crate::platform::group::reserve(self.device, size, self.group_cap) {
            return Err(source_error(OUT_OF_MEMORY));
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: real runtime calls with valid out-pointers.
        let before = unsafe { (self.api.peek_last_error)() };
        let code = calling(self.api.runtime, || unsafe {
            (self.api.malloc)(&mut p, size as usize)
        });
        if code != SUCCESS {
            crate::platform::group::release(self.device, size);
            keep_pending(before);
            return Err(source_error(code));
        }
        Ok(p as u64)
    }

    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        // SAFETY: addr came from the runtime's malloc.
        match calling(self.api.runtime, || unsafe {
            (self.api.free)(addr as *mut c_void)
        }) {
            SUCCESS => {
                crate::platform::group::release(self.device, size);
                Ok(())
            }
            code => Err(source_error(code)),
        }
    }

    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        match self.on_device(|| unsafe { (self.api.mem_get_info)(&mut free, &mut total) }) {
            SUCCESS => {
                let (free, total) = (free as u64, total as u64);
                Ok((
                    crate::uma::device_free(free, total, self.integrated),
                    crate::uma::device_total(total, self.integrated),
                ))
            }
            code => Err(source_error(code)),
        }
    }

    fn synchronize(&self) -> Result<(), SourceError> {
        // SAFETY: no arguments.
        let sync = || calling(self.api.runtime, || unsafe { (self.api.synchronize)() });
        match self.on_device(sync) {
            SUCCESS => {
                // A trace then shows what reuse out of one stream's order cost while it was
                // recorded (`rocmguard tune` says so).
                crate::trace::event(Action::Sync, self.device, 0, 0);
                Ok(())
            }
            code => Err(source_error(code)),
        }
    }

    fn may_synchronize(&self) -> bool {
        self.captures.load(Ordering::Acquire) == 0
    }

    fn in_order(&self) -> bool {
        self.in_order.load(Ordering::Acquire)
    }

    fn has_virtual_memory(&self) -> bool {
        self.vmm.is_some()
    }

    fn reserve(&self, size: u64) -> Result<u64, SourceError> {
        self.virtual_call("reserve", |v| v.reserve(size))
    }

    fn unreserve(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        self.virtual_call("address free", |v| v.unreserve(addr, size))
    }

    fn map(&self, addr: u64, size: u64, chunk: u64) -> Result<Vec<u64>, SourceError> {
        if !crate::platform::group::reserve(self.device, size, self.group_cap) {
            return Err(source_error(OUT_OF_MEMORY));
        }
        let peers = self.peers.load(Ordering::Acquire);
        let mapped = self.virtual_call("map", |v| v.map(addr, size, chunk, peers));
        if mapped.is_err() {
            crate::platform::group::release(self.device, size);
        }
        mapped
    }

    fn unmap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        let unmapped = self.virtual_call("unmap", |v| v.unmap(addr, size, token));
        crate::platform::ipc::forget(token);
        if unmapped.is_ok() {
            crate::platform::group::release(self.device, size);
        }
        unmapped
    }

    fn moves_memory(&self) -> bool {
        self.vmm.is_some()
    }

    /// The memory stays the group's until [`Source::release`]; its exports end here, as at an
    /// unmap: the piece may next lie under other blocks.
    fn detach(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        let detached = self.virtual_call("unmap", |v| v.detach(addr, size));
        crate::platform::ipc::forget(token);
        detached
    }

    fn remap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        let peers = self.peers.load(Ordering::Acquire);
        self.virtual_call("map", |v| v.remap(addr, size, token, peers))
    }

    fn release(&self, size: u64, token: u64) -> Result<(), SourceError> {
        let released = self.virtual_call("release", |v| v.release(token));
        if released.is_ok() {
            crate::platform::group::release(self.device, size);
        }
        released
    }
}

impl Active {
    /// The virtual memory functions for `device`: its pool's, else the runtime's unchecked
    /// (for mapping memory another process shares, `crate::ipc`).
    pub fn virtual_memory_for(&self, device: i32) -> Option<Vmm> {
        let pooled = self.pools.get(device as usize).and_then(|c| c.get());
        match pooled {
            Some(p) => p.source().virtual_memory().copied(),
            None => (self.face.virtual_memory)(device),
        }
    }

    /// Lets device `to` use `owner`'s pooled memory (see [`Guard::peer_access`]).
    pub(super) fn grant_peer(&'static self, owner: i32, to: i32) {
        let peers = match self.peers.get(owner as usize) {
            Some(p) if (0..64).contains(&to) => p,
            _ => return,
        };
        let bit = 1u64 << to;
        if to == owner || peers.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return;
        }
        if let Some(pool) = self.pools[owner as usize].get() {
            pool.source().grant_mapped(pool);
        }
    }
}

/// Whether a virtual memory failure was logged.
static VMM_WARNED: AtomicBool = AtomicBool::new(false);
/// Whether a trim that gave nothing back was logged.
static TRIM_WARNED: AtomicBool = AtomicBool::new(false);

impl Source {
    /// The device's free memory now (the runtime's `MemGetInfo`, through the unified-memory
    /// view), or `None` if the runtime cannot say.
    pub fn free_now(&self) -> Option<u64> {
        self.mem_info().ok().map(|(free, _)| free)
    }
}

/// After a trim released `released` bytes of virtual segments on `device`, whose free memory
/// went from `before` to `after`: says once when less than half of it came back. The first-use
/// check (`Vmm::probe`) catches a runtime that keeps released memory until the range is freed;
/// this catches one that does so only for ranges still in use, as the pool's are. Another
/// thread allocating meanwhile could make it speak wrongly; it only speaks, once.
pub(super) fn check_trim_returned(device: i32, released: u64, before: u64, after: u64) {
    let back = after.saturating_sub(before);
    if back >= released / 2 {
        return;
    }
    if !TRIM_WARNED.swap(true, Ordering::Relaxed) {
        log::warn(format_args!(
            "dev{}: a trim gave {} of virtual memory back but the device's free memory rose by {}: \
             the runtime seems to hold released memory until its address range is freed; \
             ROCMGUARD_VMM=0 (plain segments) gives memory back",
            device,
            rocmguard_core::format_size(released),
            rocmguard_core::format_size(back)
        ));
    }
}
