//! The pool's record of its memory, behind its lock: segments, the blocks that tile them, the
//! free index, live blocks, the quarantine, virtual memory's mappings and the stats. The
//! invariants on the fields are what [`State::check`](super::check) recounts.

use std::collections::VecDeque;

use super::block::{Block, BlockState};
use super::fast::Parked;
use super::index::FreeIndex;
use super::pages::{Mappings, Pages};
use super::spares::Spares;
use super::{IDLE_TILE, MEDIUM_SEGMENT, NEAR_SHARE, NIL, SEGMENT, SMALL_REQUEST};
use crate::hash::AddrMap;
use crate::stats::Stats;

/// A block of `max_split` or more serves a request only if it wastes at most this much.
const OVERSIZE_SLACK: u64 = 20 << 20;

/// Which of the two pools a segment belongs to, and so which free index holds its free blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Segments for requests of at most [`SMALL_REQUEST`], so small blocks never pin a large
    /// segment or a piece that a large block left idle: plain ones of 2 MiB, or a virtual one
    /// mapped a page at a time.
    Small,
    /// Everything else.
    Large,
}

impl Kind {
    pub(super) const ALL: [Kind; 2] = [Kind::Small, Kind::Large];

    /// Which pool serves `rounded` bytes: the size alone decides, with virtual memory or without.
    pub(super) fn serving(rounded: u64) -> Kind {
        if rounded <= SMALL_REQUEST {
            Kind::Small
        } else {
            Kind::Large
        }
    }

    /// Its slot in [`State::index`].
    pub(super) fn slot(self) -> usize {
        match self {
            Kind::Small => 0,
            Kind::Large => 1,
        }
    }
}

/// How close a free block must fit a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fit {
    /// Any block that holds it.
    Any,
    /// Any block that holds it, except that a free block of a plain segment larger than
    /// [`MEDIUM_SEGMENT`] serves only a request it is at most [`NEAR_SHARE`] times (or a block
    /// of a page): a short-lived request placed far inside one would keep the rest of it from
    /// going back when a later request needs more. And a plain segment no block uses serves a
    /// request past the small pool only if a whole number of such requests tile it (see
    /// [`IDLE_TILE`]).
    Near,
    /// Only one that wastes at most an eighth of a large request (while a synchronize could
    /// make a better one reusable).
    Close,
}

/// Whether a free block must already have device memory behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Backing {
    Any,
    /// Only one whose first bytes are mapped (always true outside virtual segments).
    Mapped,
}

/// A range of device addresses the pool holds: memory from the device's plain allocator, or an
/// address range reserved from it (virtual).
pub(super) struct Segment {
    pub addr: u64,
    /// A multiple of [`super::SEGMENT`]. Its blocks tile `[addr, addr + size)` exactly.
    pub size: u64,
    pub kind: Kind,
    /// Order of creation: trims release the oldest first.
    pub birth: u64,
    /// The block at `addr`; the others follow through [`Block::next`].
    pub first: u32,
    /// A virtual segment's pages; `None` for memory from the plain allocator.
    pub pages: Option<Pages>,
}

