//! The pool: device memory taken from a [`DeviceSource`] in 2 MiB-multiple segments and handed
//! out as 256-byte-aligned blocks, with a cap, headroom, trimming and retry on out-of-memory.
//!
//! All bookkeeping is on the host (an arena of block records keyed by device address); device
//! memory is never touched. One mutex guards a pool; a request the pool can serve takes it once
//! and makes no system call.
//!
//! Where the device offers virtual memory, a segment is a reserved address range instead, backed
//! by device memory only under its blocks (see [`pages`]), so free memory between live
//! blocks can go back to the device; elsewhere segments come from the device's plain allocator.
//!
//! Reuse is safe the way `hipFree` is: a freed block waits in quarantine until a device
//! synchronize that began after its free has completed, so work queued before the free can no
//! longer touch it. The pool synchronizes only when a request cannot be served otherwise, once
//! for the whole quarantine, and never while the source says a synchronize would do harm.
//! While the source says all work runs in one order ([`DeviceSource::in_order`]), a freed block
//! is free at once, as in a caching allocator's same-stream reuse; only giving its memory back
//! to the device waits for a synchronize.
//!
//! The files: `state` the pool's record and its invariants, `block` the blocks that tile a
//! segment, `index` the free blocks by size, `alloc` the allocation loop and growth,
//! `quarantine` frees and the synchronize that makes them reusable, `trim` giving memory back,
//! `spares` memory a trim moves to a request instead,
//! `virtual_segment` and `pages` segments backed page by page, `check` the invariants recounted,
//! `layout` what the pool holds, for tools that explain it.

mod alloc;
mod block;
mod check;
mod fast;
mod index;
mod layout;
mod pages;
mod quarantine;
mod spares;
mod state;
mod trim;
mod virtual_segment;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::config::Config;
use crate::source::{DeviceSource, SourceError};
use crate::stats::Stats;

use block::BlockState;
use state::State;
use trim::Plain;

pub use layout::{Layout, Unit};

