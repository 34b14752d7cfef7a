//! What the hooks do, once for both faces (HIP and CUDA: the same shapes, the same codes for
//! success and out-of-memory). A `Guard` owns one runtime's per-device pools, its pass-through
//! allocations counted against the cap, and the bookkeeping that keeps the runtime's own
//! semantics: sticky last errors, stream capture, fork.

use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use once_cell::sync::OnceCell;
use rocmguard_core::trace::Action;
use rocmguard_core::{AllocError, Config, DeviceSource, Pool, PoolOptions, SourceError, Stats};

use crate::log;
use crate::vmm::Vmm;

pub const SUCCESS: i32 = 0;
/// `hipErrorOutOfMemory` and `cudaErrorMemoryAllocation` alike.
pub const OUT_OF_MEMORY: i32 = 2;
/// `hip`/`cudaErrorSharedObjectSymbolNotFound`: the runtime function could not be found.
pub const SYMBOL_NOT_FOUND: i32 = 302;

const MAX_DEVICES: usize = 64;

pub type MallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> i32;
pub type FreeFn = unsafe extern "C" fn(*mut c_void) -> i32;
pub type MemInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
pub type GetDeviceFn = unsafe extern "C" fn(*mut i32) -> i32;
pub type SetDeviceFn = unsafe extern "C" fn(i32) -> i32;
pub type VoidFn = unsafe extern "C" fn() -> i32;

/// The runtime functions the pool stands on.
#[derive(Clone, Copy)]
pub struct Api {
    pub malloc: MallocFn,
    pub free: FreeFn,
    pub mem_get_info: MemInfoFn,
    pub get_device: GetDeviceFn,
    pub set_device: SetDeviceFn,
    pub synchronize: VoidFn,
    pub get_last_error: VoidFn,
    pub peek_last_error: VoidFn,
}

/// One face of the library.
pub struct Face {
    /// "HIP" or "CUDA", for logs.
    pub name: &'static str,
    /// Resolves the real functions; `None` while the runtime is not loaded.
    pub api: fn() -> Option<Api>,
    /// Whether a device is an integrated GPU sharing system memory.
    pub integrated: fn(i32) -> bool,
    /// The runtime's virtual memory functions for a device, where it has them and they suit
    /// the pool.
    pub virtual_memory: fn(i32) -> Option<Vmm>,
}

thread_local! {
    /// The last error pending before the pool's own device call failed, to restore after a
    /// recovery: `Some(code)` once a device call of ours failed during the current hook.
    static PENDING_BEFORE: Cell<Option<i32>> = const { Cell::new(None) };
    /// An error the program should still see from `GetLastError` although the runtime's own
    /// slot no longer holds it (we consumed the runtime's after recovering, or refused by cap).
    static SHADOW_ERROR: Cell<i32> = const { Cell::new(SUCCESS) };
}

/// The pool's view of one device through the real runtime.
pub struct Source {
    device: i32,
    /// An integrated GPU, whose figures the unified-memory view replaces.
    integrated: bool,
    api: Api,
    captures: &'static AtomicUsize,
    /// Whether all the program's work is still in one order (see [`Active::leave_in_order`]).
    in_order: &'static AtomicBool,
    /// Virtual memory for the pool's virtual segments, if the device offers it.
    vmm: Option<Vmm>,
    /// The cap, shared with the `ROCMGUARD_GROUP` this process is in (if any): device memory
    /// is taken from the group before the runtime is asked for it.
    group_cap: u64,
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
        let r = f(vmm);
        if current != self.device {
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

    /// Runs `f` with `self.device` current, restoring the caller's device.
    fn on_device<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut current = self.device;
        // SAFETY: real runtime calls with valid out-pointers.
        unsafe { (self.api.get_device)(&mut current) };
        if current == self.device {
            return f();
        }
        unsafe { (self.api.set_device)(self.device) };
        let r = f();
        unsafe { (self.api.set_device)(current) };
        r
    }
}

/// Remembers the error that was pending before the first failed device call of ours in this
/// hook, so that a recovery can restore it.
fn keep_pending(before: i32) {
    PENDING_BEFORE.with(|c| {
        if c.get().is_none() {
            c.set(Some(before));
        }
    });
}

