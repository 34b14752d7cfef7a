//! Allocating and freeing: `hipMalloc` and its variants, `hipFree`, the stream-ordered calls and
//! the memory pools they draw from.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::ptr;
use std::time::Duration;

use super::{put, Stream};
use crate::cost::Call;
use crate::error::{self, *};
use crate::memory::Kind;
use crate::selfcall;
use crate::state::{self, current_device};
use crate::streams::Streams;
use crate::work::{self, Op};

/// Which call allocates, with what it needs beyond the size.
pub(crate) enum Alloc {
    /// `hipMalloc`, `hipExtMallocWithFlags`.
    Device { flags: u32 },
    /// `hipMallocManaged`.
    Managed { flags: u32 },
    /// `hipMallocAsync`: from the stream's device.
    Async { stream: usize },
    /// `hipMallocFromPoolAsync`: from the pool's device.
    Pool { pool: usize, stream: usize },
}

/// The body shared by every allocating call.
pub(crate) unsafe fn allocate(out: *mut *mut c_void, size: usize, how: Alloc) -> HipResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    state::pay(Call::Malloc, size);
    let (thread, mode) = (state::thread_id(), state::capture_mode());
    state::with(|s| {
        let current = current_device();
        if matches!(how, Alloc::Device { .. } | Alloc::Managed { .. }) {
            s.streams.check_unsafe_call(&mut s.counters, thread, mode)?;
        }
        let (device, kind, flags) = match how {
            Alloc::Device { flags } => (current, Kind::Device, flags),
            Alloc::Managed { flags } => (current, Kind::Managed, flags),
            Alloc::Async { stream } => {
                let target = s.streams.target(stream, current, INVALID_HANDLE)?;
                (target.device, Kind::Device, 0)
            }
            Alloc::Pool { pool, stream } => {
                s.streams.target(stream, current, INVALID_HANDLE)?;
                let device = Streams::pool_device(pool, s.cfg.devices).ok_or(INVALID_VALUE)?;
                (device, Kind::Device, 0)
            }
        };
        s.check_device(device)?;
        out.write(ptr::null_mut());
        if size == 0 {
            return Ok(());
        }
        let p = s
            .mem
            .alloc(s.cfg, &mut s.counters, size, device, kind, flags)?;
        out.write(p as *mut c_void);
        Ok(())
    })
}

hip_export! {
    "hip_4.2" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> c_int {
        error::api(|| allocate(ptr, size, Alloc::Device { flags: 0 }))
    }
}

hip_export! {
    "hip_4.2" fn hipExtMallocWithFlags(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
        error::api(|| allocate(ptr, size, Alloc::Device { flags }))
    }
}

hip_export! {
    /// Flags must be `hipMemAttachGlobal` (1) or `hipMemAttachHost` (2), and the size non-zero.
    "hip_4.2" fn hipMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
        error::api(|| {
            if size == 0 || !(1..=2).contains(&flags) {
                return Err(INVALID_VALUE);
            }
            if selfcall::on() {
                selfcall::malloc(ptr, size)?;
                state::with(|s| s.mem.make_managed(*ptr as usize, flags));
                return Ok(());
            }
            allocate(ptr, size, Alloc::Managed { flags })
        })
    }
}

hip_export! {
    "hip_5.1" fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: Stream) -> c_int {
        error::api(|| allocate(ptr, size, Alloc::Async { stream: stream as usize }))
    }
}

hip_export! {
    "hip_5.1" fn hipMallocFromPoolAsync(
        ptr: *mut *mut c_void,
        size: usize,
        pool: *mut c_void,
        stream: Stream,
    ) -> c_int {
        error::api(|| {
            if pool.is_null() {
                return Err(INVALID_VALUE);
            }
            let how = Alloc::Pool { pool: pool as usize, stream: stream as usize };
            allocate(ptr, size, how)
        })
    }
}

hip_export! {
    /// Waits for the queued work of the block's device first (the real runtime's implicit
    /// device synchronize), then unmaps. Like `hipMalloc` it is refused during a capture.
    "hip_4.2" fn hipFree(ptr: *mut c_void) -> c_int {
        error::api(|| {
            let (thread, mode) = (state::thread_id(), state::capture_mode());
            let block = state::with(|s| {
                s.streams.check_unsafe_call(&mut s.counters, thread, mode)?;
                match ptr.is_null() {
                    true => Ok(None),
                    false => s.mem.block_at(ptr as usize).map(Some).ok_or(INVALID_VALUE),
                }
            })?;
            let device = match block {
                Some(block) => {
                    state::pay(Call::Free, block.size);
                    block.device
                }
                None => return Ok(()),
            };
            match selfcall::on() {
                true => selfcall::device_synchronize()?,
                false => {
                    work::wait_for(|w| w.device == device);
                    state::with(|s| s.counters.syncs += 1);
                }
            }
            state::with(|s| s.mem.release(&mut s.counters, ptr as usize))
        })
    }
}

hip_export! {
    /// Stream-ordered: the block is released when the stream reaches this point (at once when
    /// the stream has nothing queued).
    "hip_5.1" fn hipFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int {
        error::api(|| {
            if ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            let (target, size) = state::with(|s| {
                let target = s.streams.target(stream as usize, current_device(), INVALID_HANDLE)?;
                s.mem.mark_freeing(ptr as usize)?;
                let size = s.mem.block_at(ptr as usize).map_or(0, |b| b.size);
                Ok::<_, HipError>((target, size))
            })?;
            state::pay(Call::Free, size);
            work::submit(target, Duration::ZERO, Op::Free { ptr: ptr as usize });
            Ok(())
        })
    }
}

hip_export! {
    /// A fake, never dereferenced handle per device.
    "hip_5.1" fn hipDeviceGetDefaultMemPool(pool: *mut *mut c_void, device: c_int) -> c_int {
        error::api(|| {
            if pool.is_null() {
                return Err(INVALID_VALUE);
            }
            state::with(|s| s.check_device(device))?;
            put(pool, Streams::pool(device) as *mut c_void)
        })
    }
}

hip_export! {
    /// Counted; the simulator's pools cache nothing, so there is nothing to trim.
    "hip_5.1" fn hipMemPoolTrimTo(pool: *mut c_void, _min_bytes_to_hold: usize) -> c_int {
        error::api(|| {
            state::with(|s| {
                Streams::pool_device(pool as usize, s.cfg.devices).ok_or(INVALID_VALUE)?;
                s.counters.mempool_trims += 1;
                Ok(())
            })
        })
    }
}
