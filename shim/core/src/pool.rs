//! The pool: device memory taken from a [`DeviceSource`] in 2 MiB-multiple segments and handed
//! out as 256-byte-aligned blocks, with a cap, headroom, trimming and retry on out-of-memory.
//!
//! All bookkeeping is on the host (an arena of block records keyed by device address); device
//! memory is never touched. One mutex guards a pool; a request the pool can serve takes it once
//! and makes no system call.
//!
//! Where the device offers virtual memory, a segment is a reserved address range instead, backed
//! by device memory only under its blocks (see [`crate::arena`]), so free memory between live
//! blocks can go back to the device; elsewhere segments come from the device's plain allocator.
//!
//! Reuse is safe the way `hipFree` is: a freed block waits in quarantine until a device
//! synchronize that began after its free has completed, so work queued before the free can no
//! longer touch it. The pool synchronizes only when a request cannot be served otherwise, once
//! for the whole quarantine, and never while the source says a synchronize would do harm.
//! While the source says all work runs in one order ([`DeviceSource::in_order`]), a freed block
//! is free at once, as in a caching allocator's same-stream reuse; only giving its memory back
//! to the device waits for a synchronize.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::arena::{Mapping, Mappings, Pages};
use crate::config::Config;
use crate::hash::AddrMap;
use crate::index::FreeIndex;
use crate::source::{DeviceSource, SourceError};
use crate::stats::Stats;

/// Every block starts and ends on this boundary.
pub const GRANULE: u64 = 256;
/// Segments are multiples of this.
pub const SEGMENT: u64 = 2 << 20;
/// Requests up to this size share 2 MiB segments of their own (the small pool).
pub const SMALL_REQUEST: u64 = 1 << 20;
/// Requests up to this size get a segment of up to [`MEDIUM_SEGMENT`] that holds a whole number of
/// them, so the next few of the same size land in it too.
pub const MEDIUM_REQUEST: u64 = 10 << 20;
pub const MEDIUM_SEGMENT: u64 = 20 << 20;
/// Virtual segments map device memory in runs of at most this size, so that a block left in a
/// run pins at most this much (smaller runs cost more device calls).
pub const MAPPING_CHUNK: u64 = 128 << 20;
/// Virtual segments reserve this much address space (or the cap, if smaller): a few cost nothing.
pub const VIRTUAL_SEGMENT: u64 = 256 << 30;
/// Warm-up reserves in segments of this size.
pub const WARMUP_SEGMENT: u64 = 256 << 20;
/// A block of `max_split` or more serves a request only if it wastes at most this much.
const OVERSIZE_SLACK: u64 = 20 << 20;

pub(crate) const NIL: u32 = u32::MAX;

fn round_up(n: u64, to: u64) -> u64 {
    n.checked_add(to - 1)
        .map_or(u64::MAX / to * to, |m| m / to * to)
}

/// A segment of at most [`MEDIUM_SEGMENT`] for a medium request that wastes the least of itself
/// on rounding when filled with requests of the same size (9 MiB ones get 18 MiB, not 20).
fn medium_segment(rounded: u64) -> u64 {
    let mut best = (u64::MAX, round_up(rounded, SEGMENT));
    for k in 1..=(MEDIUM_SEGMENT / rounded).max(1) {
        let size = round_up(k * rounded, SEGMENT);
        // Waste per byte, compared exactly: (size - k * rounded) / size.
        let waste = (size - k * rounded) * (MEDIUM_SEGMENT / SEGMENT) / (size / SEGMENT);
        if waste <= best.0 {
            best = (waste, size);
        }
    }
    best.1
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
            backoff: Duration::from_millis(1),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The cap or the headroom forbids it; the device was not asked.
    OverCap,
    /// The device refused, after the retries where it was out of memory; its own code.
    Source(SourceError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockState {
    Free,
    Live,
    Quarantined,
    Vacant,
}

/// One block of a segment. Blocks of a segment tile it exactly, in address order through
/// `prev`/`next`; free ones are also linked into their size class through `link_*`.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: u64,
    /// What the program asked for (live blocks only); `size` is it rounded up.
    pub requested: u64,
    pub seg: u32,
    pub prev: u32,
    pub next: u32,
    pub link_prev: u32,
    pub link_next: u32,
    pub state: BlockState,
}

struct Segment {
    addr: u64,
    size: u64,
    small: bool,
    /// Order of creation: trims release the oldest first.
    birth: u64,
    first: u32,
    /// A virtual segment's pages; `None` for memory from the plain allocator.
    pages: Option<Pages>,
}

struct State {
    blocks: Vec<Block>,
    vacant_blocks: Vec<u32>,
    segments: Vec<Option<Segment>>,
    vacant_segments: Vec<u32>,
    /// [small, large].
    index: [FreeIndex; 2],
    live: AddrMap<u32>,
    /// Freed blocks in order of their free, each with its sequence number.
    quarantine: VecDeque<(u64, u32)>,
    next_free_seq: u64,
    /// One past the sequence number of the last block freed straight to the free lists (in
    /// order), and the mark of the last synchronize completed: memory freed in order may go
    /// back to the device only once the second has passed the first.
    freed_in_order: u64,
    synced_mark: u64,
    births: u64,
    /// Runs of device memory behind virtual segments.
    mappings: Mappings,
    /// Whether new segments are virtual: decided at first use, off for good if the device
    /// refuses.
    virtual_memory: bool,
    warmed: bool,
    stats: Stats,
}

/// The pool's lock, held; see [`Pool::hold`].
pub struct PoolHold<'a>(#[allow(dead_code)] MutexGuard<'a, State>);