/// A piece of device memory mapped in a virtual segment: `(addr, size, token)`, the token being
/// what the device returned for it.
pub type Piece = (u64, u64, u64);
/// Every block starts and ends on this boundary.
pub const GRANULE: u64 = 256;
/// Segments are multiples of this.
pub const SEGMENT: u64 = 2 << 20;
/// Requests up to this size share 2 MiB segments of their own (the small pool).
pub const SMALL_REQUEST: u64 = 1 << 20;
/// Requests up to this size get a segment of up to [`MEDIUM_SEGMENT`] that may hold several of
/// them, so the next few of the same size land in it too (see [`MEDIUM_WASTE`]).
pub const MEDIUM_REQUEST: u64 = 10 << 20;
/// Whether a request of `rounded` bytes is a medium one: past the small pool, up to
/// [`MEDIUM_REQUEST`].
pub(crate) fn is_medium(rounded: u64) -> bool {
    rounded > SMALL_REQUEST && rounded <= MEDIUM_REQUEST
}
pub const MEDIUM_SEGMENT: u64 = 20 << 20;
/// With plain segments, a medium request is rounded up to a multiple of 1 / n of the power of two
/// at or below it (PyTorch's `roundup_power2_divisions`): a tensor that grows a little each step
/// (a key/value cache grown by `torch.cat`) then fits the hole its last size left, where an
/// exact size strands each hole in a segment. Chosen on the TUNE traces (docs/benchmarks.md,
/// session 20: TUNE's max 1.060 -> 1.047 with 8; 1.138 with 4, 1.060 with 16; classes for large
/// requests too: 1.093).
pub const MEDIUM_DIVISIONS: u64 = 8;
/// A medium request's plain segment holds the fewest of them that waste at most 1 / n of it on
/// rounding: more would only save device calls, and each one freed late keeps the rest. Chosen
/// on the TUNE traces (docs/benchmarks.md, session 15: TUNE's max 1.060 with 1/16, 1.072 with
/// 1/8, 1.067 with 1/32, 1.085 with the segment of up to 20 MiB that wasted least, as before).
/// Where no number of them up to [`MEDIUM_SEGMENT`] wastes that little (of the size classes,
/// only 5.5 MiB: a twelfth in 6, 12 or 18 MiB), the fewest that waste least, not three in 20 MiB
/// with 3.5 MiB over: nmt_beam's 5.5 MiB caches, TUNE's plain max, 1.093 -> 1.083 (session 28,
/// chosen on the TUNE traces; TUNE's median unchanged, plain driver time 1.007 times).
pub const MEDIUM_WASTE: u64 = 16;
/// With plain segments, a free block of a segment larger than [`MEDIUM_SEGMENT`] serves a
/// request only if it is at most this many times the request, unless growing instead would set
/// a new peak: gru_asr's 486 MiB segment, split for two 35 MiB blocks, was kept whole by them
/// when a 704 MiB request came (its plain ratio 1.280 -> 1.049 with twice; docs/benchmarks.md,
/// session 15). 3/2 since session 21, chosen on the TUNE traces: w4_swap's 1.123 -> 1.075, the
/// TUNE max with it, at 9% more plain driver time (5/4: 1.078 at 33% more; 1: 1.061 at 61%).
/// `(numerator, denominator)`.
pub const NEAR_SHARE: (u64, u64) = (3, 2);
/// With plain segments, a segment no block uses serves a request past the small pool only if a
/// whole number of such requests leave at most 1 / n of it over: else one request keeps the rest
/// of it idle for as long as it lives (nmt_beam's 5.5 MiB caches each alone in a 16 MiB segment
/// made for two 8 MiB ones), while the idle segment goes back once growth needs the room and a
/// segment of the request's own size is made. Chosen on the TUNE traces
/// (docs/benchmarks.md, session 24: TUNE's plain median 1.039 -> 1.019, max 1.230 -> 1.150, at
/// 2.2 times the plain driver time; 1/4: max 1.178; 1/16: 1.169 at 2.9 times).
pub const IDLE_TILE: u64 = 8;
/// A piece mapped for a request reaches past it, into free address space, until it holds at
/// least this fraction (1 / n) of what the pool has mapped: see `virtual_segment::piece_target`.
pub const PIECE_SHARE: u64 = 64;
/// Pieces are at most 1 / n of the peak live (and at least a page): a piece left pinned by one
/// long-lived block then costs a small program no more of its peak than a large one. With a
/// fixed 16 MiB, seg_infer (1.5 GiB) reached 1.045 and gru_asr 1.030; with 1/32, 1.036 and
/// 1.016 (docs/benchmarks.md, session 14). 1/128 since session 22, chosen on the TUNE traces:
/// w4_swap (705 MiB, weights loaded afresh each step beside long-lived packed ones) 1.092 ->
/// 1.033 (1.030 on an H100), the TUNE max 1.092 -> 1.044 and its median 1.026 -> 1.019, at 1.9
/// times its modelled driver time (1/64: 1.051; 1/96: two traces over 1.05; 1/192: 1.035 at
/// 2.7 times).
pub const PIECE_OF_PEAK: u64 = 128;
/// Virtual segments reserve this much address space, or [`ADDRESS_SPACE_PER_CAP`] times the cap
/// if that is smaller: a few cost nothing.
pub const VIRTUAL_SEGMENT: u64 = 256 << 30;
/// Address space reserved per byte of the cap. Address space no bigger than the cap fills with
/// the holes between long-lived blocks before memory does: a request then found no window
/// though the cap had room, and a program failed under a cap it fits in without one (lora,
/// compiled_gpt: docs/benchmarks.md, session 11). Twice the cap did the same to w4_swap, a
/// model loaded afresh every step, with 8 MiB pieces (39 requests refused at its own peak;
/// session 21); address space costs nothing.
pub const ADDRESS_SPACE_PER_CAP: u64 = 4;
/// Warm-up reserves in segments of this size.
pub const WARMUP_SEGMENT: u64 = 256 << 20;

