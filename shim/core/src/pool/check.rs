//! The pool's invariants, recounted from scratch: what the model and stress tests check after
//! every step. It walks every block and page, so it is for tests, never the hot path.

use std::sync::atomic::Ordering;

use super::block::BlockState;
use super::state::{Kind, State};
use super::{Pool, GRANULE, NIL, SEGMENT};
use crate::source::DeviceSource;

/// Sums taken while walking the segments.
#[derive(Default)]
struct Recount {
    live: u64,
    live_blocks: usize,
    quarantined: u64,
    quarantined_blocks: usize,
    plain_reserved: u64,
    /// Free blocks per [`Kind::slot`].
    free_blocks: [usize; 2],
    /// Pages naming each mapping.
    mapping_pages: Vec<u32>,
}

impl<S: DeviceSource> Pool<S> {
    /// Checks the pool's bookkeeping and returns the first broken invariant, in words: no two
    /// blocks overlap, every byte of every segment lies in exactly one block, no two free blocks
    /// are neighbours (they merge), the free index, live map, quarantine and page counts hold
    /// exactly the blocks they should, and the stats (and their lock-free mirrors) equal a
    /// recount.
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = self.lock();
        st.check()?;
        let mirrors = [
            ("used", self.used.load(Ordering::Relaxed), st.live_total()),
            ("cap", self.cap.load(Ordering::Relaxed), st.stats.cap),
            (
                "quarantined",
                self.quarantined.load(Ordering::Relaxed),
                st.stats.quarantined,
            ),
        ];
        for (name, mirrored, actual) in mirrors {
            if mirrored != actual {
                return Err(format!(
                    "the {} mirror says {}, not {}",
                    name, mirrored, actual
                ));
            }
        }
        Ok(())
    }
}

impl State {
    fn check(&self) -> Result<(), String> {
        let mut n = Recount::default();
        let mut in_segment = vec![false; self.blocks.len()];
        let mut ranges = Vec::new();
        for (s, seg) in self.segments.iter().enumerate() {
            if let Some(seg) = seg {
                ranges.push((seg.addr, seg.size));
                self.check_segment(s as u32, &mut in_segment, &mut n)?;
            }
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            if pair[0].0 + pair[0].1 > pair[1].0 {
                return Err(format!(
                    "segments at {:#x} and {:#x} overlap",
                    pair[0].0, pair[1].0
                ));
            }
        }
        for (i, b) in self.blocks.iter().enumerate() {
            if b.state != BlockState::Vacant && !in_segment[i] {
                return Err(format!("block {} at {:#x} lies in no segment", i, b.addr));
            }
        }
        self.check_vacancies()?;
        self.check_lists(&n)?;
        let reserved = n.plain_reserved + self.mappings.check(&n.mapping_pages)?;
        // A small block pins its own page and no more: the small pool's pieces are a page each.
        for m in self.mappings.iter() {
            let seg = self.segments[m.seg as usize].as_ref();
            if seg.map_or(false, |s| s.kind == Kind::Small) && m.size != SEGMENT {
                return Err(format!(
                    "a piece of {} bytes at {:#x} in the small pool",
                    m.size, m.addr
                ));
            }
        }
        let s = &self.stats;
        let sums = [
            ("live", s.live, n.live),
            ("quarantined", s.quarantined, n.quarantined),
            ("reserved", s.reserved, reserved),
        ];
        for (name, stat, recount) in sums {
            if stat != recount {
                return Err(format!(
                    "stats say {} {} bytes; the blocks hold {}",
                    name, stat, recount
                ));
            }
        }
        if s.peak_live < s.live || s.peak_reserved < s.reserved {
            return Err(format!("a peak is below its current value: {:?}", s));
        }
        if !self.spares.kept.is_empty() || self.spares.room != 0 {
            return Err(format!(
                "{} pieces kept by a trim between calls",
                self.spares.kept.len()
            ));
        }
        if self.synced_mark > self.next_free_seq || self.freed_in_order > self.next_free_seq {
            return Err("a synchronize mark lies past the last free".to_string());
        }
        Ok(())
    }

