//! The allocation loop and growth: serve from the pool; else reuse quarantined blocks after one
//! synchronize; else grow from the device within the cap, the headroom and the trim threshold;
//! on the device's out-of-memory trim everything cached, synchronize, back off and try again.

use std::sync::MutexGuard;

use super::state::{Backing, Fit, Kind, State};
use super::trim::Plain;
use super::{
    is_medium, round_up, timed, AllocError, Pool, GRANULE, MEDIUM_DIVISIONS, MEDIUM_REQUEST,
    MEDIUM_SEGMENT, MEDIUM_WASTE, SEGMENT, WARMUP_SEGMENT,
};
use crate::source::DeviceSource;

/// What one pass of the allocation loop came to.
enum Step {
    Served(u64),
    /// Blocks in quarantine would serve better once a synchronize releases them.
    Synchronize,
    Failed(AllocError),
}

/// A segment for the fewest medium requests of `rounded` bytes that waste at most
/// 1 / [`MEDIUM_WASTE`] of it on rounding, within [`MEDIUM_SEGMENT`]: 8 MiB ones get 8 MiB
/// each, 2.25 MiB ones 12 MiB for five, 9 MiB ones 18 MiB for two. Where no number of them does,
/// the fewest that waste least: 5.5 MiB ones 6 MiB each (a twelfth), not 20 MiB for three with
/// 3.5 MiB over.
fn medium_segment(rounded: u64) -> u64 {
    let counts = (1..)
        .map(|k| (k * rounded, round_up(k * rounded, SEGMENT)))
        .take_while(|&(_, size)| size <= MEDIUM_SEGMENT);
    // Waste as a fraction, compared by cross-multiplying (sizes are at most 20 MiB).
    let over = |(used, size): (u64, u64)| size - used;
    counts
        .clone()
        .find(|&c| over(c) * MEDIUM_WASTE <= c.1)
        .or_else(|| counts.min_by(|&a, &b| (over(a) * b.1).cmp(&(over(b) * a.1))))
        .map_or(round_up(rounded, SEGMENT), |(_, size)| size)
}

/// The size a request of `rounded` bytes takes in a plain segment: medium ones rounded up to
/// their size class (see [`MEDIUM_DIVISIONS`]), the rest as they are.
fn plain_size(rounded: u64) -> u64 {
    if !is_medium(rounded) {
        return rounded;
    }
    let power = 1 << (63 - rounded.leading_zeros());
    round_up(rounded, power / MEDIUM_DIVISIONS)
}

/// Whether the cap refuses `rounded` more bytes (or the size is past any device), counted as
/// an out-of-memory: the device is not asked.
#[inline(always)]
fn refused_by_cap(st: &mut State, rounded: u64) -> bool {
    let refused =
        st.live_total() + rounded > st.stats.cap || rounded == u64::MAX / GRANULE * GRANULE;
    if refused {
        st.stats.ooms += 1;
    }
    refused
}

fn is_retryable(e: AllocError) -> bool {
    match e {
        AllocError::OverCap => true,
        AllocError::Source(s) => s.out_of_memory,
    }
}

impl<S: DeviceSource> Pool<S> {
    /// A block of at least `size` bytes, 256-byte aligned: the retry loop around
    /// [`Pool::serve`].
    pub fn alloc(&self, size: u64) -> Result<u64, AllocError> {
        let (st, result) = self.retry_loop(self.lock_parked(), size);
        self.mirror(&st);
        result
    }