/// No block, segment or mapping: the end of a list.
const NIL: u32 = u32::MAX;

/// Runs one device call and adds its wall time to `total` (microseconds): what the pool's calls
/// cost the program, measured, beside the replay's model of them.
fn timed<T>(total: &mut u64, call: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = call();
    *total += start.elapsed().as_micros() as u64;
    out
}

/// `n` rounded up to a multiple of `to`, a power of two (granules, segments, pages): a mask,
/// not a division, since every pooled allocation rounds its size. Saturates at the largest
/// multiple.
#[inline]
fn round_up(n: u64, to: u64) -> u64 {
    debug_assert!(to.is_power_of_two());
    n.saturating_add(to - 1) & !(to - 1)
}

/// The pool's knobs, resolved for one device.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolOptions {
    pub cap: u64,
    pub headroom: u64,
    pub trim_threshold: f64,
    pub max_split: Option<u64>,
    pub retries: u32,
    pub warmup: u64,
    /// Use the device's virtual memory where it has it.
    pub virtual_memory: bool,
    /// Virtual segments map device memory in pieces of at most this size (a multiple of
    /// [`SEGMENT`]), so that a block left in a piece pins at most this much; smaller pieces cost
    /// more device calls.
    pub piece_size: u64,
    /// Reserved memory may pass the peak live by this share of it (`peak_slack`, default 1/64),
    /// and at least a page, before cached memory goes back to make room (and memory is mapped
    /// ahead only within it). At a reserved peak held to the live one, every request that finds
    /// no mapped room would map and unmap in each step of a loop (GPT-2 on an H100 with 8 MiB
    /// pieces: 1,593 unmaps in 35 steps; 195 with 2% of slack), and a program of a few MiB
    /// would take the small pool's page and give it back in turn with the large pool's. More
    /// keeps a program whose layout changes at its peak off the driver (seg_infer at 25%).
    pub peak_slack: f64,
    /// Backoff before retry n is n times this, so frees from other threads can land.
    pub backoff: Duration,
}

impl PoolOptions {
    /// The options for a device of `total` bytes.
    pub fn from_config(config: &Config, total: u64) -> PoolOptions {
        PoolOptions {
            cap: config.cap_for(total),
            headroom: config.headroom,
            trim_threshold: config.trim_threshold,
            max_split: config.max_split,
            retries: config.retries,
            warmup: config.warmup,
            virtual_memory: config.vmm,
            piece_size: config.piece_size,
            peak_slack: config.peak_slack,
            backoff: Duration::from_millis(1),
        }
    }

    /// Blocks of this size or more are never split (outside virtual segments).
    fn oversize(&self) -> u64 {
        self.max_split.unwrap_or(u64::MAX)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The cap or the headroom forbids it; the device was not asked.
    OverCap,
    /// The device refused, after the retries where it was out of memory; its own code.
    Source(SourceError),
}

/// The pool's lock, held; see [`Pool::hold`].
pub struct PoolHold<'a>(#[allow(dead_code)] MutexGuard<'a, State>);

pub struct Pool<S: DeviceSource> {
    source: S,
    options: PoolOptions,
    state: Mutex<State>,
    /// Live plus external bytes and the cap, mirrored out of the lock so callers can watch how
    /// near the cap the program is without taking it: equal to the state's whenever the lock is
    /// free.
    used: AtomicU64,
    cap: AtomicU64,
    /// Bytes waiting in quarantine, mirrored for [`Pool::reclaim`]'s callers, like `used`.
    quarantined: AtomicU64,
}

