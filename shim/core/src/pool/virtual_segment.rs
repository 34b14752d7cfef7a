//! Virtual segments from the pool's side: reserving one, mapping device memory under a block
//! before it is handed out, counting blocks on its pages, and where in a free block a large
//! request needs the least memory mapped. The pages' own bookkeeping is in [`super::pages`].

use super::block::Block;
use super::pages::{Mapping, Pages};
use super::state::{Backing, Kind, Segment, State};
use super::{
    is_medium, round_up, timed, AllocError, Pool, ADDRESS_SPACE_PER_CAP, MEDIUM_REQUEST, NIL,
    PIECE_OF_PEAK, PIECE_SHARE, SEGMENT, SMALL_REQUEST, VIRTUAL_SEGMENT,
};
use crate::source::DeviceSource;

/// How much memory mapped for a `rounded`-byte request should reach, the request's own pages
/// with what is mapped ahead of them: a [`PIECE_SHARE`] of what the pool holds mapped, so a
/// pool growing to a peak maps it in a number of calls that grows with the logarithm of the
/// peak, not the peak, while the unused end costs at most that share of it. For a medium
/// request at least [`MEDIUM_REQUEST`] and at most `piece_size`
/// ([`super::PoolOptions::piece_size`]), so the next few medium requests land there too
/// (PyTorch's cache gives them 20 MiB segments); for a large one at most `piece`, the size it
/// is mapped in: pieces mapped ahead past the first sit idle, and a trim near the peak gives
/// them back to map them again elsewhere (model_swap_video, with 8 MiB pieces and 16 MiB
/// ahead: 1,220 pieces given back; with 8 MiB ahead, 33; docs/benchmarks.md, session 22).
pub(super) fn piece_target(reserved: u64, rounded: u64, piece_size: u64, piece: u64) -> u64 {
    let share = round_up(reserved / PIECE_SHARE, SEGMENT);
    if is_medium(rounded) {
        share.max(MEDIUM_REQUEST).min(piece_size)
    } else {
        share.min(piece)
    }
}

/// The size of the pieces a large request's memory is mapped in: `piece_size`, or
/// [`PIECE_OF_PEAK`] of the peak live if that is smaller (at least a page), so that a piece a
/// long-lived block pins costs a program of any size the same share of its peak.
pub(super) fn piece_size(peak_live: u64, piece_size: u64) -> u64 {
    piece_size.min(((peak_live / PIECE_OF_PEAK) & !(SEGMENT - 1)).max(SEGMENT))
}

impl State {
    /// The pages of segment `seg` if it is virtual.
    pub(super) fn pages(&self, seg: u32) -> Option<&Pages> {
        self.segments[seg as usize]
            .as_ref()
            .and_then(|s| s.pages.as_ref())
    }

    /// Which free blocks may serve: any while virtual memory is on; once it was given up with
    /// pieces still mapped, only what is mapped already (the device refused to map more).
    pub(super) fn backing_allowed(&self) -> Backing {
        if self.virtual_memory {
            Backing::Any
        } else {
            Backing::Mapped
        }
    }

    /// Whether the first `rounded` bytes of free block `block` have device memory behind them.
    pub(super) fn is_backed(&self, block: u32, rounded: u64) -> bool {
        self.backs(&self.blocks[block as usize], rounded)
    }

    pub(super) fn backs(&self, b: &Block, rounded: u64) -> bool {
        self.pages(b.seg)
            .map_or(true, |p| p.is_mapped(b.addr, rounded))
    }

    /// Counts block `i` (live or quarantined) on its virtual segment's pages.
    #[inline(always)]
    pub(super) fn pin_pages(&mut self, i: u32) {
        self.count_on_pages(i, |pages, addr, size| pages.pin(addr, size));
    }

    /// Takes back what [`State::pin_pages`] counted.
    #[inline(always)]
    pub(super) fn unpin_pages(&mut self, i: u32) {
        let begun = self.mappings.begun();
        self.count_on_pages(i, |pages, addr, size| pages.unpin(addr, size, begun));
    }

    #[inline(always)]
    fn count_on_pages(&mut self, i: u32, count: impl FnOnce(&mut Pages, u64, u64)) {
        let b = &self.blocks[i as usize];
        let (addr, size) = (b.addr, b.size);
        if let Some(Some(Segment {
            pages: Some(pages), ..
        })) = self.segments.get_mut(b.seg as usize)
        {
            count(pages, addr, size);
        }
    }

    /// Whether mapping `m` is idle and larger than a page: a small block placed in it would
    /// keep all of it mapped.
    pub(super) fn is_idle_run(&self, m: u32) -> bool {
        let m = self.mappings.get(m);
        m.size > SEGMENT && self.mapping_pages(m).is_idle(m)
    }