fn source_error(code: i32) -> SourceError {
    SourceError {
        code,
        out_of_memory: code == OUT_OF_MEMORY,
    }
}

impl DeviceSource for Source {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        if !crate::group::reserve(self.device, size, self.group_cap) {
            return Err(source_error(OUT_OF_MEMORY));
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: real runtime calls with valid out-pointers.
        let before = unsafe { (self.api.peek_last_error)() };
        let code = unsafe { (self.api.malloc)(&mut p, size as usize) };
        if code != SUCCESS {
            crate::group::release(self.device, size);
            keep_pending(before);
            return Err(source_error(code));
        }
        Ok(p as u64)
    }

    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        // SAFETY: addr came from the runtime's malloc.
        match unsafe { (self.api.free)(addr as *mut c_void) } {
            SUCCESS => {
                crate::group::release(self.device, size);
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
        match self.on_device(|| unsafe { (self.api.synchronize)() }) {
            SUCCESS => Ok(()),
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
        if !crate::group::reserve(self.device, size, self.group_cap) {
            return Err(source_error(OUT_OF_MEMORY));
        }
        let mapped = self.virtual_call("map", |v| v.map(addr, size, chunk));
        if mapped.is_err() {
            crate::group::release(self.device, size);
        }
        mapped
    }

    fn unmap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        let unmapped = self.virtual_call("unmap", |v| v.unmap(addr, size, token));
        if unmapped.is_ok() {
            crate::group::release(self.device, size);
        }
        unmapped
    }
}

/// Whether a virtual memory failure was logged.
static VMM_WARNED: AtomicBool = AtomicBool::new(false);

/// A guard that is on: the runtime was found and the configuration read.
pub struct Active {
    pub face: &'static Face,
    pub api: Api,
    pub config: &'static Config,
    pools: Vec<OnceCell<Pool<Source>>>,
    /// The device of the only pool, or -1 while there is none or several: a free then goes
    /// straight to that pool without asking the runtime for the current device. Written after
    /// a pool is made; a stale value only costs the full search that follows a miss.
    only_pool: AtomicI32,
    /// Pass-through allocations counted against the cap: (what, pointer or handle) ->
    /// (device, bytes).
    external: Mutex<std::collections::HashMap<(Handed, usize), (i32, u64)>>,
    /// Stream captures in progress (streams by address), and their count.
    capturing: Mutex<Vec<usize>>,
    captures: AtomicUsize,
    /// True until the program shows it queues work other than on one device's default stream
    /// (it makes a stream through the runtime, passes one, uses a second device or peer
    /// access): until then every use of a block is queued after all earlier uses, so freed
    /// blocks are reused at once. Streams a library makes below the runtime for itself (cuBLASLt
    /// does, through the driver) do not count: a library keeps its work ordered with the
    /// caller's stream, which PyTorch's own cache relies on too.
    in_order: AtomicBool,
    /// Devices whose cap warning has been printed.
    warned: Vec<AtomicBool>,
    /// Refusals per device and [`Refusal`] situation: the first of each is logged, the rest
    /// counted for the summary at exit (a program at a low cap may be refused thousands of times).
    refusals: Vec<[AtomicU64; 2]>,
    /// Held shared by the reclaimer while it synchronizes and exclusively while a capture
    /// begins, so a background synchronize never overlaps the start of a capture.
    sync_gate: std::sync::RwLock<()>,
    reclaimer: OnceCell<()>,
}

/// What a pass-through allocation handed the program: a pointer (`hipMallocManaged`, ...) or a
/// handle to physical memory (`hipMemCreate`, `cuMemCreate`), which never name each other.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handed {
    Pointer,
    Handle,
}

pub struct Guard {
    pub face: &'static Face,
    state: OnceCell<Option<Active>>,
}

impl Guard {
    pub const fn new(face: &'static Face) -> Guard {
        Guard {
            face,
            state: OnceCell::new(),
        }
    }