    /// Walks segment `s`: its blocks tile it, in order, with no two free ones adjacent.
    fn check_segment(&self, s: u32, seen: &mut [bool], n: &mut Recount) -> Result<(), String> {
        let seg = self.segments[s as usize].as_ref().expect("a live segment");
        let kind = seg.kind;
        if seg.size == 0 || seg.size % SEGMENT != 0 || seg.addr % GRANULE != 0 {
            return Err(format!("segment at {:#x} of {} bytes", seg.addr, seg.size));
        }
        let (mut at, mut prev, mut i) = (seg.addr, NIL, seg.first);
        let mut pinned = Vec::new();
        while i != NIL {
            let b = self
                .blocks
                .get(i as usize)
                .ok_or("a block past the arena")?;
            let here = || {
                format!(
                    "block {} at {:#x} ({} bytes) of segment {:#x}",
                    i, b.addr, b.size, seg.addr
                )
            };
            if seen[i as usize] {
                return Err(format!("{} is reached twice", here()));
            }
            seen[i as usize] = true;
            if b.seg != s || b.prev != prev || b.addr != at {
                return Err(format!(
                    "{} is out of place (expected at {:#x})",
                    here(),
                    at
                ));
            }
            if b.size == 0 || b.size % GRANULE != 0 {
                return Err(format!("{} has a size off the granule", here()));
            }
            match b.state {
                BlockState::Free => {
                    n.free_blocks[kind.slot()] += 1;
                    if prev != NIL && self.blocks[prev as usize].state == BlockState::Free {
                        return Err(format!(
                            "{} and the free block before it are not merged",
                            here()
                        ));
                    }
                }
                BlockState::Live | BlockState::Quarantined if b.requested > b.size => {
                    return Err(format!("{} holds a request of {}", here(), b.requested));
                }
                BlockState::Live => {
                    n.live += b.requested;
                    n.live_blocks += 1;
                    pinned.push((b.addr, b.size));
                }
                BlockState::Quarantined => {
                    n.quarantined += b.size;
                    n.quarantined_blocks += 1;
                    pinned.push((b.addr, b.size));
                }
                BlockState::Vacant => return Err(format!("{} is vacant", here())),
            }
            at += b.size;
            prev = i;
            i = b.next;
        }
        if at != seg.addr + seg.size {
            return Err(format!(
                "segment at {:#x}: its blocks end at {:#x}, not {:#x}",
                seg.addr,
                at,
                seg.addr + seg.size
            ));
        }
        match &seg.pages {
            Some(pages) => pages
                .check(&pinned, &self.mappings, &mut n.mapping_pages)
                .map_err(|e| format!("segment at {:#x}: {}", seg.addr, e)),
            None => {
                n.plain_reserved += seg.size;
                Ok(())
            }
        }
    }

    /// The vacant lists name exactly the empty slots, each once.
    fn check_vacancies(&self) -> Result<(), String> {
        let mut listed = vec![false; self.blocks.len()];
        for &i in &self.vacant_blocks {
            if self.blocks[i as usize].state != BlockState::Vacant
                || std::mem::replace(&mut listed[i as usize], true)
            {
                return Err(format!("block {} is listed vacant wrongly", i));
            }
        }
        let vacant = self
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Vacant)
            .count();
        let empty = self.segments.iter().filter(|s| s.is_none()).count();
        let mut segs = self.vacant_segments.clone();
        segs.sort_unstable();
        segs.dedup();
        if vacant != self.vacant_blocks.len()
            || empty != self.vacant_segments.len()
            || segs.len() != empty
            || segs.iter().any(|&s| self.segments[s as usize].is_some())
        {
            return Err("the vacant lists disagree with the arenas".to_string());
        }
        Ok(())
    }

    /// The free index, live map and quarantine hold exactly the blocks of their state.
    fn check_lists(&self, n: &Recount) -> Result<(), String> {
        for kind in Kind::ALL {
            let members = self.index[kind.slot()].members(&self.blocks)?;
            for &i in &members {
                if self.blocks[i as usize].state != BlockState::Free || self.kind(i) != kind {
                    return Err(format!(
                        "the {:?} free index holds block {}, which is not a free block of its pool",
                        kind, i
                    ));
                }
            }
            if members.len() != n.free_blocks[kind.slot()] {
                return Err(format!(
                    "the {:?} free index holds {} blocks; the segments have {} free",
                    kind,
                    members.len(),
                    n.free_blocks[kind.slot()]
                ));
            }
        }
        for (&addr, &i) in self.live.iter() {
            let b = &self.blocks[i as usize];
            if b.state != BlockState::Live || b.addr != addr {
                return Err(format!("the live map names block {} for {:#x}", i, addr));
            }
        }
        if self.live.len() != n.live_blocks {
            return Err(format!(
                "{} blocks in the live map, {} live",
                self.live.len(),
                n.live_blocks
            ));
        }
        let mut last = None;
        for &(seq, i) in &self.quarantine {
            if self.blocks[i as usize].state != BlockState::Quarantined
                || seq >= self.next_free_seq
                || last.map_or(false, |l| seq <= l)
            {
                return Err(format!(
                    "the quarantine holds block {} (free number {}) wrongly",
                    i, seq
                ));
            }
            last = Some(seq);
        }
        if self.quarantine.len() != n.quarantined_blocks {
            return Err(format!(
                "{} blocks in quarantine, {} quarantined",
                self.quarantine.len(),
                n.quarantined_blocks
            ));
        }
        Ok(())
    }
}
