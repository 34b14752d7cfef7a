//! What the hooks do, once for both faces (HIP and CUDA: the same shapes, the same codes for
//! success and out-of-memory). A `Guard` owns one runtime's per-device pools, its pass-through
//! allocations counted against the cap, and the bookkeeping that keeps the runtime's own
//! semantics: sticky last errors, stream capture, fork. One file per concern beside this one:
//! `source.rs` (the pool's device calls), `errors.rs` (sticky errors), `reuse.rs` (ordered reuse,
//! the reclaimer, captures), `cap.rs` (the capped view and refusals), `pause.rs` (`Malloc`, and
//! pausing the pool for new allocations).

use std::ffi::c_void;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use once_cell::sync::OnceCell;
use rocmguard_core::trace::Action;
use rocmguard_core::{AllocError, Config, DeviceSource, Pool, PoolOptions, Stats};

use crate::log;
use crate::vmm::Vmm;

mod cap;
mod device;
mod errors;
mod pause;
mod reuse;
mod source;

pub use cap::capped_attribute;
pub use errors::{failures, forget_pending, last_error};
use errors::{settle_errors, SHADOW_ERROR};
pub use pause::pause;
use reuse::{is_default_stream, Reclaimer};
pub use source::Source;

pub const SUCCESS: i32 = 0;
/// `hipErrorOutOfMemory` and `cudaErrorMemoryAllocation` alike.
pub const OUT_OF_MEMORY: i32 = 2;
/// `hip`/`cudaErrorSharedObjectSymbolNotFound`: the runtime function could not be found.
pub const SYMBOL_NOT_FOUND: i32 = 302;
/// `hipErrorPeerAccessAlreadyEnabled` / `cudaErrorPeerAccessAlreadyEnabled`.
const PEER_ACCESS_ALREADY_ENABLED: i32 = 704;

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
    pub device_count: GetDeviceFn,
    pub synchronize: VoidFn,
    pub get_last_error: VoidFn,
    pub peek_last_error: VoidFn,
    /// The face's runtime, to mark the guard's own calls into it (`hooks::calling`).
    pub runtime: &'static u8,
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
    /// Set once a pool exists and the runtime said it has one device (see `device.rs`).
    one_device: AtomicBool,
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
    /// Per device, the other devices the program enabled peer access to its memory for.
    peers: Vec<AtomicU64>,
    /// Devices whose cap warning has been printed.
    warned: Vec<AtomicBool>,
    /// Refusals per device and [`Refusal`] situation: the first of each is logged, the rest
    /// counted for the summary at exit (a program at a low cap may be refused thousands of times).
    refusals: Vec<[AtomicU64; 2]>,
    /// Held shared by the reclaimer while it synchronizes and exclusively while a capture
    /// begins, so a background synchronize never overlaps the start of a capture.
    sync_gate: std::sync::RwLock<()>,
    reclaimer: Reclaimer,
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
                    one_device: AtomicBool::new(false),
                    external: Mutex::new(Default::default()),
                    capturing: Mutex::new(Vec::new()),
                    captures: AtomicUsize::new(0),
                    in_order: AtomicBool::new(config.ordered_reuse),
                    peers: (0..MAX_DEVICES).map(|_| AtomicU64::new(0)).collect(),
                    warned: (0..MAX_DEVICES).map(|_| AtomicBool::new(false)).collect(),
                    refusals: (0..MAX_DEVICES)
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                        .collect(),
                    sync_gate: std::sync::RwLock::new(()),
                    reclaimer: Reclaimer::default(),
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

    /// `DeviceEnablePeerAccess(peer)`: the current device may now use `peer`'s memory, so
    /// every piece of `peer`'s virtual segments, mapped now or later, is made accessible to it
    /// as the runtime's own allocations are.
    pub fn peer_access(&'static self, peer: i32, pass: impl FnOnce() -> i32) -> i32 {
        let active = self.active();
        if let Some(a) = active {
            a.leave_in_order(format_args!("enabled peer access"));
        }
        let code = pass();
        if let (SUCCESS | PEER_ACCESS_ALREADY_ENABLED, Some(a)) = (code, active) {
            if let Some(d) = a.current_device() {
                a.grant_peer(peer, d);
            }
        }
        code
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
    /// The pool of `device`, made on first use (with `device` current).
    #[inline]
    pub fn pool(&'static self, device: i32) -> Option<&'static Pool<Source>> {
        match self.pools.get(device as usize)?.get() {
            Some(p) => Some(p),
            None => self.make_pool(device),
        }
    }

    /// [`Active::pool`] the first time, for a device in range.
    #[cold]
    fn make_pool(&'static self, device: i32) -> Option<&'static Pool<Source>> {
        let cell = &self.pools[device as usize];
        let mut source = Source {
            device,
            integrated: self.is_integrated(device),
            api: self.api,
            captures: &self.captures,
            in_order: &self.in_order,
            vmm: None,
            group_cap: u64::MAX,
            peers: &self.peers[device as usize],
        };
        // The first runtime call also loads what the virtual memory functions live in.
        let (_, total) = source.mem_info().ok()?;
        if self.config.vmm {
            let vmm = (self.face.virtual_memory)(device);
            // Exportable pieces where the runtime makes them (IPC of pooled blocks, `ipc.rs`);
            // else plain pieces, whose blocks the program cannot share.
            if vmm.is_some() {
                crate::platform::process::raise_open_files();
            }
            source.vmm = vmm.and_then(|v| {
                let shared = v.sharing();
                let shared = shared.filter(|s| source.on_device(|| self.probed(device, s, false)));
                shared.or_else(|| {
                    Some(v).filter(|v| source.on_device(|| self.probed(device, v, true)))
                })
            });
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
        self.count_devices();
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
    /// any. The runtime's last error is left as it was. A failure is said only where `say`.
    fn probed(&self, device: i32, vmm: &Vmm, say: bool) -> bool {
        // SAFETY: no arguments.
        let before = unsafe { (self.api.peek_last_error)() };
        let free = || {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: valid out-pointers; the device is current (the caller's `on_device`).
            let code = unsafe { (self.api.mem_get_info)(&mut free, &mut total) };
            (code == SUCCESS).then_some(free as u64)
        };
        let result = vmm.probe(&free);
        if result.is_err() {
            // SAFETY: the real hipGetLastError, no arguments: clears what the check left.
            unsafe { (self.api.get_last_error)() };
            if before != SUCCESS {
                SHADOW_ERROR.with(|c| c.set(before));
            }
        }
        match result {
            Ok(()) | Err((_, OUT_OF_MEMORY)) => true,
            Err((step, code)) => {
                if say {
                    log::warn(format_args!(
                        "dev{}: virtual memory failed its first-use check ({}: code {}); plain segments",
                        device, step, code
                    ));
                }
                false
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
        let since = failures();
        let result = pool.alloc(size as u64);
        let code = match result {
            Ok(addr) => {
                // SAFETY: the caller's out-pointer, checked non-null by the hook.
                unsafe { *ptr = addr as *mut c_void };
                settle_errors(&self.api, since);
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
                self.reclaimer.wake_if(|| pool.has_quarantine());
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
                self.reclaimer.wake_if(|| pool.has_quarantine());
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
        // The runtime may make it with its own exports (hipMallocManaged over hipMalloc): counted
        // here once, not again by our hooks.
        let mut call = || crate::hooks::calling(self.api.runtime, &mut call);
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

    /// Our cached memory of the current device goes back to the runtime. With virtual
    /// segments, checks that the device's free memory rose with it: a runtime that keeps
    /// released handles' memory until their whole address range is freed (reported on Linux;
    /// the first-use check catches the plain case) would make our trims give nothing back,
    /// which is said once.
    pub fn trim_current(&self, keep: u64) -> u64 {
        let device = self.current_device().unwrap_or(0);
        let pool = match self.pools.get(device as usize).and_then(|c| c.get()) {
            Some(p) => p,
            None => return 0,
        };
        let watch = pool.source().virtual_memory().is_some();
        let before = if watch {
            pool.source().free_now()
        } else {
            None
        };
        let released = pool.trim_to(keep);
        if released > 0 {
            crate::trace::event(Action::Trim, device, 0, released);
            if let (Some(before), Some(after)) = (before, pool.source().free_now()) {
                source::check_trim_returned(device, released, before, after);
            }
        }
        released
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

/// A `GetProcAddress` answer (`code`, the function at `*pfn`), replaced by our hook where the
/// name is hooked.
///
/// # Safety
/// `symbol` and `pfn` are what the caller passed to the lookup that returned `code`.
pub unsafe fn hooked_answer(code: i32, symbol: *const c_char, pfn: *mut *mut c_void) -> i32 {
    if code == SUCCESS && !symbol.is_null() && !pfn.is_null() && !(*pfn).is_null() {
        let name = std::ffi::CStr::from_ptr(symbol).to_bytes();
        if let Some(hook) = crate::hook_for(name, *pfn as usize) {
            *pfn = hook as *mut c_void;
        }
    }
    code
}