    /// The active guard, or `None` for pass-through (disabled, or the runtime is not loaded
    /// yet: then we look again next call).
    #[inline]
    pub fn active(&self) -> Option<&Active> {
        if let Some(state) = self.state.get() {
            return state.as_ref();
        }
        let config = crate::config()?;
        if config.disable || crate::degraded() {
            return self.state.get_or_init(|| None).as_ref();
        }
        let api = (self.face.api)()?;
        self.state
            .get_or_init(|| {
                log::first_use(self.face.name, config);
                Some(Active {
                    face: self.face,
                    api,
                    config,
                    pools: (0..MAX_DEVICES).map(|_| OnceCell::new()).collect(),
                    only_pool: AtomicI32::new(-1),
                    external: Mutex::new(Default::default()),
                    capturing: Mutex::new(Vec::new()),
                    captures: AtomicUsize::new(0),
                    in_order: AtomicBool::new(config.ordered_reuse),
                    warned: (0..MAX_DEVICES).map(|_| AtomicBool::new(false)).collect(),
                    refusals: (0..MAX_DEVICES)
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                        .collect(),
                    sync_gate: std::sync::RwLock::new(()),
                    reclaimer: OnceCell::new(),
                })
            })
            .as_ref()
    }

    /// The stats of every device with a pool, for the exit table and live publishing.
    pub fn stats(&self) -> Vec<(i32, Stats)> {
        match self.state.get() {
            Some(Some(a)) => a
                .pools
                .iter()
                .enumerate()
                .filter_map(|(d, p)| p.get().map(|p| (d as i32, p.stats())))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The refusals left unlogged, one line per device (see [`Active::refusal_summary`]).
    pub fn refusal_summary(&self) -> Vec<String> {
        match self.state.get() {
            Some(Some(a)) => a.refusal_summary(),
            _ => Vec::new(),
        }
    }
}

/// The hook bodies both faces share (`pass` is the plain runtime call with the caller's
/// arguments): each face's hooks are one line over these.
impl Guard {
    /// `Malloc`: through the pool of the current device.
    pub fn malloc(
        &'static self,
        ptr: *mut *mut c_void,
        size: usize,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        match self.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.alloc(ptr, size).unwrap_or_else(pass),
            _ => pass(),
        }
    }

    /// Allocations the runtime makes itself (managed, stream-ordered, flagged), counted against
    /// the cap.
    pub fn external_malloc(
        &'static self,
        ptr: *mut *mut c_void,
        size: usize,
        mut pass: impl FnMut() -> i32,
    ) -> i32 {
        match self.active() {
            Some(a) if !ptr.is_null() && size > 0 => a.external_alloc(ptr, size, pass),
            _ => pass(),
        }
    }

    /// `Free`: back to whichever pool holds it, else to the runtime.
    pub fn free(&'static self, ptr: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        match self.active() {
            Some(a) if !ptr.is_null() => {
                if a.free(ptr) {
                    return SUCCESS;
                }
                let code = pass();
                if code == SUCCESS {
                    a.external_free(ptr);
                }
                code
            }
            _ => pass(),
        }
    }

