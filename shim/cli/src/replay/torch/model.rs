//! PyTorch's `DeviceCachingAllocator` (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.11), the
//! parts that decide how much device memory a program's requests take: `round_size`,
//! `get_pool`, `get_allocation_size`, `get_free_block`, `should_split`, `alloc_found_block`,
//! `alloc_block`, `free_block` and `try_merge_blocks`. Each function here carries the name of
//! the one it follows; release and garbage collection are in `release.rs`, expandable
//! segments in `expandable.rs`.

use std::collections::BTreeSet;

use rocmguard_core::pool::{Layout, Unit};

use super::conf::{TorchConf, INTERVALS};
use super::expandable::Segment;
use crate::replay::cost::{Call, Clock};

/// `kMinBlockSize`: every size is rounded to a multiple of 512 bytes.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// `kSmallSize`: requests up to 1 MiB come from the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: small requests are packed in 2 MiB segments.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer` (`large_segment_size()`): requests of 1-10 MiB share 20 MiB segments.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: from 10 MiB a request gets a segment of its own size.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: ... rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = 2 << 20;

/// No block.
pub(super) const NIL: u32 = u32::MAX;
/// Pool indices: `small_blocks` and `large_blocks`.
pub(super) const SMALL: usize = 0;
pub(super) const LARGE: usize = 1;

/// `Block`: a range of a segment, free or handed out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    pub ptr: u64,
    pub size: u64,
    pub prev: u32,
    pub next: u32,
    pub stream: u32,
    /// The expandable segment it lies in, or [`NIL`].
    pub seg: u32,
    pub pool: usize,
    pub allocated: bool,
    /// False for the unmapped ranges of expandable segments.
    pub mapped: bool,
    /// `gc_count_base`: the pool's search count when it was cached.
    pub gc_base: u64,
}

impl Block {
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

/// `BlockPool`: the free blocks of one size class.
#[derive(Default)]
pub(super) struct BlockPool {
    /// `blocks`, ordered as `BlockComparatorSize`: (stream, size, address), then our index.
    pub blocks: BTreeSet<(u32, u64, u64, u32)>,
    /// `unmapped`, ordered as `BlockComparatorAddress`: (stream, address).
    pub unmapped: BTreeSet<(u32, u64, u32)>,
    /// `get_free_blocks_call_count`: the clock garbage collection ages blocks by.
    pub calls: u64,
}

/// One device's caching allocator over a device of `capacity` bytes.
pub struct Allocator {
    pub(super) conf: TorchConf,
    pub(super) blocks: Vec<Block>,
    spare: Vec<u32>,
    pub(super) pools: [BlockPool; 2],
    pub(super) segments: Vec<Segment>,
    /// `total_allocated_memory`: bytes held from the device (reserved).
    pub reserved: u64,
    pub peak_reserved: u64,
    pub(super) capacity: u64,
    /// `allowed_memory_maximum`: set by a memory fraction below 1.
    pub(super) allowed: Option<u64>,
    /// Where the next expandable segment's reserved range starts (upwards from here).
    pub(super) next_address: u64,
    /// Where the next `cudaMalloc`'d segment ends (downwards from `next_address`'s start). Ties
    /// between cached blocks of one size go to the lower address, so the order matters: the
    /// driver handed out lower addresses to later large segments in the traces' own rows, and
    /// with addresses going down the model reserves exactly what w4_swap, beam_search and
    /// moe_top2 recorded (upwards: 4.1%, 5.1% and 0.5% apart), at the cost of decode (1.3% over
    /// where upwards was exact); no trace is 3% apart either way.
    pub(super) next_malloc: u64,
    /// `num_device_alloc` / `num_device_free`: cudaMalloc and map calls, cudaFree and unmaps.
    pub device_allocs: u64,
    pub device_frees: u64,
    /// `num_sync_all_streams` and the waits before unmapping.
    pub syncs: u64,
    pub clock: Clock,
}

impl Allocator {
    pub fn new(conf: &TorchConf, capacity: u64, clock: Clock) -> Allocator {
        Allocator {
            conf: conf.clone(),
            blocks: Vec::new(),
            spare: Vec::new(),
            pools: [BlockPool::default(), BlockPool::default()],
            segments: Vec::new(),
            reserved: 0,
            peak_reserved: 0,
            capacity,
            allowed: conf.limit(capacity),
            next_address: 0x7f00_0000_0000,
            next_malloc: 0x7f00_0000_0000,
            device_allocs: 0,
            device_frees: 0,
            syncs: 0,
            clock,
        }
    }

