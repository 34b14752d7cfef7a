//! Virtual segments from the pool's side: reserving one, mapping device memory under a block
//! before it is handed out, counting blocks on its pages, and where in a free block a large
//! request needs the least memory mapped. The pages' own bookkeeping is in [`super::pages`].

use super::block::Block;
use super::pages::{Mapping, Pages};
use super::state::{Kind, Segment, State};
use super::{round_up, AllocError, Pool, MEDIUM_REQUEST, NIL, SEGMENT, VIRTUAL_SEGMENT};
use crate::source::DeviceSource;

impl State {
    /// The pages of segment `seg` if it is virtual.
    pub(super) fn pages(&self, seg: u32) -> Option<&Pages> {
        self.segments[seg as usize]
            .as_ref()
            .and_then(|s| s.pages.as_ref())
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
    pub(super) fn pin_pages(&mut self, i: u32) {
        self.count_on_pages(i, Pages::pin);
    }

    /// Takes back what [`State::pin_pages`] counted.
    pub(super) fn unpin_pages(&mut self, i: u32) {
        self.count_on_pages(i, Pages::unpin);
    }

    fn count_on_pages(
        &mut self,
        i: u32,
        count: fn(&mut Pages, &mut super::pages::Mappings, u64, u64),
    ) {
        let b = &self.blocks[i as usize];
        let (addr, size) = (b.addr, b.size);
        if let Some(Some(Segment {
            pages: Some(pages), ..
        })) = self.segments.get_mut(b.seg as usize)
        {
            count(pages, &mut self.mappings, addr, size);
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

    /// The window `[at, at + rounded)` of segment `seg` as it may be handed out: a piece of
    /// more than a page under it must start inside it and be covered but for an eighth at its
    /// end, which the window then takes too (`Ok`, the window's size); else the pieces it would
    /// share (`Err`), which must go back first.
    pub(super) fn fit_whole(&self, seg: u32, at: u64, rounded: u64) -> Result<u64, Vec<u32>> {
        let pages = match self.pages(seg) {
            Some(p) => p,
            None => return Ok(rounded),
        };
        let end = at + rounded;
        let mut fit = rounded;
        let mut cut = Vec::new();
        for edge in [at, end - 1] {
            let m = pages.mapping_of(edge);
            if m == NIL || self.mappings.get(m).size <= SEGMENT || cut.contains(&m) {
                continue;
            }
            let (addr, size) = (self.mappings.get(m).addr, self.mappings.get(m).size);
            if at <= addr && end + size / 8 >= addr + size {
                fit = fit.max(addr + size - at);
            } else {
                cut.push(m);
            }
        }
        match cut.is_empty() {
            true => Ok(fit),
            false => Err(cut),
        }
    }

    /// An idle piece of more than a page that `rounded` bytes would nearly cover (7/8, as
    /// [`State::fit_whole`] asks), the smallest: the free block that holds it and its address.
    /// A block freed and merged with free space around it starts before its piece, where the
    /// search by block start does not look.
    pub(super) fn idle_piece_for(&self, rounded: u64) -> Option<(u32, u64)> {
        let (_, addr, seg) = self
            .mappings
            .idle()
            .into_iter()
            .map(|m| self.mappings.get(m))
            .filter(|m| m.size > SEGMENT && m.size >= rounded && rounded + m.size / 8 >= m.size)
            .map(|m| (m.size, m.addr, m.seg))
            .min()?;
        let first = self.segments[seg as usize].as_ref()?.first;
        let mut i = first;
        while i != NIL {
            let b = &self.blocks[i as usize];
            if b.addr <= addr && addr < b.addr + b.size {
                return (b.state == super::block::BlockState::Free).then_some((i, addr));
            }
            i = b.next;
        }
        None
    }

    /// In free block `i` of a virtual segment, where `rounded` bytes (a large request) need the
    /// least memory mapped: its start, or where a mapped stretch inside it begins. Nothing
    /// changes: the caller splits there once the memory is mapped, so a failed map leaves the
    /// block whole.
    pub(super) fn best_window(&self, i: u32, rounded: u64) -> u64 {
        let b = &self.blocks[i as usize];
        let (addr, size, seg) = (b.addr, b.size, b.seg);
        let pages = match self.pages(seg) {
            Some(p) => p,
            None => return addr,
        };
        // Small requests map a page or two; looking for a better place costs more than that.
        if rounded <= MEDIUM_REQUEST || pages.is_mapped(addr, rounded) {
            return addr;
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
        best.1
    }
}

impl<S: DeviceSource> Pool<S> {
    /// Makes sure device memory backs `[at, at + rounded)` of free block `block` (a no-op
    /// outside virtual segments): with `whole`, the request's own whole pages as one piece,
    /// each page it shares with a neighbour a piece of its own; else a piece per page (memory
    /// mapped for no block yet, as the warm-up's). Returns whether it called the device.
    /// Changes no block.
    pub(super) fn back(
        &self,
        st: &mut State,
        block: u32,
        (at, rounded): (u64, u64),
        whole: bool,
    ) -> Result<bool, AllocError> {
        let seg = st.blocks[block as usize].seg;
        let runs = match st.pages(seg) {
            Some(pages) if !pages.is_mapped(at, rounded) => pages.unmapped(at, rounded),
            _ => return Ok(false),
        };
        // The trim keeps what lies under the window, so these runs stay the ones to map; it
        // removes no block of a virtual segment.
        let need = runs.iter().map(|r| r.1).sum();
        self.make_room(st, need, Some((at, rounded)))?;
        let own = (round_up(at, SEGMENT), (at + rounded) & !(SEGMENT - 1));
        for (addr, size) in runs {
            let (from, to) = (own.0.max(addr), own.1.min(addr + size));
            let parts = if whole && to > from && !self.source.uniform_pieces() {
                [
                    (addr, from - addr, SEGMENT),
                    (from, to - from, to - from),
                    (to, addr + size - to, SEGMENT),
                ]
            } else {
                [(addr, size, SEGMENT), (0, 0, SEGMENT), (0, 0, SEGMENT)]
            };
            for (addr, size, chunk) in parts.into_iter().filter(|p| p.1 > 0) {
                let tokens = self
                    .source
                    .map(addr, size, chunk)
                    .map_err(AllocError::Source)?;
                for (i, token) in tokens.into_iter().enumerate() {
                    st.add_mapping(seg, (addr + i as u64 * chunk, chunk), token);
                }
            }
        }
        Ok(true)
    }

    /// A new virtual segment big enough for the whole cap (up to [`VIRTUAL_SEGMENT`]) and for
    /// `rounded`, if the device reserves one; `None` turns virtual memory off for this pool.
    pub(super) fn grow_virtual(&self, st: &mut State, rounded: u64) -> Option<u32> {
        let size = round_up(rounded.max(st.stats.cap.min(VIRTUAL_SEGMENT)), SEGMENT);
        let addr = self.source.reserve(size).ok()?;
        Some(st.add_segment(addr, size, Kind::Large, Some(Pages::new(addr, size))))
    }

    /// After the device refused to reserve, or to map into virtual segments before ever mapping
    /// one (some reserve address space but cannot back it): plain segments from now on.
    pub(super) fn give_up_virtual_memory(&self, st: &mut State) {
        st.virtual_memory = false;
        self.release_address_space(st);
    }
}