    /// Mappings no block touches.
    pub(super) fn idle_mappings(&self) -> Vec<u32> {
        let idle = self.mappings.numbered();
        let idle = idle.filter(|(_, m)| self.mapping_pages(m).is_idle(m));
        idle.map(|(i, _)| i).collect()
    }

    /// Whether idle mapping `m` may go back with no synchronize first.
    pub(super) fn is_settled(&self, m: u32) -> bool {
        let m = self.mappings.get(m);
        let settled_below = self.mappings.settled_below();
        self.mapping_pages(m).is_settled(m, settled_below)
    }

    fn mapping_pages(&self, m: &Mapping) -> &Pages {
        self.pages(m.seg)
            .expect("a mapping lies in a virtual segment")
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
    pub(super) fn remove_mapping(&mut self, m: u32) -> Mapping {
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

    /// The first address from `at` on, up to `last`, that lies in no idle mapping of several
    /// pages: where a small block keeps no such mapping for itself alone. `at` when there is none.
    fn past_idle_runs(&self, pages: &Pages, at: u64, last: u64) -> u64 {
        let mut to = at;
        loop {
            let m = pages.mapping_at(to);
            if m == NIL || !self.is_idle_run(m) {
                return to;
            }
            let end = self.mappings.get(m).addr + self.mappings.get(m).size;
            if end > last {
                return at;
            }
            to = end;
        }
    }

    /// In free block `i` of a virtual segment, where to place `rounded` bytes: for a large
    /// request where it needs the least memory mapped (the block's start, or where a mapping
    /// inside it begins or ends, the lowest of equals); for a small one past any idle piece of
    /// several pages at the block's start, where the block reaches that far. Nothing changes:
    /// the caller splits there once the memory is mapped, so a failed map leaves the block
    /// whole.
    pub(super) fn best_window(&self, i: u32, rounded: u64) -> u64 {
        let b = &self.blocks[i as usize];
        let (addr, size, seg) = (b.addr, b.size, b.seg);
        let pages = match self.pages(seg) {
            Some(p) => p,
            None => return addr,
        };
        if rounded <= SMALL_REQUEST {
            return self.past_idle_runs(pages, addr, addr + size - rounded);
        }
        // Medium requests map a page or two; looking for a better place costs more than that.
        if rounded <= MEDIUM_REQUEST || pages.is_mapped(addr, rounded) {
            return addr;
        }
        let unmapped = |at: u64| -> u64 { pages.unmapped(at, rounded).iter().map(|r| r.1).sum() };
        let mut best = (unmapped(addr), addr);
        for at in self
            .mappings
            .window_starts(seg, addr, size - rounded, rounded)
        {
            if best.0 == 0 {
                break;
            }
            let u = unmapped(at);
            if u < best.0 {
                best = (u, at);
            }
        }
        best.1
    }
}

impl<S: DeviceSource> Pool<S> {
    /// Makes sure device memory backs `[at, at + rounded)` of free block `block` (a no-op
    /// outside virtual segments). With `ahead`, the piece mapped for it may reach past it into
    /// the block's free address space ([`Pool::room_ahead`]). Returns whether it called the
    /// device. Changes no block.
    pub(super) fn back(
        &self,
        st: &mut State,
        block: u32,
        at: u64,
        rounded: u64,
        ahead: bool,
    ) -> Result<bool, AllocError> {
        let seg = st.blocks[block as usize].seg;
        // Small blocks are mapped a page a piece, with nothing ahead: what one pins is its page.
        let small = st.kind(block) == Kind::Small;
        let runs = match st.pages(seg) {
            Some(pages) if !pages.is_mapped(at, rounded) => pages.unmapped(at, rounded),
            _ => return Ok(false),
        };
        let piece = if small {
            SEGMENT
        } else {
            // A warm-up says how much the program will hold at least.
            let peak = st.stats.peak_live.max(self.options.warmup);
            piece_size(peak, self.options.piece_size)
        };
        // The trim keeps what lies under the window, so these runs stay the ones to map; it
        // removes no block of a virtual segment. What it takes in whole pieces moves here.
        let need = runs.iter().map(|r| r.1).sum();
        let whole = runs.iter().map(|r| (r.1 / piece) as usize).sum();
        self.keep_spares(st, piece, whole);
        let mapped = self
            .make_room(st, need, Some((at, rounded)))
            .and_then(|()| {
                let extra = if ahead && !small {
                    self.room_ahead(st, block, (at, rounded), need, &runs, piece)
                } else {
                    0
                };
                self.map_runs(st, seg, runs, extra, piece)
            });
        self.release_spares(st);
        mapped.map(|()| true)
    }

    /// Maps `runs` of virtual segment `seg` in pieces of `piece` bytes, the last run `extra`
    /// bytes longer if the device has them, and records the mappings.
    fn map_runs(
        &self,
        st: &mut State,
        seg: u32,
        mut runs: Vec<(u64, u64)>,
        extra: u64,
        piece: u64,
    ) -> Result<(), AllocError> {
        let last = runs.len() - 1;
        for (i, (addr, size)) in runs.iter_mut().enumerate() {
            let ask = if i == last { *size + extra } else { *size };
            let tokens = match self.map_run(st, *addr, ask, piece) {
                Ok(tokens) if i == last => {
                    *size += extra;
                    tokens
                }
                Ok(tokens) => tokens,
                // Memory mapped ahead is a bet; the device's refusal of it is not the request's
                // (a retry, as a plain segment's preferred size refused).
                Err(e) if i == last && extra > 0 && e.out_of_memory => {
                    st.stats.retries += 1;
                    self.map_run(st, *addr, *size, piece)
                        .map_err(AllocError::Source)?
                }
                Err(e) => return Err(AllocError::Source(e)),
            };
            let (addr, size) = (*addr, *size);
            for (i, token) in tokens.into_iter().enumerate() {
                let at = addr + i as u64 * piece;
                st.add_mapping(seg, (at, piece.min(addr + size - at)), token);
            }
        }
        Ok(())
    }

    /// How many bytes to map ahead, past the end of `runs` (the unmapped runs under the window
    /// `(at, rounded)` of a request, `need` bytes in all, mapped in pieces of `piece`), in free
    /// block `block`: what brings the mapping up to [`piece_target`], where those pages are
    /// unmapped and free, within [`Pool::growth_limit`] (nothing is trimmed for it) and the
    /// headroom.
    fn room_ahead(
        &self,
        st: &State,
        block: u32,
        (at, rounded): (u64, u64),
        need: u64,
        runs: &[(u64, u64)],
        piece: u64,
    ) -> u64 {
        let end = at + rounded;
        let target = piece_target(st.stats.reserved, rounded, self.options.piece_size, piece);
        let (run_at, run_size) = runs[runs.len() - 1];
        let run_end = run_at + run_size;
        let b = &st.blocks[block as usize];
        let block_end = (b.addr + b.size) & !(SEGMENT - 1);
        // Only a run that ends the request can grow on past it.
        if need >= target || run_end != round_up(end, SEGMENT) || run_end >= block_end {
            return 0;
        }
        let pages = match st.pages(b.seg) {
            Some(pages) => pages,
            None => return 0,
        };
        let want = (target - need).min(block_end - run_end);
        let free = match pages.unmapped(run_end, want).first() {
            Some(&(addr, size)) if addr == run_end => size,
            _ => return 0,
        };
        // Memory mapped ahead that set a new peak would sit idle at it.
        let used = st.stats.reserved + st.stats.external + need;
        let mut extra = free.min(self.growth_limit(st, need).saturating_sub(used));
        if self.options.headroom > 0 {
            let device_free = self.device_free(st).unwrap_or(0);
            extra = extra.min(device_free.saturating_sub(need + self.options.headroom));
        }
        extra & !(SEGMENT - 1)
    }

    /// A new virtual segment of pool `kind`, of [`ADDRESS_SPACE_PER_CAP`] times the cap (up to
    /// [`VIRTUAL_SEGMENT`]) and big enough for `rounded`, if the device reserves one; `None`
    /// turns virtual memory off for this pool. A device that refuses that much address space
    /// (none seen; ROCm's limit is untried) is asked for the cap, then for the request alone:
    /// a smaller segment beats losing virtual memory.
    pub(super) fn grow_virtual(&self, st: &mut State, rounded: u64, kind: Kind) -> Option<u32> {
        let cap = st.stats.cap;
        let space = cap
            .saturating_mul(ADDRESS_SPACE_PER_CAP)
            .min(VIRTUAL_SEGMENT);
        let need = round_up(rounded, SEGMENT);
        let mut tried = 0;
        for size in [space, cap.min(VIRTUAL_SEGMENT), need] {
            let size = round_up(size.max(need), SEGMENT);
            if size == tried {
                continue;
            }
            tried = size;
            if let Ok(addr) = timed(&mut st.stats.device_us, || self.source.reserve(size)) {
                let pages = Some(Pages::new(addr, size));
                return Some(st.add_segment(addr, size, kind, pages));
            }
        }
        None
    }

    /// After the device refused to reserve, or to map into virtual segments for a reason other
    /// than memory (some reserve address space but cannot back it; ROCm 7.2 refuses some later
    /// mappings): plain segments from now on; what is mapped serves on until it goes back.
    pub(super) fn give_up_virtual_memory(&self, st: &mut State) {
        st.virtual_memory = false;
        self.release_address_space(st);
    }
}
