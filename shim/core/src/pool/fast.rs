//! Requests replayed: a request of a size served before, from the same state of the pool, is
//! served the same way again without searching the free index.
//!
//! A program that allocates a block and frees it before anything else happens (a workspace,
//! a temporary; every pair of the hot-path bench) leaves the pool as it found it: the free
//! merges back exactly the free block the allocation split. The free index knows when that
//! happens (the split recorded as undoable, the free undoing it with no change between) and
//! then gives its state the number it had before the split
//! ([`FreeIndex::version`](super::index::FreeIndex::version)), so the states a program goes
//! through again are recognised by number. A request that was served with nothing but a take
//! from the pool's memory (no device call, no other change first) and then undone so is
//! remembered with the number of the state it was served in; the same rounded size at the same
//! number, with the same device memory mapped and nothing in quarantine, is served by taking
//! the same block, which is what `Pool::serve` would do: it reads nothing else on that path.
//! An allocation that begins in a state no free restored pays one comparison for this; one
//! that does, a few stores of where it began and a look at one entry.
//! Placement is the same by construction; the pool-model tests compare every step with a pool
//! that does none of this.
//!
//! A free that would undo the take before it, so that the same request would be replayed next,
//! may leave its block unmerged instead (parked): the next request of that size is handed the
//! block at once, which is where merging it back and replaying the take would leave the pool,
//! without either. Anything else merges it back first: the next allocation of another size or
//! the next free, and every other call that takes the pool's lock ([`State::unpark`]), so no
//! other code ever sees a parked block. Repeated pairs of one size (a workspace, a temporary in
//! a loop) then cost neither a merge nor a split.
//!
//! Only for virtual segments; each pool (small, large) remembers its own requests.

use super::block::{Block, BlockState};
use super::index::FreeIndex;
use super::state::{Kind, State};
use super::{Pool, GRANULE, NIL};
use crate::source::DeviceSource;

/// Remembered requests, by a hash of their rounded size (a power of two; 32: the bench's six
/// sizes, powers of two among them, land in six).
const ENTRIES: usize = 32;
/// A version no state has: [`Start::version`] of an allocation that may not be remembered.
const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, Default)]
struct Entry {
    /// The index's version when it was served, and the device-memory marks then: memory
    /// mapped (`source_allocs` counts every piece mapped) and held (`reserved`, less for every
    /// piece given back).
    version: u64,
    rounded: u64,
    allocs: u64,
    reserved: u64,
    /// The free block taken.
    block: u32,
}

/// The state an allocation began in (the marks of [`Entry`], and the pool hits).
#[derive(Clone, Copy)]
pub(crate) struct Start {
    pub version: u64,
    pub hits: u64,
    pub allocs: u64,
    pub reserved: u64,
}

/// A split the next free may undo: version `before` the take, the version `after` it and the
/// block handed out (`front`); the rest, after it, headed its class's list before.
#[derive(Clone)]
pub(crate) struct Undo {
    pub before: u64,
    pub after: u64,
    pub front: u32,
    /// The lists as they were before the take, which the undo must give back exactly: checked
    /// where debug assertions are on (the pool-model tests).
    #[cfg(debug_assertions)]
    pub lists: Vec<(usize, u32, u64, u64)>,
}

pub(crate) struct Replay {
    entries: [Entry; ENTRIES],
    pub(crate) undo: Option<Undo>,
    /// The version the last undo set back: a state that may come again. An allocation that
    /// begins elsewhere pays one comparison here and no more.
    pub(crate) restored: u64,
    /// Where the allocation under way began; `version` [`NONE`] where it may not be
    /// remembered (plain segments, blocks in quarantine, replay off).
    pub(crate) start: Start,
    /// Requests replayed.
    pub(crate) hits: u64,
}

impl Default for Replay {
    fn default() -> Replay {
        Replay {
            entries: [Entry::default(); ENTRIES],
            undo: None,
            restored: NONE,
            start: Start {
                version: NONE,
                hits: 0,
                allocs: 0,
                reserved: 0,
            },
            hits: 0,
        }
    }
}

