//! The exported HIP entry points. Each one checks its arguments the way ROCm's `clr` does, then
//! works on the state (`state`), the queue of simulated work (`work`) or both. Every function
//! that returns `hipError_t` runs its body through `error::api`, which records failures as the
//! thread's last error and keeps panics from crossing into C.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int, c_uint, c_ulonglong};
use std::ptr;
use std::time::Duration;

use crate::error::{self, *};
use crate::memory::Kind;
use crate::props::{self, Layout};
use crate::state::{self, current_device, Counters, Sim};
use crate::streams::{self, Streams};
use crate::vmm;
use crate::work::{self, Op};

type Stream = *mut c_void;

/// `HIP_VERSION` of ROCm 6.3.0, which the simulator's ABI follows.
const HIP_VERSION: c_int = 60_300_000;

/// `hipMemcpyKind` values.
const HOST_TO_HOST: c_int = 0;
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;
const DEFAULT: c_int = 4;

/// Writes through a C out-pointer; a null one is `hipErrorInvalidValue`.
unsafe fn put<T>(out: *mut T, value: T) -> HipResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    out.write(value);
    Ok(())
}

/// Resolves a stream that must exist, with the code ROCm gives for one that does not.
fn existing(sim: &Sim, stream: Stream) -> Result<streams::Target, HipError> {
    sim.streams
        .target(stream as usize, current_device(), CONTEXT_IS_DESTROYED)
}

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
    state::latency();
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
            let device = state::with(|s| {
                s.streams.check_unsafe_call(&mut s.counters, thread, mode)?;
                match ptr.is_null() {
                    true => Ok(None),
                    false => match s.mem.block_at(ptr as usize) {
                        Some(block) => Ok(Some(block.device)),
                        None => Err(INVALID_VALUE),
                    },
                }
            })?;
            let device = match device {
                Some(device) => device,
                None => return Ok(()),
            };
            state::latency();
            work::wait_for(|w| w.device == device);
            state::with(|s| {
                s.counters.syncs += 1;
                s.mem.release(&mut s.counters, ptr as usize)
            })
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
            let target = state::with(|s| {
                let target = s.streams.target(stream as usize, current_device(), INVALID_HANDLE)?;
                s.mem.mark_freeing(ptr as usize)?;
                Ok::<_, HipError>(target)
            })?;
            state::latency();
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