    /// The loop of [`Pool::alloc`]; it may let go of the lock while it synchronizes or backs
    /// off, and hands it back with the result. The first pass, which serves nearly every
    /// request, is straight-line here; the rest of the loop is out of line, so that what only
    /// it needs (thread-local addresses of the device calls, which LLVM hoists out of a loop
    /// into its entry) costs a served request nothing.
    fn retry_loop<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        size: u64,
    ) -> (MutexGuard<'a, State>, Result<u64, AllocError>) {
        let rounded = round_up(size.max(1), GRANULE);
        if !st.warmed {
            self.first_use(&mut st);
        }
        let rounded = if st.virtual_memory {
            rounded
        } else {
            plain_size(rounded)
        };
        if refused_by_cap(&mut st, rounded) {
            return (st, Err(AllocError::OverCap));
        }
        if st.parked.is_some() {
            if let Some(addr) = self.serve_parked(&mut st, rounded, size) {
                return (st, Ok(addr));
            }
            st.unpark();
        }
        if let Some(addr) = self.replayed(&mut st, rounded, size) {
            return (st, Ok(addr));
        }
        let kind = Kind::serving(rounded);
        match self.serve(&mut st, kind, rounded, size, false) {
            Step::Served(addr) => (st, Ok(addr)),
            step => self.retry_after(st, size, rounded, kind, step),
        }
    }

    #[cold]
    #[inline(never)]
    fn first_use(&self, st: &mut State) {
        st.warmed = true;
        st.virtual_memory = self.options.virtual_memory && self.source.has_virtual_memory();
        self.warm_up(st);
    }

    /// The rest of [`Pool::retry_loop`] after a first pass (of pool `kind`) that came to
    /// `step` without serving.
    #[cold]
    #[inline(never)]
    fn retry_after<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        size: u64,
        rounded: u64,
        kind: Kind,
        step: Step,
    ) -> (MutexGuard<'a, State>, Result<u64, AllocError>) {
        let mut attempt = 0;
        let mut synced = false;
        let mut first = Some((kind, step));
        loop {
            let (kind, step) = match first.take() {
                Some(first) => first,
                None => {
                    if refused_by_cap(&mut st, rounded) {
                        return (st, Err(AllocError::OverCap));
                    }
                    let kind = Kind::serving(rounded);
                    (kind, self.serve(&mut st, kind, rounded, size, synced))
                }
            };
            let error = match step {
                Step::Served(addr) => return (st, Ok(addr)),
                Step::Synchronize => {
                    synced = true;
                    st = self.synchronize_and_release(st, true);
                    continue;
                }
                Step::Failed(e) => e,
            };
            // The device refused virtual memory for a reason other than memory (before the first
            // piece, or later: ROCm 7.2's `hipMemSetAccess` refuses some later mappings,
            // rocm-systems#2516): plain segments from now on, the pieces mapped so far serving on.
            if st.virtual_memory && !is_retryable(error) {
                self.give_up_virtual_memory(&mut st);
                continue;
            }
            if kind == Kind::Small {
                // The small pool could not grow; free room in a large segment serves.
                if let Some(addr) = self.small_in_large(&mut st, rounded, size) {
                    return (st, Ok(addr));
                }
            }
            if attempt >= self.options.retries || !is_retryable(error) {
                st.stats.ooms += 1;
                return (st, Err(error));
            }
            attempt += 1;
            st.stats.retries += 1;
            st = self.synchronize_and_release(st, true);
            self.trim_locked(&mut st, 0, None, Plain::AllAtOnce);
            drop(st);
            std::thread::sleep(self.options.backoff * attempt);
            st = self.lock();
        }
    }

    /// One try at `rounded` bytes of pool `kind` (`synced`: the loop synchronized already).
    fn serve(&self, st: &mut State, kind: Kind, rounded: u64, size: u64, synced: bool) -> Step {
        // Quarantined blocks may fit far better than what is free now; a poor fit that a
        // synchronize could avoid splits blocks that later requests need whole.
        let quarantine_helps =
            !synced && st.stats.quarantined >= rounded && self.source.may_synchronize();
        // Near only matters for plain segments (a virtual one's free blocks are address space,
        // so this path asks nothing more of them); within a warm-up any block serves: it was
        // reserved to be used.
        let fit = if quarantine_helps {
            Fit::Close
        } else if st.virtual_memory || st.stats.peak_live < self.options.warmup {
            Fit::Any
        } else {
            Fit::Near
        };
        let oversize = self.options.oversize();
        // Memory already mapped first: mapping more while mapped memory sits idle churns. A
        // medium request takes it only by a close fit, else the best fit anywhere: split for
        // one, a large free block no longer holds the request that freed it, and the slivers
        // left beside caches replaced every token pin pieces (nmt_beam 1.055 -> 1.045, TUNE's
        // max; docs/benchmarks.md, session 23).
        let mapped = if st.virtual_memory {
            let fit = if is_medium(rounded) { Fit::Close } else { fit };
            st.find(kind, rounded, oversize, fit, Backing::Mapped)
        } else {
            None
        };
        if let Some(block) = mapped {
            // Mapped at its start: handed out there with no device call (what
            // `take_window` comes to for it, without looking at its pages three more times).
            st.stats.pool_hits += 1;
            return Step::Served(self.take(st, block, rounded, size));
        }
        let backing = st.backing_allowed();
        let found = st.find(kind, rounded, oversize, fit, backing).or_else(|| {
            // A far block serves rather than the device, where growing would set a new peak.
            let grow = round_up(rounded, SEGMENT);
            (fit == Fit::Near && self.growth_sets_peak_after_trim(st, grow))
                .then(|| st.find(kind, rounded, oversize, Fit::Any, backing))
                .flatten()
        });
        let error = match found {
            // Mapping memory costs device calls and memory: blocks in quarantine may do instead.
            Some(block) if !synced && st.stats.quarantined > 0 && !st.is_backed(block, rounded) => {
                return Step::Synchronize
            }
            Some(block) => match self.take_window(st, block, rounded, size) {
                Ok(addr) => return Step::Served(addr),
                Err(e) => e,
            },
            None if quarantine_helps => return Step::Synchronize,
            None => {
                // A small request grows a small segment even where that sets a new peak: free
                // room in a large segment would serve it for now, but a long-lived small block
                // there keeps the whole segment once the rest is freed (unet_infer's 64 KiB
                // weight at the end of an 18 MiB segment; docs/benchmarks.md, session 25).
                match self.grow(st, rounded) {
                    Ok(block) => {
                        let at = st.blocks[block as usize].addr;
                        match self.back(st, block, at, rounded, true) {
                            Ok(_) => return Step::Served(self.take(st, block, rounded, size)),
                            Err(e) => e,
                        }
                    }
                    Err(e) => e,
                }
            }
        };
        Step::Failed(error)
    }

    /// Hands out `rounded` bytes of free block `block` where they need the least memory mapped
    /// (a block that needs memory mapped may hold a stretch already mapped further in), once
    /// that memory is mapped; on failure the block stays as it was.
    fn take_window(
        &self,
        st: &mut State,
        block: u32,
        rounded: u64,
        size: u64,
    ) -> Result<u64, AllocError> {
        let at = st.best_window(block, rounded);
        let called = self.back(st, block, at, rounded, true)?;
        let addr = st.blocks[block as usize].addr;
        let block = if at == addr {
            block
        } else {
            st.split_free(block, at - addr)
        };
        st.stats.pool_hits += u64::from(!called);
        Ok(self.take(st, block, rounded, size))
    }

    /// Hands out free block `block` for `rounded` bytes of the `requested`.
    fn take(&self, st: &mut State, block: u32, rounded: u64, requested: u64) -> u64 {
        st.take(block, rounded, requested, self.options.oversize())
    }

    /// A small request served from free room in a large segment, if one has it: where the small
    /// pool cannot grow.
    fn small_in_large(&self, st: &mut State, rounded: u64, size: u64) -> Option<u64> {
        let oversize = self.options.oversize();
        let block = st.find(
            Kind::Large,
            rounded,
            oversize,
            Fit::Any,
            st.backing_allowed(),
        )?;
        let at = st.blocks[block as usize].addr;
        let called = self.back(st, block, at, rounded, true).ok()?;
        st.stats.pool_hits += u64::from(!called);
        Some(self.take(st, block, rounded, size))
    }

    /// Makes room for `need` more bytes from the device within the cap, the headroom and the
    /// trim threshold: cached memory that could not serve goes back first where keeping it would
    /// set a new peak or pass the threshold. Memory under `keep_range` stays.
    pub(super) fn make_room(
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
            let free = self.device_free(st).map_err(AllocError::Source)?;
            if free < need + self.options.headroom {
                return Err(AllocError::OverCap);
            }
        }
        Ok(())
    }

    /// What reserved (with external) may reach when the device gives `need` more bytes: the
    /// peak so far or [`PoolOptions::peak_slack`](super::PoolOptions::peak_slack) past the peak
    /// live, within the trim threshold and the cap.
    pub(super) fn growth_limit(&self, st: &State, need: u64) -> u64 {
        let cap = st.stats.cap;
        let threshold = (self.options.trim_threshold * cap as f64) as u64;
        let live = st.stats.peak_live;
        st.stats
            .peak_reserved
            .max(live.saturating_add(((live as f64 * self.options.peak_slack) as u64).max(SEGMENT)))
            .max(need)
            .min(threshold.max(need))
            .min(cap)
    }

    /// Whether taking `grow` more bytes would pass [`Pool::growth_limit`] with plain segments,
    /// even once every idle one went back (with virtual segments: never).
    fn growth_sets_peak_after_trim(&self, st: &State, grow: u64) -> bool {
        if st.virtual_memory {
            return false;
        }
        let held = st.stats.reserved + st.stats.external - st.idle_plain();
        held + grow > self.growth_limit(st, grow)
    }

    /// Adds a segment that can serve `rounded` bytes, within cap, headroom and threshold.
    fn grow(&self, st: &mut State, rounded: u64) -> Result<u32, AllocError> {
        let kind = Kind::serving(rounded);
        if st.virtual_memory {
            match self.grow_virtual(st, rounded, kind) {
                Some(block) => return Ok(block),
                None => self.give_up_virtual_memory(st),
            }
        }
        let minimal = round_up(rounded, SEGMENT);
        let preferred = if kind == Kind::Small {
            SEGMENT
        } else if rounded <= MEDIUM_REQUEST {
            medium_segment(rounded)
        } else {
            minimal
        };
        // A segment at or past max_split is never split, so it only grows that large if the
        // request needs it.
        let preferred = if preferred >= self.options.oversize() {
            minimal
        } else {
            preferred
        };
        // A small segment's growth keeps the newest idle medium segment: a small and a medium
        // size in turn would otherwise free and make a segment on every request.
        let keep = (kind == Kind::Small)
            .then(|| st.newest_idle_plain())
            .flatten();
        self.trim_before_growth(st, minimal, preferred, keep);
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
            let free = self.device_free(st).map_err(AllocError::Source)?;
            if free < minimal + self.options.headroom {
                return Err(AllocError::OverCap);
            }
            if free < size + self.options.headroom {
                size = minimal;
            }
        }
        let addr = match timed(&mut st.stats.device_us, || self.source.alloc(size)) {
            Ok(a) => a,
            Err(e) if e.out_of_memory && size > minimal => {
                st.stats.retries += 1;
                size = minimal;
                timed(&mut st.stats.device_us, || self.source.alloc(size))
                    .map_err(AllocError::Source)?
            }
            Err(e) => return Err(AllocError::Source(e)),
        };
        Ok(st.add_segment(addr, size, kind, None))
    }

    fn warm_up(&self, st: &mut State) {
        let warmup = round_up(self.options.warmup.min(st.stats.cap), SEGMENT);
        if warmup == 0 {
            return;
        }
        if st.virtual_memory {
            match self.grow_virtual(st, warmup, Kind::Large) {
                Some(block) => {
                    // Mapped now, handed out later: the mappings stay cached until needed.
                    let at = st.blocks[block as usize].addr;
                    match self.back(st, block, at, warmup, false) {
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
            match timed(&mut st.stats.device_us, || self.source.alloc(size)) {
                Ok(addr) => {
                    st.add_segment(addr, size, Kind::Large, None);
                }
                Err(_) => break,
            }
            left -= size;
        }
    }
}