impl<S: DeviceSource> Pool<S> {
    pub fn new(source: S, options: PoolOptions) -> Pool<S> {
        Pool {
            source,
            used: AtomicU64::new(0),
            cap: AtomicU64::new(options.cap),
            quarantined: AtomicU64::new(0),
            state: Mutex::new(State::new(options.cap)),
            options,
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn options(&self) -> &PoolOptions {
        &self.options
    }

    /// `(live + external, cap)` without taking the lock (a moment old at most).
    pub fn usage(&self) -> (u64, u64) {
        (
            self.used.load(Ordering::Relaxed),
            self.cap.load(Ordering::Relaxed),
        )
    }

    fn mirror(&self, st: &State) {
        self.used.store(st.live_total(), Ordering::Relaxed);
        self.cap.store(st.stats.cap, Ordering::Relaxed);
        self.quarantined
            .store(st.stats.quarantined, Ordering::Relaxed);
    }

    /// Whether freed blocks wait for a synchronize (read without the lock; a moment old).
    pub fn has_quarantine(&self) -> bool {
        self.quarantined.load(Ordering::Relaxed) > 0
    }

    /// The state with no block parked (see `fast`): what every caller but an allocation or a
    /// free sees.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock_parked();
        st.unpark();
        st
    }

    /// The state as it is, a block perhaps parked.
    #[inline]
    fn lock_parked(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the state half-changed in a way that matters more than
        // losing the pool, and the hooks catch panics at their boundary; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Size the program asked for, if `addr` is a live block of this pool.
    pub fn live_size(&self, addr: u64) -> Option<u64> {
        let st = self.lock();
        st.live.get(&addr).map(|&i| st.blocks[i as usize].requested)
    }

    /// Whether `addr` begins a plain segment: memory the runtime allocated with that base, so
    /// its own handles for it (IPC) name exactly that address.
    pub fn starts_plain_segment(&self, addr: u64) -> bool {
        let st = self.lock();
        st.segments
            .iter()
            .flatten()
            .any(|s| s.addr == addr && s.pages.is_none())
    }

    /// Runs `f` on each piece of device memory mapped in the pool's virtual segments, as
    /// `(addr, size)`, with the pool locked: no piece is mapped or given back meanwhile, so a
    /// setting the source applies to new pieces from before this call reaches every piece.
    pub fn for_each_mapping(&self, mut f: impl FnMut(u64, u64)) {
        let st = self.lock();
        for m in st.mappings.iter() {
            f(m.addr, m.size);
        }
    }

    /// For sharing a block with another process: the start of the live block holding `addr`
    /// (as [`Pool::block_containing`]) and, when it lies in a virtual segment, the mapped pieces
    /// under it in address order (contiguous, covering the block). `None` for a block of a
    /// plain segment or no live block.
    pub fn pieces_under(&self, addr: u64) -> Option<(u64, Vec<Piece>)> {
        let (start, _) = self.block_containing(addr)?;
        let st = self.lock();
        let i = *st.live.get(&start)?;
        let b = &st.blocks[i as usize];
        st.pages(b.seg)?;
        let end = start + b.size.max(1);
        let mut pieces: Vec<Piece> = st
            .mappings
            .iter()
            .filter(|m| m.addr < end && start < m.addr + m.size)
            .map(|m| (m.addr, m.size, m.token))
            .collect();
        pieces.sort_unstable();
        Some((start, pieces))
    }

    /// The live block that `addr` points into, its start or any byte the program asked for:
    /// `(start, size asked for)`, how the runtime describes its own allocations to
    /// `hipMemGetAddressRange`. `None` when no live block of this pool holds `addr`.
    pub fn block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let st = self.lock();
        if let Some(&i) = st.live.get(&addr) {
            return Some((addr, st.blocks[i as usize].requested));
        }
        let seg = st
            .segments
            .iter()
            .flatten()
            .find(|s| s.addr <= addr && addr - s.addr < s.size)?;
        let mut i = seg.first;
        while i != NIL {
            let b = &st.blocks[i as usize];
            if addr - b.addr < b.size {
                let live = b.state == BlockState::Live && addr - b.addr < b.requested.max(1);
                return live.then_some((b.addr, b.requested));
            }
            i = b.next;
        }
        None
    }

    /// The cap in bytes: what the program may hold from the pool and outside it together.
    pub fn cap(&self) -> u64 {
        self.lock().stats.cap
    }

    /// Changes the cap; cached segments above it go back to the device at once, live blocks
    /// stay (allocations fail until the program is under the new cap again).
    pub fn set_cap(&self, cap: u64) {
        let mut st = self.lock();
        st.stats.cap = cap;
        let keep = cap.saturating_sub(st.stats.external);
        self.trim_locked(&mut st, keep, None, Plain::AsNeeded);
        self.mirror(&st);
    }

    /// Counts `bytes` the program holds outside the pool against the cap.
    pub fn charge(&self, bytes: u64) -> Result<(), AllocError> {
        let mut st = self.lock();
        if st.live_total() + bytes > st.stats.cap {
            st.stats.ooms += 1;
            return Err(AllocError::OverCap);
        }
        let over = (st.stats.reserved + st.stats.external + bytes).saturating_sub(st.stats.cap);
        if over > 0 {
            let keep = st.stats.reserved.saturating_sub(over);
            self.trim_locked(&mut st, keep, None, Plain::AsNeeded);
        }
        st.stats.external += bytes;
        self.mirror(&st);
        Ok(())
    }

    pub fn uncharge(&self, bytes: u64) {
        let mut st = self.lock();
        st.stats.external = st.stats.external.saturating_sub(bytes);
        self.mirror(&st);
    }

    /// `(free, total)` as the program should see them: total is the cap; free is what the cap
    /// still allows, never more than the device has free plus what the pool caches.
    pub fn view(&self, device_free: u64) -> (u64, u64) {
        let st = self.lock();
        let by_cap = st.stats.cap.saturating_sub(st.live_total());
        let cached = st.stats.reserved - st.stats.live.min(st.stats.reserved);
        (by_cap.min(device_free.saturating_add(cached)), st.stats.cap)
    }

    /// Holds the pool's lock until dropped: taken before `fork()` so the child never inherits
    /// it locked by a thread that does not exist there.
    pub fn hold(&self) -> PoolHold<'_> {
        PoolHold(self.lock())
    }