    /// `malloc`: the block serving a request of `orig_size` bytes on `stream`, or `None` for
    /// PyTorch's out-of-memory error (after freeing cached blocks and retrying, as it does).
    pub fn malloc(&mut self, orig_size: u64, stream: u32) -> Option<u32> {
        let size = round_size(&self.conf, orig_size);
        let pool = if size <= SMALL_SIZE { SMALL } else { LARGE };
        let alloc_size = allocation_size(size);
        let mut found = self.get_free_block(pool, stream, size);
        if found.is_none() {
            if self.gc_enabled() {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(pool, stream, size, alloc_size);
            if found.is_none() && self.release_available_cached_blocks(pool, stream, size) {
                found = self.alloc_block(pool, stream, size, alloc_size);
            }
            if found.is_none() {
                self.release_cached_blocks();
                found = self.alloc_block(pool, stream, size, alloc_size);
            }
        }
        let block = found?;
        let split = self.should_split(block, size);
        Some(self.alloc_found_block(block, size, stream, split))
    }

    /// `free` then `free_block` (no stream uses in a trace: no events to wait for).
    pub fn free(&mut self, block: u32) {
        self.blocks[block as usize].allocated = false;
        for other in [self.block(block).prev, self.block(block).next] {
            self.try_merge_blocks(block, other);
        }
        self.insert_free(block);
    }

    pub(super) fn gc_enabled(&self) -> bool {
        self.allowed.is_some() && self.conf.garbage_collection_threshold > 0.0
    }

    /// `get_free_block`: the smallest cached block of the stream that fits, within the
    /// `max_split_size` rules; taken out of the pool.
    fn get_free_block(&mut self, pool: usize, stream: u32, size: u64) -> Option<u32> {
        if self.gc_enabled() {
            self.pools[pool].calls += 1;
        }
        let mut it = self.pools[pool].blocks.range((stream, size, 0, 0)..);
        let mut found = *it.next().filter(|e| e.0 == stream)?;
        // An expandable block counts as the size it can grow to: prefer a block that does not
        // end at the segment's unmapped tail when one is smaller by that measure.
        while self.block(found.3).seg != NIL {
            match it.next() {
                Some(&next)
                    if next.0 == stream
                        && self.expandable_size(next.3) < self.expandable_size(found.3) =>
                {
                    found = next
                }
                _ => break,
            }
        }
        let (max_split, b) = (self.conf.max_split_size, self.block(found.3));
        // Do not return an oversized block for a large request; an oversized request takes
        // one only within `max_non_split_rounding` of its size.
        if (size < max_split && b.size >= max_split)
            || (size >= max_split && b.size >= size + self.conf.max_non_split_rounding)
        {
            return None;
        }
        self.pools[pool].blocks.remove(&found);
        Some(found.3)
    }

    fn expandable_size(&self, b: u32) -> u64 {
        let block = self.block(b);
        match block.next {
            NIL => block.size,
            n if !self.block(n).mapped => block.size + self.block(n).size,
            _ => block.size,
        }
    }

    /// `should_split`: small blocks and expandable segments split off any 512 bytes; large
    /// blocks only below `max_split_size` and with more than 1 MiB left.
    fn should_split(&self, block: u32, size: u64) -> bool {
        let b = self.block(block);
        let remaining = b.size - size;
        if b.pool == SMALL || self.conf.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.conf.max_split_size && remaining > SMALL_SIZE
        }
    }

