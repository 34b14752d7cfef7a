//! How PyTorch's caching allocator gives memory back (c10/cuda/CUDACachingAllocator.cpp,
//! PyTorch 2.11): `release_available_cached_blocks` (oversize blocks, when `max_split_size_mb`
//! is set), `release_cached_blocks` (every whole cached segment, on an out-of-memory before
//! the last retry, and `empty_cache`), `release_block` and `garbage_collect_cached_blocks`
//! (`garbage_collection_threshold`, which acts only under a memory fraction below 1).

use super::model::{Allocator, LARGE, NIL, SMALL};

impl Allocator {
    /// `release_available_cached_blocks`: frees the smallest oversize block of the stream that
    /// covers the request, else oversize blocks from the largest down until enough is freed.
    pub(super) fn release_available_cached_blocks(
        &mut self,
        pool: usize,
        stream: u32,
        size: u64,
    ) -> bool {
        let max_split = self.conf.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let key = (stream, size.max(max_split), 0, 0);
        let set = &self.pools[pool].blocks;
        if let Some(&(s, _, _, b)) = set.range(key..).next() {
            if s == stream && self.block(b).seg == NIL {
                self.release_block(b);
                return true;
            }
        }
        let mut released = 0;
        let mut victims = Vec::new();
        for &(s, bytes, _, b) in set.range(..key).rev() {
            if released >= key.1 || bytes < max_split || s != stream {
                break;
            }
            if self.block(b).seg == NIL {
                released += bytes;
                victims.push(b);
            }
        }
        for b in victims {
            self.release_block(b);
        }
        released >= key.1
    }

    /// `release_cached_blocks` (`release_blocks` of the large pool, then the small): every
    /// cached block that is a whole segment goes back to the driver; free pages of expandable
    /// segments are unmapped, and a segment left with nothing mapped is released.
    pub(super) fn release_cached_blocks(&mut self) {
        self.syncs += 1;
        self.clock.synchronized();
        for pool in [LARGE, SMALL] {
            let cached: Vec<u32> = self.pools[pool].blocks.iter().map(|e| e.3).collect();
            let mut to_unmap = Vec::new();
            for b in cached {
                let x = self.block(b);
                if x.seg != NIL {
                    to_unmap.push(b);
                } else if !x.is_split() {
                    self.release_block(b);
                }
            }
            for b in to_unmap {
                self.unmap_block(b);
                let x = self.block(b);
                if !x.mapped && !x.is_split() {
                    self.release_expandable_segment(b);
                }
            }
        }
    }

    /// `release_block`: `cudaFree` of a cached whole segment.
    pub(super) fn release_block(&mut self, b: u32) {
        let size = self.block(b).size;
        self.remove_free(b);
        self.reserved -= size;
        self.device_frees += 1;
        self.clock.free(size);
        self.drop_block(b);
    }

    /// `garbage_collect_cached_blocks`: past `garbage_collection_threshold` of the allowed
    /// memory, frees whole cached large segments not reused for longer than the average, again
    /// until the excess is freed.
    pub(super) fn garbage_collect_cached_blocks(&mut self) {
        let Some(allowed) = self.allowed else { return };
        let threshold = (self.conf.garbage_collection_threshold * allowed as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let now = self.pools[LARGE].calls;
        let age = |a: &Allocator, b: u32| now - a.block(b).gc_base;
        let (mut total_age, mut count) = (0u64, 0u64);
        for &(_, _, _, b) in &self.pools[LARGE].blocks {
            if !self.block(b).is_split() {
                total_age += age(self, b);
                count += 1;
            }
        }
        let (mut reclaimed, mut freed) = (0u64, true);
        while reclaimed < target && freed && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed = false;
            let cached: Vec<u32> = self.pools[LARGE].blocks.iter().map(|e| e.3).collect();
            for b in cached {
                let x = self.block(b);
                if !x.is_split() && x.seg == NIL && age(self, b) as f64 >= threshold_age {
                    freed = true;
                    reclaimed += x.size;
                    total_age -= age(self, b);
                    count -= 1;
                    self.release_block(b);
                }
            }
        }
    }
}