    /// `FreeAsync`: the runtime frees; we stop counting it.
    pub fn free_async(&'static self, ptr: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            a.external_free(ptr);
        }
        code
    }

    /// `MemPoolTrimTo`: our cache of the current device too.
    pub fn trim_to(&'static self, keep: usize, pass: impl FnOnce() -> i32) -> i32 {
        if let Some(a) = self.active() {
            a.trim_current(keep as u64);
        }
        pass()
    }

    /// `MemGetInfo`: the capped view.
    ///
    /// # Safety
    /// `free` and `total` are null or valid for writes, as the runtime requires.
    pub unsafe fn mem_get_info(
        &'static self,
        free: *mut usize,
        total: *mut usize,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            if !free.is_null() && !total.is_null() {
                let (f, t) = a.mem_view(*free as u64, *total as u64);
                *free = f as usize;
                *total = t as usize;
            }
        }
        code
    }

    /// A properties struct with the total at `offset`, capped.
    ///
    /// # Safety
    /// `props` is null or the struct the runtime just filled, with a `size_t` at `offset`.
    pub unsafe fn cap_props(
        &'static self,
        props: *mut c_void,
        offset: usize,
        device: i32,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            if !props.is_null() {
                let field = (props as *mut u8).add(offset) as *mut usize;
                let total = field.read_unaligned() as u64;
                field.write_unaligned(a.total_for(device, total) as usize);
            }
        }
        code
    }

    /// A stream was made (by `call`, a `StreamCreate*`): work on it runs beside the default
    /// stream's.
    pub fn stream_created(&'static self, call: &str, pass: impl FnOnce() -> i32) -> i32 {
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            a.leave_in_order(format_args!("made a stream ({})", call));
        }
        code
    }

    /// A call that names `stream`: anything but the default (legacy) stream is a stream of the
    /// program's own, maybe one we did not see made.
    pub fn stream_named(&'static self, stream: *mut c_void) {
        if !is_default_stream(stream) {
            if let Some(a) = self.active() {
                a.leave_in_order(format_args!("named a stream of its own"));
            }
        }
    }

    /// `DeviceEnablePeerAccess`: kernels of one device may now use another's memory.
    pub fn peer_access(&'static self, pass: impl FnOnce() -> i32) -> i32 {
        if let Some(a) = self.active() {
            a.leave_in_order(format_args!("enabled peer access"));
        }
        pass()
    }

    pub fn device_synchronize(&'static self, pass: impl FnOnce() -> i32) -> i32 {
        match self.active() {
            Some(a) => a.synchronize(pass),
            None => pass(),
        }
    }

    pub fn device_reset(&'static self, pass: impl FnOnce() -> i32) -> i32 {
        if let Some(a) = self.active() {
            a.device_reset();
        }
        pass()
    }

    pub fn begin_capture(&'static self, stream: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        self.stream_named(stream);
        let active = self.active();
        let _gate = active.map(|a| a.sync_gate.write().unwrap_or_else(|e| e.into_inner()));
        let code = pass();
        if let (SUCCESS, Some(a)) = (code, self.active()) {
            a.capture_began(stream as usize);
        }
        code
    }

    pub fn end_capture(&'static self, stream: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        let code = pass();
        if let Some(a) = self.active() {
            a.capture_ended(stream as usize);
        }
        code
    }
}

impl Active {
    pub fn current_device(&self) -> Option<i32> {
        let mut d = 0;
        // SAFETY: valid out-pointer.
        let ok = unsafe { (self.api.get_device)(&mut d) } == SUCCESS;
        (ok && (0..MAX_DEVICES as i32).contains(&d)).then_some(d)
    }