pub struct Pool<S: DeviceSource> {
    source: S,
    options: PoolOptions,
    state: Mutex<State>,
    /// Live plus external bytes and the cap, mirrored out of the lock so callers can watch how
    /// near the cap the program is without taking it.
    used: AtomicU64,
    cap: AtomicU64,
    /// Bytes waiting in quarantine, mirrored for [`Pool::reclaim`]'s callers.
    quarantined: AtomicU64,
}

impl<S: DeviceSource> Pool<S> {
    pub fn new(source: S, options: PoolOptions) -> Pool<S> {
        let stats = Stats {
            cap: options.cap,
            ..Stats::default()
        };
        Pool {
            source,
            used: AtomicU64::new(0),
            cap: AtomicU64::new(options.cap),
            quarantined: AtomicU64::new(0),
            options,
            state: Mutex::new(State {
                blocks: Vec::new(),
                vacant_blocks: Vec::new(),
                segments: Vec::new(),
                vacant_segments: Vec::new(),
                index: [FreeIndex::new(), FreeIndex::new()],
                live: AddrMap::default(),
                quarantine: VecDeque::new(),
                next_free_seq: 0,
                freed_in_order: 0,
                synced_mark: 0,
                births: 0,
                mappings: Mappings::default(),
                virtual_memory: false,
                warmed: false,
                stats,
            }),
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

    /// Synchronizes the device once and makes every block freed before it reusable: what a
    /// background thread calls so that allocations rarely have to wait for the device.
    /// Returns whether it synchronized.
    /// Also what makes every free block safe for any stream when the program leaves in-order
    /// work behind.
    pub fn reclaim(&self) -> bool {
        let st = self.lock();
        if !st.unsettled() || !self.source.may_synchronize() {
            return false;
        }
        let st = self.synchronize_and_release(st);
        self.mirror(&st);
        true
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the state half-changed in a way that matters more than
        // losing the pool, and the hooks catch panics at their boundary; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `size` bytes, 256-byte aligned. The retry loop: serve from the pool;
    /// else reuse quarantined blocks after one synchronize; else grow from the device; on the
    /// device's out-of-memory trim everything cached, synchronize, back off and try again.
    pub fn alloc(&self, size: u64) -> Result<u64, AllocError> {
        let rounded = round_up(size.max(1), GRANULE);
        let mut attempt = 0;
        let mut synced = false;
        let mut st = self.lock();
        if !st.warmed {
            st.warmed = true;
            st.virtual_memory = self.options.virtual_memory && self.source.has_virtual_memory();
            self.warm_up(&mut st);
        }
        let oversize = self.options.max_split.unwrap_or(u64::MAX);
        loop {
            if st.live_total() + rounded > st.stats.cap || rounded == u64::MAX / GRANULE * GRANULE {
                st.stats.ooms += 1;
                return Err(AllocError::OverCap);
            }
            // Quarantined blocks may fit far better than what is free now; a poor fit that a
            // synchronize could avoid splits blocks that later requests need whole.
            let quarantine_helps =
                !synced && st.stats.quarantined >= rounded && self.source.may_synchronize();
            let kind = st.kind_for(rounded);
            // Memory already mapped first: mapping more while mapped memory sits idle churns.
            let virt = st.virtual_memory;
            let found = st
                .find(kind, rounded, oversize, quarantine_helps, virt)
                .or_else(|| {
                    virt.then(|| st.find(kind, rounded, oversize, quarantine_helps, false))
                        .flatten()
                });
            // Mapping memory costs device calls and memory: blocks in quarantine may do instead.
            if let Some(block) = found {
                if !synced && !st.is_backed(block, rounded) && st.stats.quarantined > 0 {
                    synced = true;
                    st = self.synchronize_and_release(st);
                    continue;
                }
            }
            // A block that needs memory mapped may hold a stretch already mapped further in.
            let found = found.map(|block| st.best_window(block, rounded));
            let error = match found {
                Some(block) => match self.back(&mut st, block, rounded) {
                    Ok(called) => {
                        st.stats.pool_hits += u64::from(!called);
                        return Ok(self.take(&mut st, block, rounded, size));
                    }
                    Err(e) => e,
                },
                None if quarantine_helps => {
                    synced = true;
                    st = self.synchronize_and_release(st);
                    continue;
                }
                None => {
                    // A new small segment that would set a new peak while a large one has room
                    // churns: freed at the next growth of the other kind, made again after.
                    if kind == 0 && self.growth_sets_peak(&st, SEGMENT) {
                        if let Some(block) = st.smallest_idle_segment() {
                            st.stats.pool_hits += 1;
                            return Ok(self.take(&mut st, block, rounded, size));
                        }
                    }
                    match self.grow(&mut st, rounded) {
                        Ok(block) => match self.back(&mut st, block, rounded) {
                            Ok(_) => return Ok(self.take(&mut st, block, rounded, size)),
                            Err(e) => e,
                        },
                        Err(e) => e,
                    }
                }
            };
            if st.virtual_memory && st.mappings.is_empty() && !is_retryable(error) {
                self.give_up_virtual_memory(&mut st);
                continue;
            }
            if kind == 0 {
                // The small pool could not grow; free room in a large segment serves.
                if let Some(addr) = self.small_in_large(&mut st, rounded, size, oversize) {
                    return Ok(addr);
                }
            }
            if attempt >= self.options.retries || !is_retryable(error) {
                st.stats.ooms += 1;
                return Err(error);
            }
            attempt += 1;
            st.stats.retries += 1;
            st = self.synchronize_and_release(st);
            self.trim_locked(&mut st, 0, None);
            drop(st);
            std::thread::sleep(self.options.backoff * attempt);
            st = self.lock();
        }
    }

    /// Takes back a block. `None` when `addr` is not a live block of this pool (the caller
    /// passes it on to the runtime). Returns the size the program asked for.
    pub fn free(&self, addr: u64) -> Option<u64> {
        let mut st = self.lock();
        let i = st.live.remove(&addr)?;
        let seq = st.next_free_seq;
        st.next_free_seq += 1;
        let b = &mut st.blocks[i as usize];
        b.state = BlockState::Quarantined;
        let (requested, size) = (b.requested, b.size);
        st.stats.live -= requested;
        st.stats.frees += 1;
        if self.source.in_order() {
            st.freed_in_order = seq + 1;
            let emptied = st.release_block(i);
            self.trim_past_threshold(&mut st, emptied);
        } else {
            st.quarantine.push_back((seq, i));
            st.stats.quarantined += size;
        }
        self.mirror(&st);
        Some(requested)
    }

    /// Size the program asked for, if `addr` is a live block of this pool.
    pub fn live_size(&self, addr: u64) -> Option<u64> {
        let st = self.lock();
        st.live.get(&addr).map(|&i| st.blocks[i as usize].requested)
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

    /// A mark for [`Pool::synchronized`]: blocks freed before it become reusable once a device
    /// synchronize that started after the mark has completed.
    pub fn quarantine_mark(&self) -> u64 {
        self.lock().next_free_seq
    }

    /// Tells the pool that a device synchronize started after `mark` has completed (the program's
    /// own `hipDeviceSynchronize`, say), so blocks freed before the mark are free again.
    pub fn synchronized(&self, mark: u64) {
        let mut st = self.lock();
        st.synced_mark = st.synced_mark.max(mark);
        self.release_quarantine(&mut st, mark);
    }

    /// Returns whole free segments to the device, oldest first, until at most
    /// `min_bytes_to_hold` stay reserved. Returns the bytes released.
    pub fn trim_to(&self, min_bytes_to_hold: u64) -> u64 {
        let st = self.lock();
        let mut st = self.synchronize_and_release(st);
        let released = self.trim_locked(&mut st, min_bytes_to_hold, None);
        if min_bytes_to_hold == 0 {
            self.release_address_space(&mut st);
        }
        released
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
        self.mirror(&st);
        let keep = cap.saturating_sub(st.stats.external);
        self.trim_locked(&mut st, keep, None);
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
            self.trim_locked(&mut st, keep, None);
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
        s.largest_free = st.index[0]
            .largest(&st.blocks)
            .max(st.index[1].largest(&st.blocks))
            .min(s.cap.saturating_sub(st.live_total()));
        s
    }

    /// Forgets every block and segment without touching the device: after a device reset the
    /// memory is gone already.
    pub fn forget_all(&self) {
        let mut st = self.lock();
        let stats = Stats {
            cap: st.stats.cap,
            peak_live: st.stats.peak_live,
            peak_reserved: st.stats.peak_reserved,
            external: 0,
            ..st.stats
        };
        *st = State {
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            index: [FreeIndex::new(), FreeIndex::new()],
            live: AddrMap::default(),
            quarantine: VecDeque::new(),
            next_free_seq: st.next_free_seq,
            freed_in_order: 0,
            synced_mark: st.synced_mark,
            births: st.births,
            mappings: Mappings::default(),
            virtual_memory: st.virtual_memory,
            warmed: true,
            stats: Stats {
                live: 0,
                reserved: 0,
                quarantined: 0,
                ..stats
            },
        };
        self.mirror(&st);
    }

    fn synchronize_and_release<'a>(&'a self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if !st.unsettled() || !self.source.may_synchronize() {
            return st;
        }
        let mut st = st;
        let mark = st.next_free_seq;
        st.stats.syncs += 1;
        drop(st);
        let synced = self.source.synchronize().is_ok();
        let mut st = self.lock();
        if synced {
            st.synced_mark = st.synced_mark.max(mark);
            self.release_quarantine(&mut st, mark);
        }
        st
    }

    fn release_quarantine(&self, st: &mut State, mark: u64) {
        let mut emptied = false;
        while let Some(&(seq, i)) = st.quarantine.front() {
            if seq >= mark {
                break;
            }
            st.quarantine.pop_front();
            st.stats.quarantined -= st.blocks[i as usize].size;
            emptied |= st.release_block(i);
        }
        self.trim_past_threshold(st, emptied);
    }

    /// After blocks were released (`emptied`: some segment or mapping may now be idle): gives
    /// memory back while reserved is past the trim threshold.
    fn trim_past_threshold(&self, st: &mut State, emptied: bool) {
        let threshold = (self.options.trim_threshold * st.stats.cap as f64) as u64;
        if emptied && st.stats.reserved + st.stats.external > threshold {
            let keep = threshold.saturating_sub(st.stats.external);
            self.trim_locked(st, keep, None);
        }
    }

    /// Hands out free block `block` for `rounded` bytes of the `requested`.
    fn take(&self, st: &mut State, block: u32, rounded: u64, requested: u64) -> u64 {
        let oversize = self.options.max_split.unwrap_or(u64::MAX);
        let addr = st.take(block, rounded, requested, oversize);
        self.mirror(st);
        addr
    }

    /// Makes sure device memory backs the first `rounded` bytes of free block `block` (a no-op
    /// outside virtual segments). Returns whether it called the device.
    fn back(&self, st: &mut State, block: u32, rounded: u64) -> Result<bool, AllocError> {
        let (addr, seg) = {
            let b = &st.blocks[block as usize];
            (b.addr, b.seg)
        };
        let runs = match st.pages(seg) {
            Some(pages) if !pages.is_mapped(addr, rounded) => pages.unmapped(addr, rounded),
            _ => return Ok(false),
        };
        // The trim keeps what lies under the block, so these runs stay the ones to map.
        let need = runs.iter().map(|r| r.1).sum();
        self.make_room(st, need, Some((addr, rounded)))?;
        for (addr, size) in runs {
            let tokens = self
                .source
                .map(addr, size, MAPPING_CHUNK)
                .map_err(AllocError::Source)?;
            for (i, token) in tokens.into_iter().enumerate() {
                let at = addr + i as u64 * MAPPING_CHUNK;
                st.add_mapping(seg, (at, MAPPING_CHUNK.min(addr + size - at)), token);
            }
        }
        Ok(true)
    }

    /// Makes room for `need` more bytes from the device within the cap, the headroom and the
    /// trim threshold: cached memory that could not serve goes back first where keeping it would
    /// set a new peak or pass the threshold. Memory under `keep_range` stays.
    fn make_room(
        &self,
        st: &mut State,
        need: u64,
        keep_range: Option<(u64, u64)>,
    ) -> Result<(), AllocError> {
        self.trim_before_growth(st, need, need, keep_range);
        let cap = st.stats.cap;
        if need > cap.saturating_sub(st.stats.reserved + st.stats.external) {
            return Err(AllocError::OverCap);
        }
        if self.options.headroom > 0 {
            let (free, _) = self.source.mem_info().map_err(AllocError::Source)?;
            if free < need + self.options.headroom {
                return Err(AllocError::OverCap);
            }
        }
        Ok(())
    }

    /// Before taking `grow` more bytes from the device (of which `need` are indispensable),
    /// gives back cached memory, except under `keep_range`, where keeping it would set a new
    /// peak or pass the trim threshold or the cap.
    fn trim_before_growth(
        &self,
        st: &mut State,
        need: u64,
        grow: u64,
        keep_range: Option<(u64, u64)>,
    ) {
        let limit = self.growth_limit(st, need);
        if st.stats.reserved + st.stats.external + grow > limit {
            let keep = limit.saturating_sub(st.stats.external + grow);
            self.trim_locked(st, keep, keep_range);
        }
    }

    /// What reserved (with external) may reach when the device gives `need` more bytes: the
    /// peak so far, within the trim threshold and the cap.
    fn growth_limit(&self, st: &State, need: u64) -> u64 {
        let cap = st.stats.cap;
        let threshold = (self.options.trim_threshold * cap as f64) as u64;
        st.stats
            .peak_reserved
            .max(need)
            .min(threshold.max(need))
            .min(cap)
    }

    /// Whether taking `grow` more bytes from the device would pass [`Pool::growth_limit`].
    fn growth_sets_peak(&self, st: &State, grow: u64) -> bool {
        st.stats.reserved + st.stats.external + grow > self.growth_limit(st, grow)
    }

    /// A small request served from free room in a large segment, if one has it.
    fn small_in_large(
        &self,
        st: &mut State,
        rounded: u64,
        size: u64,
        oversize: u64,
    ) -> Option<u64> {
        let block = st.find(1, rounded, oversize, false, false)?;
        let called = self.back(st, block, rounded).ok()?;
        st.stats.pool_hits += u64::from(!called);
        Some(self.take(st, block, rounded, size))
    }

    /// A new virtual segment big enough for the whole cap (up to [`VIRTUAL_SEGMENT`]) and for
    /// `rounded`, if the device reserves one; `None` turns virtual memory off for this pool.
    fn grow_virtual(&self, st: &mut State, rounded: u64) -> Option<u32> {
        let size = round_up(rounded.max(st.stats.cap.min(VIRTUAL_SEGMENT)), SEGMENT);
        let addr = self.source.reserve(size).ok()?;
        Some(st.add_segment(addr, size, false, Some(Pages::new(addr, size))))
    }

    /// After the device refused to reserve, or to map into virtual segments before ever mapping
    /// one (some reserve address space but cannot back it): plain segments from now on.
    fn give_up_virtual_memory(&self, st: &mut State) {
        st.virtual_memory = false;
        self.release_address_space(st);
    }

    /// Adds a segment that can serve `rounded` bytes, within cap, headroom and threshold.
    fn grow(&self, st: &mut State, rounded: u64) -> Result<u32, AllocError> {
        if st.virtual_memory {
            match self.grow_virtual(st, rounded) {
                Some(block) => return Ok(block),
                None => self.give_up_virtual_memory(st),
            }
        }
        let small = rounded <= SMALL_REQUEST;
        let minimal = round_up(rounded, SEGMENT);
        let preferred = if small {
            SEGMENT
        } else if rounded <= MEDIUM_REQUEST {
            medium_segment(rounded)
        } else {
            minimal
        };
        // A segment at or past max_split is never split, so it only grows that large if the
        // request needs it.
        let preferred = if preferred >= self.options.max_split.unwrap_or(u64::MAX) {
            minimal
        } else {
            preferred
        };
        self.trim_before_growth(st, minimal, preferred, None);
        let cap = st.stats.cap;
        let room = cap.saturating_sub(st.stats.reserved + st.stats.external);
        let mut size = if preferred <= room {
            preferred
        } else {
            minimal
        };
        if size > room {
            return Err(AllocError::OverCap);
        }
        if self.options.headroom > 0 {
            let (free, _) = self.source.mem_info().map_err(AllocError::Source)?;
            if free < minimal + self.options.headroom {
                return Err(AllocError::OverCap);
            }
            if free < size + self.options.headroom {
                size = minimal;
            }
        }
        let addr = match self.source.alloc(size) {
            Ok(a) => a,
            Err(e) if e.out_of_memory && size > minimal => {
                st.stats.retries += 1;
                size = minimal;
                self.source.alloc(size).map_err(AllocError::Source)?
            }
            Err(e) => return Err(AllocError::Source(e)),
        };
        Ok(st.add_segment(addr, size, small, None))
    }

    fn warm_up(&self, st: &mut State) {
        let warmup = round_up(self.options.warmup.min(st.stats.cap), SEGMENT);
        if warmup == 0 {
            return;
        }
        if st.virtual_memory {
            match self.grow_virtual(st, warmup) {
                Some(block) => {
                    // Mapped now, handed out later: the mappings stay cached until needed.
                    match self.back(st, block, warmup) {
                        Err(e) if st.mappings.is_empty() && !is_retryable(e) => {
                            self.give_up_virtual_memory(st);
                        }
                        _ => return,
                    }
                }
                None => self.give_up_virtual_memory(st),
            }
        }
        let mut left = warmup;
        while left > 0 {
            let size = left.min(WARMUP_SEGMENT);
            match self.source.alloc(size) {
                Ok(addr) => {
                    st.add_segment(addr, size, false, None);
                }
                Err(_) => break,
            }
            left -= size;
        }
    }

    /// Gives device memory back, oldest first, until at most `keep` bytes stay reserved: wholly
    /// free segments and mappings that no block touches, except mappings under `keep_range`.
    /// Returns the bytes released.
    fn trim_locked(&self, st: &mut State, keep: u64, keep_range: Option<(u64, u64)>) -> u64 {
        let mut released = 0;
        if st.stats.reserved > keep {
            // Mappings first, from the top of the address space down, so what stays mapped is
            // packed low where the large free block that big requests take from begins; then
            // plain segments, oldest first.
            let mut idle: Vec<(u64, Idle)> = st
                .segments
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                .filter(|(_, s)| {
                    let b = &st.blocks[s.first as usize];
                    s.pages.is_none() && b.state == BlockState::Free && b.size == s.size
                })
                .map(|(i, s)| (s.birth, Idle::Segment(i as u32)))
                .collect();
            let overlaps = |m: u32| {
                let m = st.mappings.get(m);
                keep_range.map_or(false, |(a, n)| m.addr < a + n && a < m.addr + m.size)
            };
            idle.extend(
                st.mappings
                    .idle()
                    .into_iter()
                    .filter(|&m| !overlaps(m))
                    .map(|m| (u64::MAX - st.mappings.get(m).addr, Idle::Mapping(m))),
            );
            idle.sort_unstable_by_key(|&(key, what)| (matches!(what, Idle::Segment(_)), key));
            for (_, what) in idle {
                if st.stats.reserved <= keep {
                    break;
                }
                // If the device refuses memory back, it is no longer ours to hand out either.
                let size = match what {
                    Idle::Segment(seg) => {
                        // The runtime's free waits for the device itself.
                        let (addr, size) = st.remove_segment(seg);
                        let _ = self.source.free(addr, size);
                        size
                    }
                    Idle::Mapping(_) if !self.settle_for_unmap(st) => continue,
                    Idle::Mapping(m) => {
                        let m = st.remove_mapping(m);
                        let _ = self.source.unmap(m.addr, m.size, m.token);
                        m.size
                    }
                };
                st.stats.source_frees += 1;
                st.stats.trims += 1;
                released += size;
            }
        }
        released
    }

    /// Before unmapping memory freed in order: the device may still be working on it (unmap,
    /// unlike the runtime's free, does not wait), so synchronize first, with the lock held as
    /// it is rare. False if that cannot be done now.
    fn settle_for_unmap(&self, st: &mut State) -> bool {
        if st.freed_in_order <= st.synced_mark {
            return true;
        }
        if !self.source.may_synchronize() {
            return false;
        }
        let mark = st.next_free_seq;
        st.stats.syncs += 1;
        if self.source.synchronize().is_err() {
            return false;
        }
        st.synced_mark = mark;
        true
    }

    /// Gives back the address space of virtual segments with nothing mapped in them.
    fn release_address_space(&self, st: &mut State) {
        let empty: Vec<u32> = st
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.as_ref()
                    .and_then(|s| s.pages.as_ref())
                    .map_or(false, |p| p.is_unmapped())
            })
            .map(|(i, _)| i as u32)
            .collect();
        for seg in empty {
            let (addr, size) = st.remove_segment(seg);
            let _ = self.source.unreserve(addr, size);
        }
    }
}

/// Device memory a trim can give back.
#[derive(Clone, Copy)]
enum Idle {
    Segment(u32),
    Mapping(u32),
}

fn is_retryable(e: AllocError) -> bool {
    match e {
        AllocError::OverCap => true,
        AllocError::Source(s) => s.out_of_memory,
    }
}

impl State {
    /// Whether a synchronize would make something safe: blocks in quarantine, or blocks freed
    /// in order since the last one.
    fn unsettled(&self) -> bool {
        !self.quarantine.is_empty() || self.freed_in_order > self.synced_mark
    }

