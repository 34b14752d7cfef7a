//! Free blocks by size: a two-level segregated fit index (TLSF) over the pool's block arena, so
//! finding a block, taking it and putting it back are O(1) with a few bit scans.
//!
//! Sizes are counted in granules (256 bytes). The first level is the power of two, the second
//! splits each power into 16 classes, so a block found for a request wastes at most 1/16 of it
//! before the split returns the rest.

use super::block::Block;
use super::fast::Replay;
use super::NIL;

const SL_BITS: u32 = 4;
const SL: usize = 1 << SL_BITS;
/// Blocks of one class a search looks at, at most: the lists are in no order, and a long
/// one (many small slivers of one size) must not make a request slow.
const SCAN: usize = 8;
/// Enough first-level classes for 2^48 bytes in 256-byte granules.
const FL: usize = 41;
// A block keeps its class in a `u16` (checked when compiling; older clippy takes a constant
// assertion for a runtime one).
#[allow(clippy::assertions_on_constants)]
const _: () = assert!(FL * SL <= 1 << 16);

/// The smallest of the first [`SCAN`] blocks of the list from `head` that hold `size` bytes and
/// that `accept` takes, equal sizes decided by `before` (whether the first goes before the
/// second); `NIL` if none.
#[inline(always)]
fn smallest_in(
    blocks: &[Block],
    head: u32,
    size: u64,
    accept: impl Fn(&Block) -> bool,
    before: impl Fn(&Block, &Block) -> bool,
) -> u32 {
    let mut best = NIL;
    let mut i = head;
    for _ in 0..SCAN {
        if i == NIL {
            break;
        }
        let b = &blocks[i as usize];
        if b.size >= size && accept(b) {
            let o = (best != NIL).then(|| &blocks[best as usize]);
            if o.map_or(true, |o| {
                b.size < o.size || (b.size == o.size && before(b, o))
            }) {
                best = i;
            }
        }
        i = b.link_next;
    }
    best
}

/// Class that a free block of `granules` belongs to (rounding down).
#[inline]
fn class_of(granules: u64) -> usize {
    if granules < SL as u64 {
        return granules as usize;
    }
    let msb = 63 - granules.leading_zeros();
    let fl = (msb - SL_BITS + 1) as usize;
    let sl = ((granules >> (msb - SL_BITS)) as usize) & (SL - 1);
    (fl * SL + sl).min(FL * SL - 1)
}

/// First class whose every block holds `granules` (rounding up).
fn class_above(granules: u64) -> usize {
    if granules < SL as u64 {
        return granules as usize;
    }
    let msb = 63 - granules.leading_zeros();
    class_of(granules + (1u64 << (msb - SL_BITS)) - 1)
}

pub(crate) struct FreeIndex {
    fl_map: u64,
    sl_map: [u16; FL],
    heads: [u32; FL * SL],
    /// Whether [`FreeIndex::refile`] may leave the lists alone and requests may be replayed
    /// (`super::fast`): off only to compare placement without them.
    pub(crate) in_place: bool,
    /// How often refile did: splits and merges that left the lists alone.
    pub(crate) in_place_hits: u64,
    /// A number for the state the lists are in, with the sizes and addresses of the blocks in
    /// them: fresh at every change (never one used before), or, after a free that exactly
    /// undid the split before it, the number of the state that restored.
    pub(crate) version: u64,
    next_version: u64,
    /// What the replay of served requests keeps.
    pub(crate) fast: Replay,
}

impl FreeIndex {
    pub(crate) fn new() -> FreeIndex {
        FreeIndex {
            fl_map: 0,
            sl_map: [0; FL],
            heads: [NIL; FL * SL],
            in_place: true,
            in_place_hits: 0,
            version: 0,
            next_version: 1,
            fast: Replay::default(),
        }
    }

    /// The lists (or a listed block) changed: a fresh version.
    #[inline(always)]
    fn changed(&mut self) {
        self.version = self.next_version;
        self.next_version += 1;
    }