    pub fn stats(&self) -> Stats {
        let st = self.lock();
        let mut s = st.stats;
        // Free blocks of virtual segments are address space: what the cap allows bounds them.
        s.largest_free = st.largest_free().min(s.cap.saturating_sub(st.live_total()));
        s
    }

    /// Turns the free index's in-place updates and the replay of requests (`fast`) off or on
    /// (on by default): for tests that compare placement with and without them, which must be
    /// the same.
    #[doc(hidden)]
    pub fn set_in_place_updates(&self, on: bool) {
        let mut st = self.lock();
        for index in st.index.iter_mut() {
            index.in_place = on;
        }
    }

    /// How many splits and merges left the free index alone (see `index::FreeIndex::refile`).
    #[doc(hidden)]
    pub fn in_place_updates(&self) -> u64 {
        // Counters only: a parked block stays parked.
        self.lock_parked()
            .index
            .iter()
            .map(|index| index.in_place_hits)
            .sum()
    }

    /// How many requests were served as remembered (see `fast`).
    #[doc(hidden)]
    pub fn replayed_requests(&self) -> u64 {
        self.lock_parked()
            .index
            .iter()
            .map(|index| index.fast.hits)
            .sum()
    }

    /// Forgets every block and segment without touching the device: after a device reset the
    /// memory is gone already.
    pub fn forget_all(&self) {
        let mut st = self.lock();
        st.forget_all();
        self.mirror(&st);
    }
}
