//! Blocks: the pieces that tile a segment, handed out, freed, split and merged.

use super::fast::Undo;
use super::pages::Pages;
use super::state::{Kind, Segment, State};
use super::{GRANULE, NIL};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockState {
    /// In its kind's free index.
    Free,
    /// Handed out: in [`State::live`].
    Live,
    /// Freed, waiting for a synchronize: in [`State::quarantine`].
    Quarantined,
    /// An empty arena slot: in [`State::vacant_blocks`], in no segment.
    Vacant,
}

/// One block of a segment. Blocks of a segment tile it exactly, in address order through
/// `prev`/`next` (`NIL` at the ends); free ones are also linked into their size class through
/// `link_*`.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    /// A multiple of [`GRANULE`], as is `size` (never 0).
    pub addr: u64,
    pub size: u64,
    /// What the program asked for (live and quarantined blocks only): at most `size`.
    pub requested: u64,
    pub seg: u32,
    pub prev: u32,
    pub next: u32,
    pub link_prev: u32,
    pub link_next: u32,
    /// The class of the free index it is filed in (free blocks only): `link_*`'s list.
    pub class: u16,
    pub state: BlockState,
}

impl State {
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

    /// Splits free block `i` after `offset` bytes; returns the second part (both stay free:
    /// the caller hands the second out at once).
    pub(super) fn split_free(&mut self, i: u32, offset: u64) -> u32 {
        let kind = self.kind(i).slot();
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
            class: 0,
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
    pub(super) fn take(&mut self, i: u32, rounded: u64, requested: u64, oversize: u64) -> u64 {
        let kind = self.kind(i).slot();
        let (size, seg) = {
            let b = &self.blocks[i as usize];
            (b.size, b.seg)
        };
        let splits = size - rounded >= GRANULE && (size < oversize || self.pages(seg).is_some());
        let before = self.index[kind].version;
        let i = if splits {
            // The rest keeps the block's slot, and its place in the index where it can.
            let head = self.blocks[i as usize].link_prev == NIL;
            #[cfg(debug_assertions)]
            let lists = self.index[kind].lists(&self.blocks);
            let front = self.carve_front(i, rounded);
            let index = &mut self.index[kind];
            index.refile(&mut self.blocks, i);
            // Freeing the front at once merges back the block as it was, first in its class:
            // the index's state before this take (see `super::fast`).
            index.fast.undo = (head && index.in_place).then_some(Undo {
                before,
                after: index.version,
                front,
                #[cfg(debug_assertions)]
                lists,
            });
            front
        } else {
            self.index[kind].remove(&mut self.blocks, i);
            self.index[kind].fast.undo = None;
            i
        };
        self.hand_out(i, requested)
    }

    /// Hands out free block `i`, in no index, for `requested` bytes; returns its address.
    #[inline(always)]
    pub(super) fn hand_out(&mut self, i: u32, requested: u64) -> u64 {
        let b = &mut self.blocks[i as usize];
        b.state = BlockState::Live;
        b.requested = requested;
        let addr = b.addr;
        self.pin_pages(i);
        self.live.insert(addr, i);
        let s = &mut self.stats;
        s.live += requested;
        s.peak_live = s.peak_live.max(s.live);
        s.allocs += 1;
        addr
    }

    /// Cuts the first `offset` bytes off free block `i`, which stays where it is in the index
    /// (see [`super::index::FreeIndex::refile`]); returns them as a new block, free and in no
    /// index.
    fn carve_front(&mut self, i: u32, offset: u64) -> u32 {
        let (addr, seg, prev) = {
            let b = &self.blocks[i as usize];
            (b.addr, b.seg, b.prev)
        };
        let front = self.new_block(Block {
            addr,
            size: offset,
            requested: 0,
            seg,
            prev,
            next: i,
            link_prev: NIL,
            link_next: NIL,
            class: 0,
            state: BlockState::Free,
        });
        self.link_after(prev, seg, front);
        let b = &mut self.blocks[i as usize];
        b.addr += offset;
        b.size -= offset;
        b.prev = front;
        front
    }

    /// Makes `i` the block after `prev` in segment `seg` (its first when `prev` is `NIL`).
    fn link_after(&mut self, prev: u32, seg: u32, i: u32) {
        if prev != NIL {
            self.blocks[prev as usize].next = i;
        } else if let Some(s) = self.segments[seg as usize].as_mut() {
            s.first = i;
        }
    }

    /// Marks a quarantined block free and merges it with free neighbours. Returns whether its
    /// segment is now wholly free (or, virtual, may have an idle mapping).
    pub(super) fn release_block(&mut self, mut i: u32) -> bool {
        let kind = self.kind(i).slot();
        self.unpin_pages(i);
        let (size, prev, next) = {
            let b = &mut self.blocks[i as usize];
            b.state = BlockState::Free;
            (b.size, b.prev, b.next)
        };
        let free = |j: u32| j != NIL && self.blocks[j as usize].state == BlockState::Free;
        let (prev_free, next_free) = (free(prev), free(next));
        let index = &mut self.index[kind];
        // With the version unchanged since the take, the block after the front is its rest.
        let undo = index
            .fast
            .undo
            .take()
            .filter(|u| u.after == index.version && u.front == i);
        if prev_free && next_free {
            self.index[kind].remove(&mut self.blocks, next);
            self.merge_into(i, next);
            self.merge_into(prev, i);
            self.index[kind].refile(&mut self.blocks, prev);
            i = prev;
        } else if prev_free {
            self.merge_into(prev, i);
            self.index[kind].refile(&mut self.blocks, prev);
            i = prev;
        } else if next_free {
            // The free block after takes this one in, keeping its place in the index where it
            // can.
            self.absorb_front(next, i);
            self.index[kind].refile(&mut self.blocks, next);
            if let Some(undo) = undo {
                // Nothing changed since the split this free undoes: the state before it again,
                // where the request (the front's size) may be served as it was, if taking it
                // was all its allocation did.
                let index = &mut self.index[kind];
                index.restore(&self.blocks, &undo);
                if let Some(start) = index.fast.pure(undo.before, &self.stats) {
                    index.fast.remember(size, start, next);
                }
            }
            i = next;
        } else {
            self.index[kind].insert(&mut self.blocks, i);
        }
        let b = &self.blocks[i as usize];
        (b.prev == NIL && b.next == NIL) || self.pages(b.seg).is_some()
    }

    /// Prepends `left` (the block before in address order) to `right` and drops `left`.
    #[inline(always)]
    pub(super) fn absorb_front(&mut self, right: u32, left: u32) {
        let (addr, size, prev, seg) = {
            let l = &self.blocks[left as usize];
            (l.addr, l.size, l.prev, l.seg)
        };
        self.link_after(prev, seg, right);
        let r = &mut self.blocks[right as usize];
        r.addr = addr;
        r.size += size;
        r.prev = prev;
        self.vacate(left);
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
    pub(super) fn add_segment(
        &mut self,
        addr: u64,
        size: u64,
        kind: Kind,
        pages: Option<Pages>,
    ) -> u32 {
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
            class: 0,
            state: BlockState::Free,
        });
        self.births += 1;
        let real = pages.is_none();
        self.segments[seg as usize] = Some(Segment {
            addr,
            size,
            kind,
            birth: self.births,
            first,
            pages,
        });
        self.index[kind.slot()].insert(&mut self.blocks, first);
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
    pub(super) fn remove_segment(&mut self, seg: u32) -> (u64, u64) {
        let s = self.segments[seg as usize]
            .take()
            .expect("trim only picks existing segments");
        self.index[s.kind.slot()].remove(&mut self.blocks, s.first);
        self.vacate(s.first);
        self.vacant_segments.push(seg);
        if s.pages.is_none() {
            self.stats.reserved -= s.size;
        }
        (s.addr, s.size)
    }
}