impl Start {
    /// The state `version` with the pool's stats `s` now.
    #[inline(always)]
    fn at(version: u64, s: &crate::stats::Stats) -> Start {
        Start {
            version,
            hits: s.pool_hits,
            allocs: s.source_allocs,
            reserved: s.reserved,
        }
    }
}

impl Replay {
    /// The free block a request of `rounded` bytes was served from in the state `version`, if
    /// one was and the same device memory is mapped now (the pool's stats `s`).
    #[inline(always)]
    fn remembered(&self, rounded: u64, version: u64, s: &crate::stats::Stats) -> Option<u32> {
        let e = self.entries[entry_for(rounded)];
        (e.version == version
            && e.rounded == rounded
            && e.allocs == s.source_allocs
            && e.reserved == s.reserved)
            .then_some(e.block)
    }

    /// Whether the allocation under way (or the last) did nothing but a take at `version`: the
    /// index as it began, one pool hit, no device memory mapped or given back, with the
    /// pool's stats `s` now.
    #[inline(always)]
    pub(crate) fn pure(&self, version: u64, s: &crate::stats::Stats) -> Option<Start> {
        let start = self.start;
        (version == start.version
            && s.pool_hits == start.hits + 1
            && s.source_allocs == start.allocs
            && s.reserved == start.reserved)
            .then_some(start)
    }

    /// Remembers `rounded` bytes served from `block` in the state `start` names.
    #[inline(always)]
    pub(crate) fn remember(&mut self, rounded: u64, start: Start, block: u32) {
        self.entries[entry_for(rounded)] = Entry {
            version: start.version,
            rounded,
            allocs: start.allocs,
            reserved: start.reserved,
            block,
        };
    }
}

#[inline(always)]
fn entry_for(rounded: u64) -> usize {
    crate::hash::top_bits(rounded >> 8, ENTRIES.trailing_zeros())
}

/// A block freed right after the take that split it off `rest`, left unmerged; `undo` is that
/// take's, `kind` its pool's slot.
pub(crate) struct Parked {
    front: u32,
    rest: u32,
    kind: usize,
    undo: Undo,
}

impl FreeIndex {
    /// The index back in the state before the take `undo` names, once its front is merged back
    /// into the rest (the lists equal those before it: checked where debug assertions are on).
    #[inline(always)]
    pub(crate) fn restore(&mut self, _blocks: &[Block], undo: &Undo) {
        #[cfg(debug_assertions)]
        assert!(
            self.lists(_blocks) == undo.lists,
            "a split undone but the free lists differ from before it"
        );
        self.version = undo.before;
        self.fast.restored = undo.before;
    }
}

impl State {
    /// Merges a parked block back, as its free would have: the pool in the state before the
    /// take that split it, as every caller but an allocation or a free must see it.
    #[inline]
    pub(super) fn unpark(&mut self) {
        if let Some(p) = self.parked.take() {
            self.merge_parked(p);
        }
    }

    #[cold]
    fn merge_parked(&mut self, p: Parked) {
        self.absorb_front(p.rest, p.front);
        let index = &mut self.index[p.kind];
        index.refile(&mut self.blocks, p.rest);
        index.restore(&self.blocks, &p.undo);
    }
}