    /// `alloc_found_block`: hands out the front of `block`, the rest staying cached.
    fn alloc_found_block(&mut self, block: u32, size: u64, stream: u32, split: bool) -> u32 {
        if !split {
            self.blocks[block as usize].allocated = true;
            return block;
        }
        let front = self.cut_head(block, size);
        let f = &mut self.blocks[front as usize];
        f.stream = stream;
        f.allocated = true;
        self.insert_free(block);
        front
    }

    /// `alloc_block`: a new segment from the driver (`cudaMalloc` of `alloc_size`), or room
    /// mapped in an expandable segment for `size`.
    fn alloc_block(&mut self, pool: usize, stream: u32, size: u64, alloc_size: u64) -> Option<u32> {
        if self
            .allowed
            .is_some_and(|max| self.reserved + alloc_size > max)
        {
            return None;
        }
        if self.conf.expandable_segments {
            return self.try_allocate_expandable_block(pool, stream, size);
        }
        if self.reserved + alloc_size > self.capacity {
            return None;
        }
        self.grow(alloc_size);
        self.device_allocs += 1;
        self.clock.add(Call::Malloc, alloc_size, 1);
        self.next_malloc -= alloc_size.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        let ptr = self.next_malloc;
        Some(self.new_block(Block {
            ptr,
            size: alloc_size,
            prev: NIL,
            next: NIL,
            stream,
            seg: NIL,
            pool,
            allocated: false,
            mapped: true,
            gc_base: 0,
        }))
    }