hip_export! {
    /// Free and total of the current device; in integrated mode the total is the smaller
    /// reported one and free is counted down from it.
    "hip_4.2" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> c_int {
        error::api(|| {
            if free.is_null() || total.is_null() {
                return Err(INVALID_VALUE);
            }
            let (f, t) = state::with(|s| {
                let device = current_device();
                s.check_device(device)?;
                let used = s.mem.used(device);
                let t = s.cfg.reported_vram;
                let f = match s.cfg.integrated {
                    true => t.saturating_sub(used),
                    false => s.cfg.vram.saturating_sub(used),
                };
                Ok::<_, HipError>((f, t))
            })?;
            free.write(f as usize);
            total.write(t as usize);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> c_int {
        error::api(|| {
            if bytes.is_null() {
                return Err(INVALID_VALUE);
            }
            let total = state::with(|s| s.check_device(device).map(|_| s.cfg.reported_vram))?;
            put(bytes, total as usize)
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int {
        error::api(|| {
            if value.is_null() {
                return Err(INVALID_VALUE);
            }
            let v = state::with(|s| {
                s.check_device(device)?;
                Ok::<_, HipError>(props::attribute(s.cfg, attr))
            })?;
            put(value, v)
        })
    }
}

/// Writes the properties of `device` in `layout` to `out`.
unsafe fn device_properties(out: *mut c_void, device: c_int, layout: &Layout) -> HipResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    let bytes = state::with(|s| {
        s.check_device(device)
            .map(|_| props::properties(s.cfg, layout))
    })?;
    ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
    Ok(())
}

hip_export! {
    /// The unsuffixed export takes the pre-6.0 layout, `hipDeviceProp_tR0000`.
    "hip_4.2" fn hipGetDeviceProperties(prop: *mut c_void, device: c_int) -> c_int {
        error::api(|| device_properties(prop, device, &props::R0000))
    }
}

hip_export! {
    "hip_6.0" fn hipGetDevicePropertiesR0600(prop: *mut c_void, device: c_int) -> c_int {
        error::api(|| device_properties(prop, device, &props::R0600))
    }
}

hip_export! {
    "hip_4.2" fn hipGetDeviceCount(count: *mut c_int) -> c_int {
        error::api(|| {
            let n = state::with(|s| s.cfg.devices);
            put(count, n)?;
            match n {
                0 => Err(NO_DEVICE),
                _ => Ok(()),
            }
        })
    }
}

hip_export! {
    "hip_4.2" fn hipGetDevice(device: *mut c_int) -> c_int {
        error::api(|| put(device, current_device()))
    }
}

hip_export! {
    "hip_4.2" fn hipSetDevice(device: c_int) -> c_int {
        error::api(|| {
            state::with(|s| s.check_device(device))?;
            state::set_current_device(device);
            Ok(())
        })
    }
}

hip_export! {
    /// Waits for all queued work of the current device; refused (and the captures invalidated)
    /// while any stream is capturing.
    "hip_4.2" fn hipDeviceSynchronize() -> c_int {
        error::api(|| {
            state::with(|s| {
                s.streams
                    .check_no_capture(&mut s.counters, STREAM_CAPTURE_UNSUPPORTED)
            })?;
            let device = current_device();
            work::wait_for(|w| w.device == device);
            state::with(|s| s.counters.syncs += 1);
            Ok(())
        })
    }
}

hip_export! {
    /// Waits for the current device's work, then frees every block it holds.
    "hip_4.2" fn hipDeviceReset() -> c_int {
        error::api(|| {
            let device = current_device();
            work::wait_for(|w| w.device == device);
            state::with(|s| {
                for ptr in s.mem.blocks_of(device) {
                    s.mem.release(&mut s.counters, ptr)?;
                }
                Ok(())
            })
        })
    }
}

hip_export! {
    "hip_4.2" fn hipGetLastError() -> c_int {
        error::last(true)
    }
}

hip_export! {
    "hip_4.2" fn hipPeekAtLastError() -> c_int {
        error::last(false)
    }
}

hip_export! {
    "hip_4.2" fn hipGetErrorName(code: c_int) -> *const c_char {
        error::name(code) as *const c_char
    }
}

hip_export! {
    "hip_4.2" fn hipGetErrorString(code: c_int) -> *const c_char {
        error::message(code) as *const c_char
    }
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

/// Before a synchronous copy or set: refused during capture, then waits like the legacy null
/// stream does.
fn before_sync_op() -> HipResult {
    state::with(|s| {
        s.streams
            .check_no_capture(&mut s.counters, STREAM_CAPTURE_IMPLICIT)
    })?;
    work::wait_for_null_stream(current_device());
    Ok(())
}

hip_export! {
    /// A plain memmove, since device memory is host memory here; the device side of the
    /// direction must lie inside a live allocation (or neighbouring mappings) that the device may
    /// write (destination) or read (source).
    "hip_4.2" fn hipMemcpy(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: c_int,
    ) -> c_int {
        error::api(|| {
            if bytes == 0 {
                return Ok(());
            }
            if dst.is_null() || src.is_null() {
                return Err(INVALID_VALUE);
            }
            let (dst_on_device, src_on_device) = match kind {
                HOST_TO_HOST | DEFAULT => (false, false),
                HOST_TO_DEVICE => (true, false),
                DEVICE_TO_HOST => (false, true),
                DEVICE_TO_DEVICE => (true, true),
                _ => return Err(INVALID_MEMCPY_DIRECTION),
            };
            before_sync_op()?;
            state::with(|s| {
                let ok = |on_device: bool, p: usize, write: bool| {
                    !on_device || s.mem.covers(p, bytes, write)
                };
                if !ok(dst_on_device, dst as usize, true) || !ok(src_on_device, src as usize, false) {
                    return Err(INVALID_VALUE);
                }
                ptr::copy(src as *const u8, dst as *mut u8, bytes);
                Ok(())
            })
        })
    }
}

hip_export! {
    "hip_4.2" fn hipMemset(dst: *mut c_void, value: c_int, bytes: usize) -> c_int {
        error::api(|| {
            if bytes == 0 {
                return Ok(());
            }
            before_sync_op()?;
            state::with(|s| {
                if !s.mem.contains(dst as usize, bytes) {
                    return Err(INVALID_VALUE);
                }
                ptr::write_bytes(dst as *mut u8, value as u8, bytes);
                Ok(())
            })
        })
    }
}

/// `hipPointerAttribute_t`.
#[repr(C)]
pub struct PointerAttributes {
    memory_type: c_int,
    device: c_int,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    is_managed: c_int,
    allocation_flags: c_uint,
}

hip_export! {
    /// Interior pointers resolve to their block; an unknown pointer is "unregistered", device
    /// -1, with success, as in ROCm 6.
    "hip_4.2" fn hipPointerGetAttributes(
        attributes: *mut PointerAttributes,
        ptr: *const c_void,
    ) -> c_int {
        error::api(|| {
            if attributes.is_null() || ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            let block = state::with(|s| s.mem.block_containing(ptr as usize));
            let p = ptr as *mut c_void;
            attributes.write(match block {
                Some((_, b)) => PointerAttributes {
                    memory_type: if b.kind == Kind::Managed { 3 } else { 2 },
                    device: b.device,
                    device_pointer: p,
                    host_pointer: if b.kind == Kind::Managed { p } else { ptr::null_mut() },
                    is_managed: (b.kind == Kind::Managed) as c_int,
                    allocation_flags: b.flags,
                },
                None => PointerAttributes {
                    memory_type: 0,
                    device: -1,
                    device_pointer: ptr::null_mut(),
                    host_pointer: ptr::null_mut(),
                    is_managed: 0,
                    allocation_flags: 0,
                },
            });
            Ok(())
        })
    }
}

/// The live allocation or `hipMemMap` mapping holding `ptr`, interior pointers included:
/// `(start, size)`. ROCm's clr answers both queries below from the memory object that
/// `getMemoryObject` finds for any address inside it (`hipamd/src/hip_memory.cpp` at f9f995c:
/// `hipMemPtrGetInfo` lines 793-806, `hipErrorInvalidValue` when none; `hipMemGetAddressRange`
/// lines 853-868, base `getSvmPtr()`, size `getSize()`, `hipErrorNotFound` when none); a mapping
/// is its own object there (`hipMemUnmap` finds it with `FindMemObj`, `hip_vm.cpp` line 352).
/// clr writes through the out-pointers unchecked; here a null one is `hipErrorInvalidValue`.
fn block_of(ptr: *mut c_void) -> Option<(usize, usize)> {
    state::with(|s| s.mem.block_containing(ptr as usize)).map(|(start, b)| (start, b.size))
}

hip_export! {
    "hip_4.2" fn hipMemGetAddressRange(base: *mut *mut c_void, size: *mut usize, ptr: *mut c_void) -> c_int {
        error::api(|| {
            if base.is_null() || size.is_null() {
                return Err(INVALID_VALUE);
            }
            let (start, bytes) = block_of(ptr).ok_or(NOT_FOUND)?;
            base.write(start as *mut c_void);
            size.write(bytes);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipMemPtrGetInfo(ptr: *mut c_void, size: *mut usize) -> c_int {
        error::api(|| {
            if size.is_null() {
                return Err(INVALID_VALUE);
            }
            size.write(block_of(ptr).ok_or(INVALID_VALUE)?.1);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipInit(flags: c_uint) -> c_int {
        error::api(|| match flags {
            0 => Ok(()),
            _ => Err(INVALID_VALUE),
        })
    }
}

hip_export! {
    "hip_4.2" fn hipRuntimeGetVersion(version: *mut c_int) -> c_int {
        error::api(|| put(version, HIP_VERSION))
    }
}

hip_export! {
    "hip_4.2" fn hipDriverGetVersion(version: *mut c_int) -> c_int {
        error::api(|| put(version, HIP_VERSION))
    }
}

/// `hipDriverProcAddressQueryResult` values.
const PROC_SUCCESS: c_int = 0;
const PROC_SYMBOL_NOT_FOUND: c_int = 1;

hip_export! {
    /// This library's own implementation of `symbol`, looked up through its own handle, never
    /// what a preloaded library exports (as the real runtime does). `hipGetDeviceProperties`
    /// with `hip_version >= 600` means `hipGetDevicePropertiesR0600`. An unknown name gives
    /// `hipErrorInvalidValue`, a null `*pfn` and status `HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
    "hip_6.1" fn hipGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        hip_version: c_int,
        _flags: u64,
        status: *mut c_int,
    ) -> c_int {
        error::api(|| {
            if symbol.is_null() || pfn.is_null() || *symbol == 0 {
                return Err(INVALID_VALUE);
            }
            let name = CStr::from_ptr(symbol);
            let name = match name.to_bytes() {
                b"hipGetDeviceProperties" if hip_version >= 600 => {
                    CStr::from_bytes_with_nul(b"hipGetDevicePropertiesR0600\0").unwrap_or(name)
                }
                _ => name,
            };
            let found = crate::sys::own_symbol(name);
            pfn.write(found);
            let (code, result) = match found.is_null() {
                true => (PROC_SYMBOL_NOT_FOUND, Err(INVALID_VALUE)),
                false => (PROC_SUCCESS, Ok(())),
            };
            if !status.is_null() {
                status.write(code);
            }
            result
        })
    }
}

hip_export! {
    /// Reserves address space (inaccessible, charged nothing) aligned to at least 2 MiB.
    "hip_5.1" fn hipMemAddressReserve(
        ptr: *mut *mut c_void,
        size: usize,
        alignment: usize,
        addr: *mut c_void,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::address_reserve(ptr, size, alignment, addr, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemAddressFree(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| vmm::address_free(ptr, size))
    }
}

hip_export! {
    /// Physical memory, charged to `prop->location.id` and counted like `hipMalloc`.
    "hip_5.1" fn hipMemCreate(
        handle: *mut *mut c_void,
        size: usize,
        prop: *const vmm::AllocationProp,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::create(handle, size, prop, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemRelease(handle: *mut c_void) -> c_int {
        error::api(|| vmm::release(handle))
    }
}

hip_export! {
    "hip_5.1" fn hipMemMap(
        ptr: *mut c_void,
        size: usize,
        offset: usize,
        handle: *mut c_void,
        flags: c_ulonglong,
    ) -> c_int {
        error::api(|| vmm::map(ptr, size, offset, handle, flags))
    }
}

hip_export! {
    "hip_5.1" fn hipMemSetAccess(
        ptr: *mut c_void,
        size: usize,
        desc: *const vmm::AccessDesc,
        count: usize,
    ) -> c_int {
        error::api(|| vmm::set_access(ptr, size, desc, count))
    }
}

hip_export! {
    "hip_5.1" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> c_int {
        error::api(|| vmm::unmap(ptr, size))
    }
}

hip_export! {
    "hip_5.1" fn hipMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const vmm::AllocationProp,
        option: c_int,
    ) -> c_int {
        error::api(|| vmm::granularity(granularity, prop, option))
    }
}

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
