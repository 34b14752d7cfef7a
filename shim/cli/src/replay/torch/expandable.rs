//! `expandable_segments:True` (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.11, Note
//! [Expandable Segments]): one segment per pool and stream reserves address space for 1 1/8 of
//! the device and maps physical pages into it as requests need them, 2 MiB pages for the small
//! pool and 20 MiB pages (`large_segment_size()`) for the large one. Pages go back only when
//! cached blocks are released (out of memory or `empty_cache`), and only pages wholly free.
//! Follows `ExpandableSegment::map`/`unmap`, `find_expandable_block`, `map_block`,
//! `try_allocate_expandable_block`, `unmap_block` and `release_expandable_segment`.

use super::model::{Allocator, Block, LARGE_BUFFER, NIL, SMALL, SMALL_BUFFER};

/// The address space "without limit" is sized to: a device of 1 PiB.
const UNLIMITED_DEVICE: u64 = 1 << 50;

/// `ExpandableSegment`: a reserved range and which of its pages are mapped (`handles_`).
pub(super) struct Segment {
    base: u64,
    /// `segment_size_`: the page.
    page: u64,
    /// Mapped pages from the start; trailing unmapped ones are trimmed (`trimHandles`).
    handles: Vec<bool>,
}

impl Segment {
    /// `(addr, size)` of each mapped page: each a handle of its own, given back alone.
    pub(super) fn mapped_pages(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (base, page) = (self.base, self.page);
        self.handles
            .iter()
            .enumerate()
            .filter(|(_, &mapped)| mapped)
            .map(move |(i, _)| (base + i as u64 * page, page))
    }
}

impl Allocator {
    /// `try_allocate_expandable_block`: maps pages until a run of free and mapped space of
    /// `size` bytes exists at the lowest address that can hold it; the run, out of the pool.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        pool: usize,
        stream: u32,
        size: u64,
    ) -> Option<u32> {
        let mut candidate = self.find_expandable_block(pool, stream, size);
        let first = self.block(candidate);
        if !first.mapped && !self.map_block(candidate, first.size.min(size)) {
            return None;
        }
        while self.block(candidate).size < size {
            let remaining = size - self.block(candidate).size;
            let next = self.block(candidate).next;
            if !self.map_block(next, remaining.min(self.block(next).size)) {
                return None;
            }
            candidate = next;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `find_expandable_block`: the lowest unmapped range (with the free block before it) of
    /// the stream's segments with room for `size`, or a new segment.
    fn find_expandable_block(&mut self, pool: usize, stream: u32, size: u64) -> u32 {
        let allocatable = |b: u32| b != NIL && !self.block(b).allocated;
        let has_room = |mut b: u32| {
            let mut bytes = 0;
            while bytes < size && allocatable(b) {
                bytes += self.block(b).size;
                b = self.block(b).next;
            }
            bytes >= size
        };
        for &(s, _, u) in self.pools[pool].unmapped.range((stream, 0, 0)..) {
            if s != stream {
                break;
            }
            let prev = self.block(u).prev;
            let c = if allocatable(prev) { prev } else { u };
            if has_room(c) {
                return c;
            }
        }
        let page = if pool == SMALL {
            SMALL_BUFFER
        } else {
            LARGE_BUFFER
        };
        let device = self.capacity.min(UNLIMITED_DEVICE);
        let span = (device + device / 8).div_ceil(page) * page;
        let base = self.next_address.div_ceil(page) * page;
        self.next_address = base + span;
        self.segments.push(Segment {
            base,
            page,
            handles: Vec::new(),
        });
        let b = self.new_block(Block {
            ptr: base,
            size: span,
            prev: NIL,
            next: NIL,
            stream,
            seg: (self.segments.len() - 1) as u32,
            pool,
            allocated: false,
            mapped: false,
            gc_base: 0,
        });
        self.insert_unmapped(b);
        b
    }

    /// `map_block`: maps the pages under the first `size` bytes of the unmapped `to_map`
    /// (`cuMemCreate` + `cuMemMap` per page, `cuMemSetAccess` for the run); false when the
    /// device has no room for them.
    fn map_block(&mut self, to_map: u32, size: u64) -> bool {
        let b = self.block(to_map);
        let seg = &self.segments[b.seg as usize];
        let (page, begin) = (seg.page, (b.ptr - seg.base) / seg.page);
        let end = (b.ptr + size - seg.base).div_ceil(page);
        let bytes = (end - begin) * page;
        if bytes == 0 || self.reserved + bytes > self.capacity {
            return false;
        }
        let seg = &mut self.segments[b.seg as usize];
        if seg.handles.len() < end as usize {
            seg.handles.resize(end as usize, false);
        }
        seg.handles[begin as usize..end as usize].fill(true);
        self.clock.map(bytes, page);
        self.remove_unmapped(to_map);
        if bytes < b.size {
            let rest = self.cut_tail(to_map, bytes);
            self.insert_unmapped(rest);
        }
        self.blocks[to_map as usize].mapped = true;
        self.try_merge_blocks(to_map, self.block(to_map).prev);
        self.try_merge_blocks(to_map, self.block(to_map).next);
        self.insert_free(to_map);
        self.grow(bytes);
        self.device_allocs += 1;
        true
    }

    /// `unmap_block`: gives back the pages wholly inside the free block `b` (after waiting for
    /// the stream), leaving the mapped ends as free blocks of their own.
    pub(super) fn unmap_block(&mut self, b: u32) {
        let x = self.block(b);
        let seg = &mut self.segments[x.seg as usize];
        let page = seg.page;
        let begin = (x.ptr - seg.base).div_ceil(page);
        let end = (x.ptr + x.size - seg.base) / page;
        if begin >= end {
            return;
        }
        seg.handles[begin as usize..end as usize].fill(false);
        while seg.handles.last() == Some(&false) {
            seg.handles.pop();
        }
        let (start, bytes) = (seg.base + begin * page, (end - begin) * page);
        self.syncs += 1;
        self.clock.unmap(page, end - begin);
        self.remove_free(b);
        if start > x.ptr {
            let head = self.cut_head(b, start - x.ptr);
            self.insert_free(head);
        }
        if bytes < self.block(b).size {
            let tail = self.cut_tail(b, bytes);
            self.insert_free(tail);
        }
        self.blocks[b as usize].mapped = false;
        self.try_merge_blocks(b, self.block(b).prev);
        self.try_merge_blocks(b, self.block(b).next);
        self.insert_unmapped(b);
        self.reserved -= bytes;
        self.device_frees += 1;
    }

    /// `release_expandable_segment`: a segment with nothing mapped gives back its addresses.
    pub(super) fn release_expandable_segment(&mut self, b: u32) {
        self.remove_unmapped(b);
        self.drop_block(b);
    }
}