    /// Files free block `i` of this index again after its size changed (its address may have
    /// changed too), leaving the lists as a remove and an insert would: untouched when it heads
    /// its class's list and keeps its class (an insert puts a block first in its class), which
    /// is what saves the index work when a pair of calls splits a free block and merges it
    /// back; counted in `in_place_hits`.
    #[inline(always)]
    pub(crate) fn refile(&mut self, blocks: &mut [Block], i: u32) {
        let b = &blocks[i as usize];
        let (old, new) = (b.class as usize, class_of(b.size >> 8));
        if self.in_place && b.link_prev == NIL && new == old {
            self.in_place_hits += 1;
            self.changed();
            return;
        }
        self.remove_from(blocks, i, old);
        self.insert_at(blocks, i, new);
    }

    #[inline]
    pub(crate) fn insert(&mut self, blocks: &mut [Block], i: u32) {
        let class = class_of(blocks[i as usize].size >> 8);
        self.insert_at(blocks, i, class);
    }

    /// Puts block `i` first in `class`, its size's.
    #[inline(always)]
    fn insert_at(&mut self, blocks: &mut [Block], i: u32, class: usize) {
        let head = self.heads[class];
        let b = &mut blocks[i as usize];
        b.link_prev = NIL;
        b.link_next = head;
        b.class = class as u16;
        if head != NIL {
            blocks[head as usize].link_prev = i;
        }
        self.heads[class] = i;
        self.changed();
        self.fl_map |= 1 << (class / SL);
        self.sl_map[class / SL] |= 1 << (class % SL);
    }

    #[inline]
    pub(crate) fn remove(&mut self, blocks: &mut [Block], i: u32) {
        let class = blocks[i as usize].class as usize;
        self.remove_from(blocks, i, class);
    }

    /// Removes block `i`, filed in `class` (its `class`).
    #[inline(always)]
    fn remove_from(&mut self, blocks: &mut [Block], i: u32, class: usize) {
        self.changed();
        let (prev, next) = (blocks[i as usize].link_prev, blocks[i as usize].link_next);
        if prev != NIL {
            blocks[prev as usize].link_next = next;
        } else {
            self.heads[class] = next;
            if next == NIL {
                let sl = &mut self.sl_map[class / SL];
                *sl &= !(1 << (class % SL));
                if *sl == 0 {
                    self.fl_map &= !(1 << (class / SL));
                }
            }
        }
        if next != NIL {
            blocks[next as usize].link_prev = prev;
        }
    }

    /// A free block of at least `size` bytes for which `accept` holds, close to the smallest:
    /// a short scan of the request's own class (where blocks may be smaller or larger), then
    /// the first block of the next non-empty class, which always fits.
    pub(crate) fn find(
        &self,
        blocks: &[Block],
        size: u64,
        accept: impl Fn(&Block) -> bool,
    ) -> Option<u32> {
        let granules = size >> 8;
        let own = class_of(granules);
        let best = smallest_in(blocks, self.heads[own], size, &accept, |_, _| false);
        if best != NIL {
            return Some(best);
        }
        let mut class = class_above(granules);
        if class == own {
            class += 1;
        }
        while class < FL * SL {
            let found = self.first_at_or_above(class)?;
            let head = self.heads[found];
            if accept(&blocks[head as usize]) {
                return Some(head);
            }
            class = found + 1;
        }
        None
    }

    /// A free block of at least `size` bytes for which `accept` holds: the smallest among the
    /// first [`SCAN`] blocks of the lowest class, from the request's own up, that has one; equal
    /// sizes decided by `before` (whether the first goes before the second). Slower than
    /// [`FreeIndex::find`], which looks only at the head of each class above its own: for plain
    /// segments, where placement outweighs a few more reads.
    pub(crate) fn best(
        &self,
        blocks: &[Block],
        size: u64,
        accept: impl Fn(&Block) -> bool,
        before: impl Fn(&Block, &Block) -> bool,
    ) -> Option<u32> {
        let mut class = class_of(size >> 8);
        while class < FL * SL {
            let found = self.first_at_or_above(class)?;
            let best = smallest_in(blocks, self.heads[found], size, &accept, &before);
            if best != NIL {
                return Some(best);
            }
            class = found + 1;
        }
        None
    }