    /// The free block of the smallest wholly free plain segment of at most [`MEDIUM_SEGMENT`]
    /// (a larger one would be pinned by a small block).
    fn smallest_idle_segment(&self) -> Option<u32> {
        self.segments
            .iter()
            .flatten()
            .filter(|s| {
                let b = &self.blocks[s.first as usize];
                s.pages.is_none()
                    && s.size <= MEDIUM_SEGMENT
                    && b.state == BlockState::Free
                    && b.size == s.size
            })
            .min_by_key(|s| s.size)
            .map(|s| s.first)
    }

    /// Live bytes counted against the cap: the pool's blocks in use and external charges.
    fn live_total(&self) -> u64 {
        self.stats.live + self.stats.external
    }

    fn new_block(&mut self, b: Block) -> u32 {
        match self.vacant_blocks.pop() {
            Some(i) => {
                self.blocks[i as usize] = b;
                i
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    fn vacate(&mut self, i: u32) {
        self.blocks[i as usize].state = BlockState::Vacant;
        self.vacant_blocks.push(i);
    }

    fn kind(&self, i: u32) -> usize {
        let seg = self.blocks[i as usize].seg as usize;
        match &self.segments[seg] {
            Some(s) if s.small => 0,
            _ => 1,
        }
    }

    /// Which free index serves `rounded` bytes: 0 the small pool, 1 the large one. Virtual
    /// segments serve every size.
    fn kind_for(&self, rounded: u64) -> usize {
        if rounded <= SMALL_REQUEST && !self.virtual_memory {
            0
        } else {
            1
        }
    }

    /// A free block of pool `kind` for `rounded` bytes; with `close_fit`, only one that wastes
    /// at most an eighth of a large request; with `backed`, only one with device memory behind
    /// it. Blocks of `oversize` or more are not split (except in virtual segments, whose free
    /// blocks are address space).
    fn find(
        &self,
        kind: usize,
        rounded: u64,
        oversize: u64,
        close_fit: bool,
        backed: bool,
    ) -> Option<u32> {
        let slack = if close_fit && rounded > SMALL_REQUEST {
            rounded / 8
        } else {
            u64::MAX
        };
        self.index[kind].find(&self.blocks, rounded, |b| {
            let splits = b.size < oversize || self.pages(b.seg).is_some();
            (splits || (rounded >= oversize && b.size - rounded <= OVERSIZE_SLACK))
                && b.size - rounded <= slack
                && (!backed || self.backs(b, rounded))
        })
    }

    /// Whether the first `rounded` bytes of free block `block` have device memory behind them.
    fn is_backed(&self, block: u32, rounded: u64) -> bool {
        self.backs(&self.blocks[block as usize], rounded)
    }

    fn backs(&self, b: &Block, rounded: u64) -> bool {
        self.pages(b.seg)
            .map_or(true, |p| p.is_mapped(b.addr, rounded))
    }

    /// The pages of segment `seg` if it is virtual.
    fn pages(&self, seg: u32) -> Option<&Pages> {
        self.segments[seg as usize]
            .as_ref()
            .and_then(|s| s.pages.as_ref())
    }

    /// Counts (`pin`) or uncounts a live or quarantined block on its virtual segment's pages.
    fn touch(&mut self, i: u32, pin: bool) {
        let b = &self.blocks[i as usize];
        let (addr, size) = (b.addr, b.size);
        if let Some(Some(Segment {
            pages: Some(pages), ..
        })) = self.segments.get_mut(b.seg as usize)
        {
            if pin {
                pages.pin(&mut self.mappings, addr, size);
            } else {
                pages.unpin(&mut self.mappings, addr, size);
            }
        }
    }

    /// Records device memory mapped at `run` of virtual segment `seg`.
    fn add_mapping(&mut self, seg: u32, run: (u64, u64), token: u64) {
        if let Some(Some(Segment {
            pages: Some(pages), ..
        })) = self.segments.get_mut(seg as usize)
        {
            self.mappings.add(pages, seg, run, token);
        }
        let s = &mut self.stats;
        s.reserved += run.1;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        s.source_allocs += 1;
    }

    /// Forgets mapping `m` (no block touches it); the caller gives it back to the device.
    fn remove_mapping(&mut self, m: u32) -> Mapping {
        let seg = self.mappings.get(m).seg;
        let pages = match &mut self.segments[seg as usize] {
            Some(Segment {
                pages: Some(pages), ..
            }) => pages,
            _ => unreachable!("a mapping lies in a virtual segment"),
        };
        let m = self.mappings.remove(pages, m);
        self.stats.reserved -= m.size;
        m
    }

    /// In free block `i` of a virtual segment, where `rounded` bytes (a large request) need the
    /// least memory mapped: at its start or where a mapped stretch inside it begins. Returns the free block
    /// that starts there (split off `i` when it is not the start).
    fn best_window(&mut self, i: u32, rounded: u64) -> u32 {
        let (addr, size, seg) = {
            let b = &self.blocks[i as usize];
            (b.addr, b.size, b.seg)
        };
        let pages = match self.pages(seg) {
            Some(p) => p,
            None => return i,
        };
        // Small requests map a page or two; looking for a better place costs more than that.
        if rounded <= MEDIUM_REQUEST || pages.is_mapped(addr, rounded) {
            return i;
        }
        let unmapped = |at: u64| -> u64 { pages.unmapped(at, rounded).iter().map(|r| r.1).sum() };
        let mut best = (unmapped(addr), addr);
        for at in self
            .mappings
            .stretch_starts(pages, seg, addr, size - rounded)
        {
            if best.0 == 0 {
                break;
            }
            let u = unmapped(at);
            if u < best.0 {
                best = (u, at);
            }
        }
        if best.1 == addr {
            return i;
        }
        self.split_free(i, best.1 - addr)
    }

    /// Splits free block `i` after `offset` bytes; returns the second part.
    fn split_free(&mut self, i: u32, offset: u64) -> u32 {
        let kind = self.kind(i);
        self.index[kind].remove(&mut self.blocks, i);
        let rest = self.carve(i, offset);
        self.index[kind].insert(&mut self.blocks, i);
        self.index[kind].insert(&mut self.blocks, rest);
        rest
    }

    /// Cuts block `i` (out of the index) after `offset` bytes; returns the second part, free and
    /// not yet in the index.
    fn carve(&mut self, i: u32, offset: u64) -> u32 {
        let (addr, size, seg, next) = {
            let b = &self.blocks[i as usize];
            (b.addr, b.size, b.seg, b.next)
        };
        let rest = self.new_block(Block {
            addr: addr + offset,
            size: size - offset,
            requested: 0,
            seg,
            prev: i,
            next,
            link_prev: NIL,
            link_next: NIL,
            state: BlockState::Free,
        });
        if next != NIL {
            self.blocks[next as usize].prev = rest;
        }
        let b = &mut self.blocks[i as usize];
        b.next = rest;
        b.size = offset;
        rest
    }

    /// Hands out free block `i` for `rounded` bytes, splitting off the rest unless the block
    /// is oversize.
    fn take(&mut self, i: u32, rounded: u64, requested: u64, oversize: u64) -> u64 {
        let kind = self.kind(i);
        self.index[kind].remove(&mut self.blocks, i);
        let (addr, size, seg) = {
            let b = &self.blocks[i as usize];
            (b.addr, b.size, b.seg)
        };
        if size - rounded >= GRANULE && (size < oversize || self.pages(seg).is_some()) {
            let rest = self.carve(i, rounded);
            self.index[kind].insert(&mut self.blocks, rest);
        }
        let b = &mut self.blocks[i as usize];
        b.state = BlockState::Live;
        b.requested = requested;
        self.touch(i, true);
        self.live.insert(addr, i);
        let s = &mut self.stats;
        s.live += requested;
        s.peak_live = s.peak_live.max(s.live);
        s.allocs += 1;
        addr
    }

    /// Marks a quarantined block free and merges it with free neighbours. Returns whether its
    /// segment is now wholly free.
    fn release_block(&mut self, mut i: u32) -> bool {
        let kind = self.kind(i);
        self.touch(i, false);
        self.blocks[i as usize].state = BlockState::Free;
        let prev = self.blocks[i as usize].prev;
        if prev != NIL && self.blocks[prev as usize].state == BlockState::Free {
            self.index[kind].remove(&mut self.blocks, prev);
            self.merge_into(prev, i);
            i = prev;
        }
        let next = self.blocks[i as usize].next;
        if next != NIL && self.blocks[next as usize].state == BlockState::Free {
            self.index[kind].remove(&mut self.blocks, next);
            self.merge_into(i, next);
        }
        self.index[kind].insert(&mut self.blocks, i);
        let b = &self.blocks[i as usize];
        (b.prev == NIL && b.next == NIL) || self.pages(b.seg).is_some()
    }

    /// Appends `right` (the next block in address order) to `left` and drops `right`.
    fn merge_into(&mut self, left: u32, right: u32) {
        let (size, next) = {
            let r = &self.blocks[right as usize];
            (r.size, r.next)
        };
        let l = &mut self.blocks[left as usize];
        l.size += size;
        l.next = next;
        if next != NIL {
            self.blocks[next as usize].prev = left;
        }
        self.vacate(right);
    }

    /// Adds a fresh segment as one free block; returns the block. A virtual one (with `pages`)
    /// holds no memory yet.
    fn add_segment(&mut self, addr: u64, size: u64, small: bool, pages: Option<Pages>) -> u32 {
        let seg = match self.vacant_segments.pop() {
            Some(s) => s,
            None => {
                self.segments.push(None);
                (self.segments.len() - 1) as u32
            }
        };
        let first = self.new_block(Block {
            addr,
            size,
            requested: 0,
            seg,
            prev: NIL,
            next: NIL,
            link_prev: NIL,
            link_next: NIL,
            state: BlockState::Free,
        });
        self.births += 1;
        let real = pages.is_none();
        self.segments[seg as usize] = Some(Segment {
            addr,
            size,
            small,
            birth: self.births,
            first,
            pages,
        });
        self.index[if small { 0 } else { 1 }].insert(&mut self.blocks, first);
        if !real {
            return first;
        }
        let s = &mut self.stats;
        s.reserved += size;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        s.source_allocs += 1;
        first
    }

    /// Unlinks a wholly free segment; returns its address and size for the device.
    fn remove_segment(&mut self, seg: u32) -> (u64, u64) {
        let s = self.segments[seg as usize]
            .take()
            .expect("trim only picks existing segments");
        let kind = if s.small { 0 } else { 1 };
        self.index[kind].remove(&mut self.blocks, s.first);
        self.vacate(s.first);
        self.vacant_segments.push(seg);
        if s.pages.is_none() {
            self.stats.reserved -= s.size;
        }
        (s.addr, s.size)
    }
}