    /// The pool of `device`, made on first use (with `device` current).
    pub fn pool(&'static self, device: i32) -> Option<&'static Pool<Source>> {
        let cell = self.pools.get(device as usize)?;
        if let Some(p) = cell.get() {
            return Some(p);
        }
        let mut source = Source {
            device,
            integrated: self.is_integrated(device),
            api: self.api,
            captures: &self.captures,
            in_order: &self.in_order,
            vmm: None,
            group_cap: u64::MAX,
        };
        // The first runtime call also loads what the virtual memory functions live in.
        let (_, total) = source.mem_info().ok()?;
        if self.config.vmm {
            let vmm = (self.face.virtual_memory)(device);
            source.vmm = vmm.filter(|v| source.on_device(|| self.probed(device, v)));
        }
        let options = PoolOptions::from_config(self.config, total);
        source.group_cap = options.cap;
        let pool = cell.get_or_init(|| {
            log::info(format_args!(
                "dev{}: pool over {} of device memory, cap {}, {}",
                device,
                rocmguard_core::format_size(total),
                rocmguard_core::format_size(options.cap),
                if source.vmm.is_some() {
                    "virtual segments"
                } else {
                    "plain segments"
                }
            ));
            if let Some(above) = self.config.cap_above_device(total) {
                log::warn(format_args!("dev{}: {}", device, above));
            }
            Pool::new(source, options)
        });
        if !self.in_order.load(Ordering::Acquire) {
            self.start_reclaimer();
        }
        let mut devices = self.existing_pools().map(|(d, _)| d);
        let only = match (devices.next(), devices.next()) {
            (Some(d), None) => d,
            _ => -1,
        };
        self.only_pool.store(only, Ordering::Release);
        if only < 0 {
            self.leave_in_order(format_args!("uses a second device"));
        }
        Some(pool)
    }

    /// Whether `vmm` passes [`Vmm::probe`] on `device` (current); if not, says so once. Out of
    /// memory proves nothing (the device may be full for now): the pool copes with it as with
    /// any. The runtime's last error is left as it was.
    fn probed(&self, device: i32, vmm: &Vmm) -> bool {
        // SAFETY: no arguments.
        let before = unsafe { (self.api.peek_last_error)() };
        let result = vmm.probe();
        if result.is_err() {
            unsafe { (self.api.get_last_error)() };
            if before != SUCCESS {
                SHADOW_ERROR.with(|c| c.set(before));
            }
        }
        match result {
            Ok(()) | Err((_, OUT_OF_MEMORY)) => true,
            Err((step, code)) => {
                log::warn(format_args!(
                    "dev{}: virtual memory failed its first-use check ({}: code {}); plain segments",
                    device, step, code
                ));
                false
            }
        }
    }

    /// The program showed work outside one stream's order (`why`): from now on freed blocks
    /// wait for a synchronize, and blocks freed in order so far become free for any stream
    /// after one synchronize per device, before the caller hands the new stream out.
    pub fn leave_in_order(&'static self, why: std::fmt::Arguments) {
        if !self.in_order.swap(false, Ordering::AcqRel) {
            return;
        }
        for (_, pool) in self.existing_pools() {
            pool.reclaim();
        }
        self.start_reclaimer();
        log::info(format_args!(
            "{}: the program {}; freed blocks now wait for a device synchronize before reuse",
            self.face.name, why
        ));
    }

    /// Starts the thread that releases freed blocks in the background, once, where configured
    /// and needed (blocks wait in quarantine only once work is out of one order).
    fn start_reclaimer(&'static self) {
        if !self.config.reclaim || self.existing_pools().next().is_none() {
            return;
        }
        self.reclaimer.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("rocmguard-reclaim".into())
                .spawn(move || self.reclaim_loop());
            if spawned.is_err() {
                log::warn(format_args!(
                    "no background reclaim thread; freed blocks are reused after synchronizes on demand"
                ));
            }
        });
    }

    /// While freed blocks wait in a pool's quarantine, synchronizes the device (from this
    /// thread, so the program's threads do not stall) and releases them. Stops at exit.
    fn reclaim_loop(&'static self) {
        crate::process::reclaimer_started();
        loop {
            let mut synced = false;
            for (_, pool) in self.existing_pools() {
                if !pool.has_quarantine() || self.capture_active() {
                    continue;
                }
                let _permit = match crate::process::reclaim_permit() {
                    Some(p) => p,
                    None => return,
                };
                let _gate = self.sync_gate.read().unwrap_or_else(|e| e.into_inner());
                synced |= pool.reclaim();
            }
            if !synced {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    fn is_integrated(&self, device: i32) -> bool {
        (self.face.integrated)(device)
    }

    pub fn existing_pools(&self) -> impl Iterator<Item = (i32, &Pool<Source>)> {
        self.pools
            .iter()
            .enumerate()
            .filter_map(|(d, p)| p.get().map(|p| (d as i32, p)))
    }

    /// A pooled allocation on the current device.
    pub fn alloc(&'static self, ptr: *mut *mut c_void, size: usize) -> Option<i32> {
        let device = self.current_device()?;
        let pool = self.pool(device)?;
        PENDING_BEFORE.with(|c| c.set(None));
        let result = pool.alloc(size as u64);
        let code = match result {
            Ok(addr) => {
                // SAFETY: the caller's out-pointer, checked non-null by the hook.
                unsafe { *ptr = addr as *mut c_void };
                settle_errors(&self.api);
                crate::trace::alloc(device, addr, size as u64);
                SUCCESS
            }
            Err(AllocError::OverCap) => {
                SHADOW_ERROR.with(|c| c.set(OUT_OF_MEMORY));
                self.refused(device, pool, size as u64);
                OUT_OF_MEMORY
            }
            Err(AllocError::Source(e)) => {
                crate::trace::event(Action::Oom, device, 0, size as u64);
                e.code
            }
        };
        self.warn_near_cap(device, pool);
        Some(code)
    }

    /// Gives a block back to whichever pool holds it (the current device's first); `false` if
    /// none does.
    pub fn free(&self, ptr: *mut c_void) -> bool {
        let addr = ptr as u64;
        let only = self.only_pool.load(Ordering::Acquire);
        if let Some(pool) = self.pools.get(only as usize).and_then(|c| c.get()) {
            if let Some(size) = pool.free(addr) {
                crate::trace::free(only, addr, size);
                return true;
            }
        }
        let current = self.current_device().unwrap_or(0);
        let first = self
            .pools
            .get(current as usize)
            .and_then(|c| c.get())
            .map(|p| (current, p));
        let others = self.existing_pools().filter(|(d, _)| *d != current);
        for (device, pool) in first.into_iter().chain(others) {
            if let Some(size) = pool.free(addr) {
                crate::trace::free(device, addr, size);
                return true;
            }
        }
        false
    }

    /// Runs a pass-through allocation (`call`) counted against the cap of the current device,
    /// trimming our cache and retrying when the runtime is out of memory.
    pub fn external_alloc(
        &'static self,
        ptr: *mut *mut c_void,
        size: usize,
        mut call: impl FnMut() -> i32,
    ) -> i32 {
        match self.current_device() {
            Some(d) => self.external_alloc_on(d, Handed::Pointer, true, ptr, size, call),
            None => call(),
        }
    }

    /// [`Active::external_alloc`] on `device`, for what `call` hands back at `*ptr`; a refusal
    /// by the cap becomes the last error where `sticky`.
    pub fn external_alloc_on(
        &'static self,
        device: i32,
        handed: Handed,
        sticky: bool,
        ptr: *mut *mut c_void,
        size: usize,
        mut call: impl FnMut() -> i32,
    ) -> i32 {
        let pool = match self.pool(device) {
            Some(p) => p,
            None => return call(),
        };
        if pool.charge(size as u64).is_err() {
            if sticky {
                SHADOW_ERROR.with(|c| c.set(OUT_OF_MEMORY));
            }
            self.refused(device, pool, size as u64);
            return OUT_OF_MEMORY;
        }
        let mut code = call();
        let mut attempt = 0;
        while code == OUT_OF_MEMORY && attempt < self.config.retries {
            attempt += 1;
            pool.trim_to(0);
            crate::trace::event(Action::Retry, device, 0, size as u64);
            code = call();
            if code == SUCCESS && sticky {
                // The failed attempt left its error in the runtime's slot; the program
                // got what it asked for.
                // SAFETY: no arguments.
                unsafe { (self.api.get_last_error)() };
            }
        }
        if code == SUCCESS {
            // SAFETY: the runtime filled the caller's out-pointer.
            let p = unsafe { *ptr } as usize;
            self.external
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((handed, p), (device, size as u64));
            crate::trace::alloc(device, p as u64, size as u64);
        } else {
            pool.uncharge(size as u64);
        }
        code
    }

    /// Forgets a pass-through allocation once the runtime has freed it.
    pub fn external_free(&self, ptr: *mut c_void) {
        self.external_forget(Handed::Pointer, ptr)
    }

    /// Forgets a pass-through pointer or handle once the runtime has freed or released it.
    pub fn external_forget(&self, handed: Handed, ptr: *mut c_void) {
        let entry = self
            .external
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(handed, ptr as usize));
        if let Some((device, size)) = entry {
            if let Some(p) = self.pools.get(device as usize).and_then(|c| c.get()) {
                p.uncharge(size);
            }
            crate::trace::free(device, ptr as u64, size);
        }
    }

    /// `(free, total)` of the current device as the program should see them.
    pub fn mem_view(&'static self, device_free: u64, device_total: u64) -> (u64, u64) {
        let device = self.current_device();
        match device.and_then(|d| self.pool(d)) {
            Some(pool) => {
                let integrated = matches!(device, Some(d) if self.is_integrated(d));
                let free = crate::uma::device_free(device_free, device_total, integrated);
                let (free, total) = pool.view(free);
                // In a group, what the other members hold is not ours to take.
                let others = device.map_or(0, crate::group::others_use);
                let ours = pool.usage().0;
                (
                    free.min(total.saturating_sub(others.saturating_add(ours))),
                    total,
                )
            }
            None => (device_free, device_total),
        }
    }

    /// The total the program should see for `device` whose real total is `total`.
    pub fn total_for(&'static self, device: i32, total: u64) -> u64 {
        match self.pools.get(device as usize).and_then(|c| c.get()) {
            Some(p) => p.cap(),
            None => {
                let total = crate::uma::device_total(total, self.is_integrated(device));
                self.config.cap_for(total)
            }
        }
    }

    /// Before a library allocates a workspace of `bytes` outside our view: if the device has
    /// less than that free, our cache goes back to it. Returns the bytes released.
    pub fn make_room(&self, bytes: u64) -> u64 {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let ok = unsafe { (self.api.mem_get_info)(&mut free, &mut total) } == SUCCESS;
        if ok && (free as u64) < bytes {
            self.trim_current(0)
        } else {
            0
        }
    }

    /// Our cached memory of the current device goes back to the runtime.
    pub fn trim_current(&self, keep: u64) -> u64 {
        let device = self.current_device().unwrap_or(0);
        let released = match self.pools.get(device as usize).and_then(|c| c.get()) {
            Some(p) => p.trim_to(keep),
            None => 0,
        };
        if released > 0 {
            crate::trace::event(Action::Trim, device, 0, released);
        }
        released
    }

    /// Runs the program's own device synchronize, and lets the pool reuse what was freed
    /// before it.
    pub fn synchronize(&self, call: impl FnOnce() -> i32) -> i32 {
        let device = self.current_device().unwrap_or(0);
        let pool = self.pools.get(device as usize).and_then(|c| c.get());
        let mark = pool.map(|p| p.quarantine_mark());
        let code = call();
        if let (SUCCESS, Some(p), Some(m)) = (code, pool, mark) {
            p.synchronized(m);
        }
        code
    }

    /// The device was reset: its memory is gone, so is our pool's bookkeeping of it.
    pub fn device_reset(&self) {
        let device = self.current_device().unwrap_or(0);
        if let Some(p) = self.pools.get(device as usize).and_then(|c| c.get()) {
            p.forget_all();
        }
        self.external
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (d, _)| *d != device);
    }

    pub fn capture_began(&self, stream: usize) {
        self.capturing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream);
        self.captures.fetch_add(1, Ordering::AcqRel);
    }

    pub fn capture_ended(&self, stream: usize) {
        let mut c = self.capturing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = c.iter().position(|&s| s == stream) {
            c.swap_remove(i);
            self.captures.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub fn capture_active(&self) -> bool {
        self.captures.load(Ordering::Acquire) > 0
    }

    /// Logs the first refusal of each situation on a device and counts the rest.
    fn refused(&self, device: i32, pool: &Pool<Source>, size: u64) {
        crate::trace::event(Action::Oom, device, 0, size);
        let cap = pool.cap();
        let situation = if size > cap {
            Refusal::LargerThanCap
        } else {
            Refusal::OverCap
        };
        let counts = match self.refusals.get(device as usize) {
            Some(c) => c,
            None => return,
        };
        if counts[situation as usize].fetch_add(1, Ordering::Relaxed) > 0 {
            return;
        }
        let why = match situation {
            Refusal::OverCap => "over the cap".to_string(),
            Refusal::LargerThanCap => format!(
                "larger than the whole cap of {}",
                rocmguard_core::format_size(cap)
            ),
        };
        let invalid = if self.config.invalid_cap.is_some() {
            " (the cap is 0 because its value is invalid: see the error above)"
        } else {
            ""
        };
        log::warn(format_args!(
            "[VRAM Limit] refused {} on dev{}: {}{}; {}; further refusals like this are counted, not logged (summary at exit)",
            rocmguard_core::format_size(size),
            device,
            why,
            invalid,
            pool.stats().line(device)
        ));
    }

    /// One line per device that was refused more often than logged, for the exit: how many
    /// refusals followed the logged ones (and why the cap is 0 when its value was invalid).
    pub fn refusal_summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (device, counts) in self.refusals.iter().enumerate() {
            let over = counts[Refusal::OverCap as usize].load(Ordering::Relaxed);
            let larger = counts[Refusal::LargerThanCap as usize].load(Ordering::Relaxed);
            let logged = u64::from(over > 0) + u64::from(larger > 0);
            if over + larger > logged {
                let invalid = match &self.config.invalid_cap {
                    Some(e) => format!("; {}", e),
                    None => String::new(),
                };
                lines.push(format!(
                    "[VRAM Limit] dev{}: {} allocations refused in all ({} over the cap, {} larger than the whole cap), {} more than logged{}",
                    device,
                    over + larger,
                    over,
                    larger,
                    over + larger - logged,
                    invalid
                ));
            }
        }
        lines
    }

    fn warn_near_cap(&self, device: i32, pool: &Pool<Source>) {
        let (used, cap) = pool.usage();
        // A cap of 0 refuses everything: the refusal says so, "near" would be noise.
        let near = cap > 0 && used as f64 >= 0.95 * cap as f64;
        let flag = &self.warned[device as usize];
        if near && !flag.swap(true, Ordering::Relaxed) {
            crate::trace::event(Action::CapWarning, device, 0, used);
            log::warn(format_args!(
                "[VRAM Limit] Warning: near the cap; {}",
                pool.stats().line(device)
            ));
        } else if !near && (used as f64) < 0.9 * cap as f64 {
            flag.store(false, Ordering::Relaxed);
        }
    }

    /// Locks held across `fork()`, released in parent and child.
    pub fn fork_holds(&self) -> Vec<rocmguard_core::pool::PoolHold<'_>> {
        self.existing_pools().map(|(_, p)| p.hold()).collect()
    }

    /// In a forked child the parent's device memory is not ours: start empty.
    pub fn forget_after_fork(&self) {
        for (_, p) in self.existing_pools() {
            p.forget_all();
        }
        self.external
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Why the cap refused an allocation: each is logged once per device.
#[derive(Clone, Copy)]
enum Refusal {
    /// The request fits under the cap, but not with what the program already holds.
    OverCap = 0,
    /// The request alone is larger than the cap (every cap of 0 refuses so).
    LargerThanCap = 1,
}

/// A `GetProcAddress` answer (`code`, the function at `*pfn`), replaced by our hook where the
/// name is hooked.
///
/// # Safety
/// `symbol` and `pfn` are what the caller passed to the lookup that returned `code`.
pub unsafe fn hooked_answer(code: i32, symbol: *const c_char, pfn: *mut *mut c_void) -> i32 {
    if code == SUCCESS && !symbol.is_null() && !pfn.is_null() && !(*pfn).is_null() {
        let name = std::ffi::CStr::from_ptr(symbol).to_bytes();
        if let Some(hook) = crate::lookup_hook(name, *pfn as usize) {
            *pfn = hook as *mut c_void;
        }
    }
    code
}

/// The default stream: null, or CUDA's `cudaStreamLegacy` handle (1), which it stands for.
fn is_default_stream(stream: *mut c_void) -> bool {
    stream as usize <= 1
}

/// A device attribute holding the total memory, capped the way the runtime encodes it (bytes
/// clamped or truncated to `int`, or MiB), given the real total.
pub fn capped_attribute(
    value: i32,
    cap: impl Fn(u64) -> u64,
    real_total: impl Fn() -> Option<u64>,
) -> i32 {
    let total = match real_total() {
        Some(t) => t,
        None => return value,
    };
    let capped = cap(total);
    if capped >= total {
        value
    } else if value == i32::MAX && total > i32::MAX as u64 {
        capped.min(i32::MAX as u64) as i32
    } else if value == total as i32 {
        capped as i32
    } else if value as i64 == (total >> 20) as i64 {
        (capped >> 20) as i32
    } else {
        value
    }
}

/// After a pooled allocation succeeded: if one of our device calls failed on the way (and we
/// recovered), clear that error from the runtime and keep what was pending before it.
fn settle_errors(api: &Api) {
    if let Some(before) = PENDING_BEFORE.with(|c| c.take()) {
        // SAFETY: no arguments.
        unsafe { (api.get_last_error)() };
        if before != SUCCESS {
            SHADOW_ERROR.with(|c| c.set(before));
        }
    }
}

/// `GetLastError` as the program should see it: the runtime's, else one we hold for it.
pub fn last_error(real: i32, reset: bool) -> i32 {
    SHADOW_ERROR.with(|c| {
        let shadow = c.get();
        if reset {
            c.set(SUCCESS);
        }
        if real != SUCCESS {
            real
        } else {
            shadow
        }
    })
}