/// Everything the pool knows, guarded by its mutex. Between calls (whenever the lock is free):
pub(super) struct State {
    /// The block arena, indexed by `u32`. A block not `Vacant` lies in exactly one segment's
    /// chain; blocks of one segment tile it in address order, no two free ones adjacent (freed
    /// blocks merge with free neighbours); segments never overlap, so neither do blocks.
    pub blocks: Vec<Block>,
    /// Exactly the `Vacant` blocks, each once: slots for reuse.
    pub vacant_blocks: Vec<u32>,
    /// Segments by number; `None` where one was given back.
    pub segments: Vec<Option<Segment>>,
    /// Exactly the `None` slots of `segments`, each once.
    pub vacant_segments: Vec<u32>,
    /// Free blocks by size, one index per [`Kind`] (by [`Kind::slot`]): exactly the `Free`
    /// blocks of the segments of that kind.
    pub index: [FreeIndex; 2],
    /// Exactly the `Live` blocks, by address.
    pub live: AddrMap<u32>,
    /// Exactly the `Quarantined` blocks, in order of their free, each with its sequence number
    /// (increasing, below `next_free_seq`).
    pub quarantine: VecDeque<(u64, u32)>,
    pub next_free_seq: u64,
    /// One past the sequence number of the last block freed straight to the free lists (in
    /// order), and the mark of the last synchronize completed: memory freed in order may go
    /// back to the device only once the second has passed the first.
    pub freed_in_order: u64,
    pub synced_mark: u64,
    pub births: u64,
    /// Runs of device memory behind virtual segments; every page of a live or quarantined
    /// block in a virtual segment is mapped.
    pub mappings: Mappings,
    /// Whether new segments are virtual: decided at first use, off for good if the device
    /// refuses.
    pub virtual_memory: bool,
    pub warmed: bool,
    /// Pieces a trim kept for the map that follows it; none between calls.
    pub spares: Spares,
    /// A block a free left unmerged for the next request of its size (see `super::fast`);
    /// none whenever the lock is taken for anything but an allocation or a free.
    pub parked: Option<Parked>,
    /// `live` is the sum of live blocks' requested bytes, `quarantined` the sum of quarantined
    /// blocks' sizes, `reserved` the plain segments' sizes plus the mappings' (address space
    /// alone is not counted).
    pub stats: Stats,
}

impl State {
    pub(super) fn new(cap: u64) -> State {
        State {
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
            spares: Spares::default(),
            parked: None,
            stats: Stats {
                cap,
                ..Stats::default()
            },
        }
    }

    /// Forgets every block and segment, keeping the cap, the peaks, the counts and the choice
    /// of segments (the memory is gone with a device reset).
    pub(super) fn forget_all(&mut self) {
        let mut fresh = State::new(self.stats.cap);
        fresh.stats = Stats {
            live: 0,
            reserved: 0,
            quarantined: 0,
            external: 0,
            ..self.stats
        };
        fresh.next_free_seq = self.next_free_seq;
        fresh.synced_mark = self.synced_mark;
        fresh.births = self.births;
        fresh.virtual_memory = self.virtual_memory;
        fresh.warmed = true;
        *self = fresh;
    }

    /// Whether a synchronize would make something safe: blocks in quarantine, or blocks freed
    /// in order since the last one.
    pub(super) fn unsettled(&self) -> bool {
        !self.quarantine.is_empty() || self.freed_in_order > self.synced_mark
    }

    /// Live bytes counted against the cap: the pool's blocks in use and external charges.
    pub(super) fn live_total(&self) -> u64 {
        self.stats.live + self.stats.external
    }

    /// The largest free block's size.
    pub(super) fn largest_free(&self) -> u64 {
        self.index
            .iter()
            .map(|index| index.largest(&self.blocks))
            .max()
            .unwrap_or(0)
    }

    /// Whether `s` is a plain segment no block uses: a trim may give it back whole.
    pub(super) fn is_idle_plain(&self, s: &Segment) -> bool {
        let b = &self.blocks[s.first as usize];
        s.pages.is_none() && b.state == BlockState::Free && b.size == s.size
    }

    /// The address range of the plain segment made last, if it is a medium one no block uses.
    pub(super) fn newest_idle_plain(&self) -> Option<(u64, u64)> {
        let newest = self.segments.iter().flatten().max_by_key(|s| s.birth)?;
        (self.is_idle_plain(newest) && newest.size <= MEDIUM_SEGMENT)
            .then_some((newest.addr, newest.size))
    }

    /// Bytes in plain segments no block uses.
    pub(super) fn idle_plain(&self) -> u64 {
        let segments = self.segments.iter().flatten();
        segments
            .filter(|s| self.is_idle_plain(s))
            .map(|s| s.size)
            .sum()
    }

    /// The kind of block `i`'s segment.
    pub(super) fn kind(&self, i: u32) -> Kind {
        let seg = self.blocks[i as usize].seg as usize;
        match &self.segments[seg] {
            Some(s) => s.kind,
            None => Kind::Large,
        }
    }