    /// `try_merge_blocks`: folds a free neighbour `src` into `dst` (both mapped or both not).
    pub(super) fn try_merge_blocks(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let s = self.block(src);
        if s.allocated || s.mapped != self.block(dst).mapped {
            return 0;
        }
        if s.mapped {
            self.pools[s.pool]
                .blocks
                .remove(&(s.stream, s.size, s.ptr, src));
        } else {
            self.pools[s.pool].unmapped.remove(&(s.stream, s.ptr, src));
        }
        if self.block(dst).prev == src {
            self.blocks[dst as usize].ptr = s.ptr;
            self.blocks[dst as usize].prev = s.prev;
            if s.prev != NIL {
                self.blocks[s.prev as usize].next = dst;
            }
        } else {
            self.blocks[dst as usize].next = s.next;
            if s.next != NIL {
                self.blocks[s.next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.spare.push(src);
        s.size
    }

    pub(super) fn grow(&mut self, bytes: u64) {
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    pub(super) fn block(&self, b: u32) -> Block {
        self.blocks[b as usize]
    }

    pub(super) fn new_block(&mut self, block: Block) -> u32 {
        match self.spare.pop() {
            Some(i) => {
                self.blocks[i as usize] = block;
                i
            }
            None => {
                self.blocks.push(block);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    /// Where block `b` starts; `None` for [`NIL`].
    pub fn block_start(&self, b: u32) -> Option<u64> {
        (b != NIL).then(|| self.blocks[b as usize].ptr)
    }

    /// The device memory held now, as units that go back whole (a segment from `cudaMalloc`,
    /// a mapped page of an expandable segment), and the blocks handed out: for `replay
    /// --peak-layout`, never for a decision.
    pub fn layout(&self) -> Layout {
        let mut spare = vec![false; self.blocks.len()];
        for &i in &self.spare {
            spare[i as usize] = true;
        }
        let mut layout = Layout::default();
        for (i, b) in self.blocks.iter().enumerate() {
            if spare[i] {
                continue;
            }
            if b.allocated {
                layout.busy.push((b.ptr, b.size));
            }
            if b.seg == NIL && b.prev == NIL {
                let mut size = 0;
                let mut j = i as u32;
                while j != NIL {
                    size += self.blocks[j as usize].size;
                    j = self.blocks[j as usize].next;
                }
                layout.units.push(Unit {
                    addr: b.ptr,
                    size,
                    piece: false,
                });
            }
        }
        for seg in &self.segments {
            layout
                .units
                .extend(seg.mapped_pages().map(|(addr, size)| Unit {
                    addr,
                    size,
                    piece: true,
                }));
        }
        layout.units.sort_unstable_by_key(|u| u.addr);
        layout.busy.sort_unstable();
        layout
    }

    /// Cuts block `b` after its first `keep` bytes: the rest becomes a new block like it, linked
    /// after it, and is returned (filed nowhere).
    pub(super) fn cut_tail(&mut self, b: u32, keep: u64) -> u32 {
        let x = self.block(b);
        let tail = self.new_block(Block {
            ptr: x.ptr + keep,
            size: x.size - keep,
            prev: b,
            ..x
        });
        if x.next != NIL {
            self.blocks[x.next as usize].prev = tail;
        }
        let y = &mut self.blocks[b as usize];
        y.next = tail;
        y.size = keep;
        tail
    }

    /// Cuts the first `bytes` of block `b` off into a new block like it, linked before it, and
    /// returns that (filed nowhere); `b` keeps the rest.
    pub(super) fn cut_head(&mut self, b: u32, bytes: u64) -> u32 {
        let x = self.block(b);
        let head = self.new_block(Block {
            size: bytes,
            next: b,
            ..x
        });
        if x.prev != NIL {
            self.blocks[x.prev as usize].next = head;
        }
        let y = &mut self.blocks[b as usize];
        y.prev = head;
        y.ptr += bytes;
        y.size -= bytes;
        head
    }

    pub(super) fn drop_block(&mut self, b: u32) {
        self.spare.push(b);
    }

    /// `insert_into_blocks`: caches a free mapped block, noting the pool's search count.
    pub(super) fn insert_free(&mut self, b: u32) {
        let pool = self.block(b).pool;
        let calls = self.pools[pool].calls;
        let block = &mut self.blocks[b as usize];
        block.gc_base = calls;
        self.pools[pool]
            .blocks
            .insert((block.stream, block.size, block.ptr, b));
    }

    pub(super) fn remove_free(&mut self, b: u32) {
        let x = self.block(b);
        self.pools[x.pool]
            .blocks
            .remove(&(x.stream, x.size, x.ptr, b));
    }

    pub(super) fn insert_unmapped(&mut self, b: u32) {
        let x = self.block(b);
        self.pools[x.pool].unmapped.insert((x.stream, x.ptr, b));
    }

    pub(super) fn remove_unmapped(&mut self, b: u32) {
        let x = self.block(b);
        self.pools[x.pool].unmapped.remove(&(x.stream, x.ptr, b));
    }
}

/// `round_size`: at least 512 bytes, a multiple of 512, or the next of `roundup_power2_divisions`
/// steps between powers of two where that is set for the size.
pub fn round_size(conf: &TorchConf, size: u64) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    // `roundup_power2_divisions(size)`: intervals from 1 MiB (2^20) up, the last open-ended.
    let index = (size.ilog2() as usize)
        .saturating_sub(20)
        .min(INTERVALS - 1);
    let divisions = conf.roundup_power2_divisions[index];
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

/// `roundup_power2_next_division`: 1200 with 4 divisions lies in 1024..2048, cut at 1280,
/// 1536 and 1792: 1280.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.ilog2();
    if step == 0 {
        return floor << 1;
    }
    let below = size & !(step - 1);
    if below == size {
        size
    } else {
        below + step
    }
}

/// `get_allocation_size`: what the driver is asked for when no cached block fits.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_as_pytorch_rounds_them() {
        let d = TorchConf::default();
        assert_eq!(round_size(&d, 1), 512);
        assert_eq!(round_size(&d, 513), 1024);
        assert_eq!(round_size(&d, 3 << 20), 3 << 20);
        let four = TorchConf::parse("roundup_power2_divisions:4").unwrap();
        // PyTorch's own example: 1200 rounds to 1280 (but sizes at most 512 x 4 stay at 512s).
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(round_size(&four, 1200), 1536);
        assert_eq!(round_size(&four, (5 << 20) + 1), 6 << 20);
        assert_eq!(allocation_size(512), 2 << 20);
        assert_eq!(allocation_size(3 << 20), 20 << 20);
        assert_eq!(allocation_size((10 << 20) + 1), 12 << 20);
    }
}
