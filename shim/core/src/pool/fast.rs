//! Requests replayed: a request of a size served before, from the same state of the pool, is
//! served the same way again without searching the free index.
//!
//! A program that allocates a block and frees it before anything else happens (a workspace,
//! a temporary; every pair of the hot-path bench) leaves the pool as it found it: the free
//! merges back exactly the free block the allocation split. The free index knows when that
//! happens (the split recorded as undoable, the free undoing it with no change between) and
//! then gives its state the number it had before the split ([`FreeIndex::version`](super::index::FreeIndex::version)), so the
//! states a program goes through again are recognised by number. A request that was served
//! with nothing but a take from the pool's memory (no device call, no other change first) is
//! remembered with the state's number; the same rounded size at the same number, with the same
//! device memory mapped and nothing in quarantine, is served by taking the same block, which is
//! what `Pool::serve` would do: it reads nothing else on that path. Placement
//! is the same by construction; the pool-model tests compare every step with a pool that does
//! none of this.
//!
//! Only for virtual segments (where the pool serves every size from one index).

use super::state::{Kind, State};
use super::{Pool, NIL};
use crate::source::DeviceSource;

/// Remembered requests, by a hash of their rounded size (32: the bench's six sizes, powers of
/// two among them, land in six).
const ENTRIES: usize = 32;

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

/// A split the next free may undo: version `before` the take, the version `after` it, the
/// block handed out (`front`) and the rest (`rest`), which headed its class's list before.
#[derive(Clone, Copy)]
pub(crate) struct Undo {
    pub before: u64,
    pub after: u64,
    pub front: u32,
    pub rest: u32,
}

#[derive(Default)]
pub(crate) struct Replay {
    entries: [Entry; ENTRIES],
    pub(crate) undo: Option<Undo>,
    /// The version at the last take and the block it took.
    pub(crate) taken: (u64, u32),
    /// Requests replayed.
    pub(crate) hits: u64,
}

/// What [`Pool::replay_mark`] notes before a request is served.
pub(super) struct Mark {
    version: u64,
    hits: u64,
    allocs: u64,
    reserved: u64,
}

#[inline(always)]
fn entry_for(rounded: u64) -> usize {
    ((rounded >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize % ENTRIES
}

impl<S: DeviceSource> Pool<S> {
    /// Serves `rounded` bytes (of `size` asked) as remembered, if the pool is in the state it
    /// was in then.
    #[inline(always)]
    pub(super) fn replayed(&self, st: &mut State, rounded: u64, size: u64) -> Option<u64> {
        if !st.virtual_memory || st.stats.quarantined != 0 {
            return None;
        }
        let index = &st.index[Kind::Large.slot()];
        let e = index.fast.entries[entry_for(rounded)];
        if !index.in_place
            || e.version != index.version
            || e.rounded != rounded
            || e.allocs != st.stats.source_allocs
            || e.reserved != st.stats.reserved
        {
            return None;
        }
        st.index[Kind::Large.slot()].fast.hits += 1;
        st.stats.pool_hits += 1;
        Some(st.take(e.block, rounded, size, self.options.oversize()))
    }

    /// What to compare after serving, where a request could be remembered.
    #[inline(always)]
    pub(super) fn replay_mark(&self, st: &mut State) -> Option<Mark> {
        let index = &mut st.index[Kind::Large.slot()];
        index.fast.taken.1 = NIL;
        if !(st.virtual_memory && st.stats.quarantined == 0 && index.in_place) {
            return None;
        }
        Some(Mark {
            version: index.version,
            hits: st.stats.pool_hits,
            allocs: st.stats.source_allocs,
            reserved: st.stats.reserved,
        })
    }

    /// Remembers a request served since `mark` if all that happened was a take from the
    /// pool's memory (one pool hit, no device memory mapped or given back, no change to the
    /// index before the take).
    #[inline(always)]
    pub(super) fn remember(&self, st: &mut State, mark: Mark, rounded: u64) {
        let s = &st.stats;
        let index = &mut st.index[Kind::Large.slot()];
        let (version, block) = index.fast.taken;
        if s.pool_hits == mark.hits + 1
            && s.source_allocs == mark.allocs
            && s.reserved == mark.reserved
            && version == mark.version
            && block != NIL
        {
            index.fast.entries[entry_for(rounded)] = Entry {
                version,
                rounded,
                allocs: mark.allocs,
                reserved: mark.reserved,
                block,
            };
        }
    }
}