    /// A free block of pool `kind` for `rounded` bytes, as close a `fit` as asked and with the
    /// `backing` asked. Blocks of `oversize` or more are not split (except in virtual segments,
    /// whose free blocks are address space). A small request is not placed at the start of an
    /// idle piece of several pages, which it would keep mapped for itself alone, while another
    /// block serves: among mapped blocks it then finds none, so the request takes a page of its
    /// own; with any backing it takes such a piece only when nothing else fits. With plain
    /// segments, see [`State::plain_best`].
    pub(super) fn find(
        &self,
        kind: Kind,
        rounded: u64,
        oversize: u64,
        fit: Fit,
        backing: Backing,
    ) -> Option<u32> {
        let slack = match fit {
            Fit::Close if rounded > SMALL_REQUEST => rounded / 8,
            _ => u64::MAX,
        };
        let accept = |b: &Block, spare_idle: bool| {
            let splits = b.size < oversize || self.pages(b.seg).is_some();
            (splits || (rounded >= oversize && b.size - rounded <= OVERSIZE_SLACK))
                && (fit != Fit::Near || self.near(b, rounded))
                && b.size - rounded <= slack
                && (backing == Backing::Any || self.backs(b, rounded))
                && !(spare_idle && self.starts_in_idle_run(b))
        };
        if !self.virtual_memory {
            return self.plain_best(kind, rounded, |b| accept(b, false));
        }
        let pick = |spare_idle: bool| {
            self.index[kind.slot()].find(&self.blocks, rounded, |b| accept(b, spare_idle))
        };
        let spare_idle = rounded <= SMALL_REQUEST;
        match pick(spare_idle) {
            None if spare_idle && backing == Backing::Any => pick(false),
            found => found,
        }
    }

    /// The best fit among the free blocks `accept` takes: in a segment some block uses if one
    /// serves, else in any (an idle one). An idle plain segment goes back whole at the next
    /// trim, one in use cannot, so room in use is filled first, as slab allocators fill their
    /// fullest slabs (TUNE's max 1.112 -> 1.093, docs/benchmarks.md, session 26). Equal sizes:
    /// the newest segment's, the last in it.
    fn plain_best(&self, kind: Kind, rounded: u64, accept: impl Fn(&Block) -> bool) -> Option<u32> {
        let segment = |b: &Block| self.segments[b.seg as usize].as_ref();
        let birth = |b: &Block| segment(b).map_or(0, |s| s.birth);
        let before = |a: &Block, b: &Block| (birth(a), a.addr) > (birth(b), b.addr);
        let in_use = |b: &Block| segment(b).map_or(true, |s| s.size != b.size);
        let index = &self.index[kind.slot()];
        index
            .best(&self.blocks, rounded, |b| accept(b) && in_use(b), before)
            .or_else(|| index.best(&self.blocks, rounded, &accept, before))
    }

    /// Whether free block `b` may serve `rounded` bytes under [`Fit::Near`].
    fn near(&self, b: &Block, rounded: u64) -> bool {
        let s = match self.segments[b.seg as usize].as_ref() {
            Some(s) if s.pages.is_none() => s,
            _ => return true,
        };
        if rounded > SMALL_REQUEST
            && self.is_idle_plain(s)
            && (s.size % rounded) * IDLE_TILE > s.size
        {
            return false;
        }
        if s.size <= MEDIUM_SEGMENT {
            return true;
        }
        let (num, den) = NEAR_SHARE;
        b.size.saturating_mul(den) <= (SEGMENT * den).max(rounded.saturating_mul(num))
    }

    /// Whether free block `b` starts in an idle mapping of several pages.
    fn starts_in_idle_run(&self, b: &Block) -> bool {
        self.pages(b.seg).map_or(false, |pages| {
            let m = pages.mapping_at(b.addr);
            m != NIL && self.is_idle_run(m)
        })
    }
}