    fn first_at_or_above(&self, class: usize) -> Option<usize> {
        let (fl, sl) = (class / SL, class % SL);
        let sl_here = self.sl_map[fl] as u32 & (!0u32 << sl);
        if sl_here != 0 {
            return Some(fl * SL + sl_here.trailing_zeros() as usize);
        }
        let fl_above = if fl + 1 >= 64 {
            0
        } else {
            self.fl_map & (!0u64 << (fl + 1))
        };
        if fl_above == 0 {
            return None;
        }
        let fl = fl_above.trailing_zeros() as usize;
        Some(fl * SL + (self.sl_map[fl] as u32).trailing_zeros() as usize)
    }

    /// Every list, in order: `(class, block, address, size)` of each block. For the debug check
    /// that an undo gives back the lists it took (`super::fast`).
    #[cfg(debug_assertions)]
    pub(crate) fn lists(&self, blocks: &[Block]) -> Vec<(usize, u32, u64, u64)> {
        let mut out = Vec::new();
        for (class, &head) in self.heads.iter().enumerate() {
            let mut i = head;
            while i != NIL {
                let b = &blocks[i as usize];
                out.push((class, i, b.addr, b.size));
                i = b.link_next;
            }
        }
        out
    }

    /// Every block in the index, after checking the lists: each block in the class of its
    /// size, back links that match, and bitmaps that say which classes hold blocks. For
    /// [`super::Pool::check_invariants`].
    pub(crate) fn members(&self, blocks: &[Block]) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        for (class, &head) in self.heads.iter().enumerate() {
            let marked = self.sl_map[class / SL] & (1 << (class % SL)) != 0
                && self.fl_map & (1 << (class / SL)) != 0;
            if marked != (head != NIL) {
                return Err(format!(
                    "free class {} is marked {} but its list is {}",
                    class,
                    marked,
                    if head == NIL { "empty" } else { "not" }
                ));
            }
            let (mut prev, mut i) = (NIL, head);
            while i != NIL {
                let b = blocks
                    .get(i as usize)
                    .ok_or_else(|| format!("free list names block {} past the arena", i))?;
                if class_of(b.size >> 8) != class
                    || b.class as usize != class
                    || b.link_prev != prev
                {
                    return Err(format!(
                        "block {} at {:#x} ({} bytes) is misfiled in free class {}",
                        i, b.addr, b.size, class
                    ));
                }
                out.push(i);
                if out.len() > blocks.len() {
                    return Err(format!("free class {} loops", class));
                }
                prev = i;
                i = b.link_next;
            }
        }
        Ok(out)
    }

    /// The largest free block's size (scans the top class only).
    pub(crate) fn largest(&self, blocks: &[Block]) -> u64 {
        if self.fl_map == 0 {
            return 0;
        }
        let fl = 63 - self.fl_map.leading_zeros() as usize;
        let sl = 31 - (self.sl_map[fl] as u32).leading_zeros() as usize;
        let mut i = self.heads[fl * SL + sl];
        let mut largest = 0;
        while i != NIL {
            largest = largest.max(blocks[i as usize].size);
            i = blocks[i as usize].link_next;
        }
        largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_round_up_fits() {
        let mut smallest = vec![u64::MAX; FL * SL];
        let mut last = 0;
        for g in 1..200_000u64 {
            let c = class_of(g);
            assert!(c >= last, "class_of must not decrease");
            last = c;
            smallest[c] = smallest[c].min(g);
        }
        for g in 1..100_000u64 {
            let up = class_above(g);
            assert!(up >= class_of(g));
            assert!(
                smallest[up] >= g,
                "a block of class {} may be smaller than {}",
                up,
                g
            );
        }
    }
}