impl<S: DeviceSource> Pool<S> {
    /// Parks live block `i`, just taken off the live map, instead of merging it back, where that
    /// free would only undo the take before it and the same request would be replayed next
    /// (see the module's comment); returns whether it did. Blocks freed in order only.
    #[inline]
    pub(super) fn park(&self, st: &mut State, i: u32) -> bool {
        let (prev, rest, size) = {
            let b = &st.blocks[i as usize];
            (b.prev, b.next, b.size)
        };
        let kind = st.kind(i).slot();
        let index = &st.index[kind];
        let undo = match &index.fast.undo {
            Some(u) if u.after == index.version && u.front == i => u,
            _ => return false,
        };
        // A free that gives memory back past the trim threshold merges first.
        let threshold = (self.options.trim_threshold * st.stats.cap as f64) as u64;
        if !index.in_place || st.stats.reserved + st.stats.external > threshold {
            return false;
        }
        let start = match index.fast.pure(undo.before, &st.stats) {
            Some(start) => start,
            None => return false,
        };
        // The take was all its allocation did: the free block it split is after, none before.
        let free = |j: u32| j != NIL && st.blocks[j as usize].state == BlockState::Free;
        debug_assert!(
            !free(prev) && free(rest),
            "a pure take beside other free blocks"
        );
        st.unpin_pages(i);
        st.blocks[i as usize].state = BlockState::Free;
        let index = &mut st.index[kind];
        index.fast.remember(size, start, rest);
        if let Some(undo) = index.fast.undo.take() {
            st.parked = Some(Parked {
                front: i,
                rest,
                kind,
                undo,
            });
        }
        true
    }

    /// Hands out the parked block for `rounded` bytes (of `size` asked) where replaying the
    /// request after merging it back would split it off the same free block again: what
    /// [`Pool::replayed`] would do, without the merge and the split. A request of another size
    /// replayed from that block moves the boundary between the two instead.
    #[inline]
    pub(super) fn serve_parked(&self, st: &mut State, rounded: u64, size: u64) -> Option<u64> {
        let p = st.parked.as_ref()?;
        let kind = Kind::serving(rounded).slot();
        let s = &st.stats;
        let index = &st.index[kind];
        let (front, rest) = (&st.blocks[p.front as usize], &st.blocks[p.rest as usize]);
        let whole = front.size + rest.size;
        if p.kind != kind
            || !(st.virtual_memory && s.quarantined == 0 && index.in_place)
            || index.fast.remembered(rounded, p.undo.before, s) != Some(p.rest)
            || whole < rounded + GRANULE
        {
            return None;
        }
        let resized = front.size != rounded;
        let mut p = st.parked.take()?;
        if resized {
            // Where the merged block's split would leave them: the front `rounded` bytes, the
            // rest after it.
            let end = st.blocks[p.front as usize].addr + rounded;
            st.blocks[p.front as usize].size = rounded;
            let r = &mut st.blocks[p.rest as usize];
            r.addr = end;
            r.size = whole - rounded;
            let index = &mut st.index[kind];
            index.refile(&mut st.blocks, p.rest);
            p.undo.after = index.version;
        }
        let index = &mut st.index[kind];
        index.fast.start = Start::at(p.undo.before, &st.stats);
        index.fast.hits += 1;
        index.fast.undo = Some(p.undo);
        st.stats.pool_hits += 1;
        Some(st.hand_out(p.front, size))
    }

    /// Serves `rounded` bytes (of `size` asked) as remembered, if the pool is in the state it
    /// was in then; notes the state the allocation begins in either way.
    #[inline(always)]
    pub(super) fn replayed(&self, st: &mut State, rounded: u64, size: u64) -> Option<u64> {
        let eligible = st.virtual_memory && st.stats.quarantined == 0;
        let s = &st.stats;
        let index = &mut st.index[Kind::serving(rounded).slot()];
        if index.version != index.fast.restored || !(eligible && index.in_place) {
            index.fast.start.version = NONE;
            return None;
        }
        index.fast.start = Start::at(index.version, s);
        let block = index.fast.remembered(rounded, index.version, s)?;
        // The version says the block is free and holds the request; a block handed out twice
        // would be wrong data in the program, so that is checked too, for two loads.
        let b = &st.blocks[block as usize];
        if b.state != BlockState::Free || b.size < rounded {
            return None;
        }
        index.fast.hits += 1;
        st.stats.pool_hits += 1;
        Some(st.take(block, rounded, size, self.options.oversize()))
    }
}
