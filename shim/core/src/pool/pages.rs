//! Virtual segments: an address range reserved from the device and backed by device memory only
//! where blocks are, in 2 MiB pages mapped a run at a time. A run ("mapping") goes back to the
//! device once no block touches any of its pages, so a long-lived block in the middle of a big
//! segment pins its own pages, not the segment: what PyTorch's `expandable_segments` builds on.
//!
//! Pure bookkeeping: which page is mapped by which run, and how many live or quarantined blocks
//! touch it. Whether a run is idle is asked of its pages when a trim or a small request needs
//! to know, not kept per run: a block's pages are counted on its page entries alone, so an
//! 8 MiB pair pays for four counts, not for four runs' counts beside them (docs/benchmarks.md,
//! session 27). The pool makes the device calls.

use super::{NIL, SEGMENT};

#[derive(Clone, Copy)]
pub(crate) struct Page {
    /// Live or quarantined blocks that touch the page; a mapped page with none is cached.
    uses: u32,
    /// The mapping that backs it, or `NIL`.
    mapping: u32,
    /// [`Mappings::begun`] when a block last stopped touching it: an idle page went idle
    /// before every synchronize begun later.
    idle_since: u64,
}

/// A virtual segment's pages.
pub(crate) struct Pages {
    base: u64,
    pages: Vec<Page>,
}

/// One piece of device memory mapped at a run of pages, given back whole.
pub(crate) struct Mapping {
    pub addr: u64,
    pub size: u64,
    /// What the device returned for it (its physical handle), needed to give it back.
    pub token: u64,
    /// The virtual segment it lies in.
    pub seg: u32,
}

impl Pages {
    pub(crate) fn new(base: u64, size: u64) -> Pages {
        Pages {
            base,
            pages: vec![
                Page {
                    uses: 0,
                    mapping: NIL,
                    idle_since: 0,
                };
                (size / SEGMENT) as usize
            ],
        }
    }

    fn range(&self, addr: u64, size: u64) -> std::ops::Range<usize> {
        let first = (addr - self.base) / SEGMENT;
        let last = (addr + size.max(1) - 1 - self.base) / SEGMENT;
        first as usize..last as usize + 1
    }

    /// The runs of unmapped pages under `[addr, addr + size)`, as `(addr, size)`.
    pub(crate) fn unmapped(&self, addr: u64, size: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for p in self.range(addr, size) {
            if self.pages[p].mapping != NIL {
                continue;
            }
            let at = self.base + p as u64 * SEGMENT;
            match runs.last_mut() {
                Some(run) if run.0 + run.1 == at => run.1 += SEGMENT,
                _ => runs.push((at, SEGMENT)),
            }
        }
        runs
    }

    /// The mapping backing the page at `addr`, or `NIL`.
    pub(crate) fn mapping_at(&self, addr: u64) -> u32 {
        self.pages[((addr - self.base) / SEGMENT) as usize].mapping
    }

    /// Whether every page under `[addr, addr + size)` is mapped.
    pub(crate) fn is_mapped(&self, addr: u64, size: u64) -> bool {
        self.range(addr, size).all(|p| self.pages[p].mapping != NIL)
    }

    /// Counts a block on `[addr, addr + size)` (all mapped).
    pub(crate) fn pin(&mut self, addr: u64, size: u64) {
        let range = self.range(addr, size);
        for page in &mut self.pages[range] {
            page.uses += 1;
        }
    }

    /// Takes back what [`Pages::pin`] counted, `begun` synchronizes ([`Mappings::begun`])
    /// into the pool's life.
    pub(crate) fn unpin(&mut self, addr: u64, size: u64, begun: u64) {
        let range = self.range(addr, size);
        for page in &mut self.pages[range] {
            page.uses -= 1;
            page.idle_since = begun;
        }
    }

    /// Whether no block touches mapping `m`.
    pub(crate) fn is_idle(&self, m: &Mapping) -> bool {
        self.range(m.addr, m.size).all(|p| self.pages[p].uses == 0)
    }

    /// Whether mapping `m` is idle and was idle before a synchronize that completed
    /// ([`Mappings::settled_below`]), so the device no longer uses it and it may go back
    /// without another.
    pub(crate) fn is_settled(&self, m: &Mapping, settled_below: u64) -> bool {
        self.range(m.addr, m.size)
            .all(|p| self.pages[p].uses == 0 && self.pages[p].idle_since < settled_below)
    }

    /// Checks the pages against `blocks`, the `(addr, size)` of every live or quarantined
    /// block in the segment: each block's pages mapped, each page's count of blocks right and
    /// idle since no later than now, each mapped page named by a mapping that covers it. Adds
    /// to `counts`, by mapping, the pages that name it. For
    /// [`super::Pool::check_invariants`].
    pub(crate) fn check(
        &self,
        blocks: &[(u64, u64)],
        mappings: &Mappings,
        counts: &mut Vec<u32>,
    ) -> Result<(), String> {
        let mut uses = vec![0u32; self.pages.len()];
        for &(addr, size) in blocks {
            if !self.is_mapped(addr, size) {
                return Err(format!(
                    "block at {:#x} ({} bytes) is not all mapped",
                    addr, size
                ));
            }
            for p in self.range(addr, size) {
                uses[p] += 1;
            }
        }
        counts.resize(counts.len().max(mappings.runs.len()), 0);
        for (p, page) in self.pages.iter().enumerate() {
            let at = self.base + p as u64 * SEGMENT;
            if page.uses != uses[p] {
                return Err(format!(
                    "page at {:#x} counts {} blocks, not {}",
                    at, page.uses, uses[p]
                ));
            }
            if page.idle_since > mappings.begun {
                return Err(format!(
                    "page at {:#x} idle since synchronize {} of {}",
                    at, page.idle_since, mappings.begun
                ));
            }
            if page.mapping == NIL {
                continue;
            }
            match mappings.runs.get(page.mapping as usize) {
                Some(Some(m)) if m.addr <= at && at < m.addr + m.size => {}
                _ => {
                    return Err(format!(
                        "page at {:#x} names mapping {}, which does not cover it",
                        at, page.mapping
                    ))
                }
            }
            counts[page.mapping as usize] += 1;
        }
        Ok(())
    }

    /// Names `mapping` as the pages' backing, new memory the device has never used.
    fn set(&mut self, addr: u64, size: u64, mapping: u32) {
        for p in self.range(addr, size) {
            self.pages[p].mapping = mapping;
            self.pages[p].idle_since = 0;
        }
    }

    /// Whether no page is mapped (the segment's address range can go back).
    pub(crate) fn is_unmapped(&self) -> bool {
        self.pages.iter().all(|p| p.mapping == NIL)
    }
}

/// Every mapping of a pool, by number.
#[derive(Default)]
pub(crate) struct Mappings {
    runs: Vec<Option<Mapping>>,
    vacant: Vec<u32>,
    /// Synchronizes of the pool's begun; a page going idle notes the count.
    begun: u64,
    /// A page idle since a count below this went idle before a synchronize that completed.
    settled_below: u64,
}

impl Mappings {
    /// Records that `[addr, addr + size)` of virtual segment `seg` is now backed.
    pub(crate) fn add(&mut self, pages: &mut Pages, seg: u32, run: (u64, u64), token: u64) {
        let (addr, size) = run;
        let m = Mapping {
            addr,
            size,
            token,
            seg,
        };
        let i = match self.vacant.pop() {
            Some(i) => {
                self.runs[i as usize] = Some(m);
                i
            }
            None => {
                self.runs.push(Some(m));
                (self.runs.len() - 1) as u32
            }
        };
        pages.set(addr, size, i);
    }

    /// Forgets mapping `i`; the caller gives it back to the device.
    pub(crate) fn remove(&mut self, pages: &mut Pages, i: u32) -> Mapping {
        let m = self.runs[i as usize]
            .take()
            .expect("only live mappings are released");
        pages.set(m.addr, m.size, NIL);
        self.vacant.push(i);
        m
    }

    /// Synchronizes begun so far: what [`Pages::unpin`] notes.
    pub(crate) fn begun(&self) -> u64 {
        self.begun
    }

    /// Notes a synchronize beginning; returns its ticket for [`Mappings::end_synchronize`].
    pub(crate) fn begin_synchronize(&mut self) -> u64 {
        self.begun += 1;
        self.begun
    }

    /// After the synchronize with `ticket`: if it `completed`, every page idle since before it
    /// began is settled. Two at once on two threads may end in either order: each settles only
    /// what went idle before it began.
    pub(crate) fn end_synchronize(&mut self, ticket: u64, completed: bool) {
        if completed {
            self.settled_below = self.settled_below.max(ticket);
        }
    }

    /// Below which a page's [`Page::idle_since`] is settled ([`Pages::is_settled`]).
    pub(crate) fn settled_below(&self) -> u64 {
        self.settled_below
    }

    /// Addresses in `(addr, addr + len]` of segment `seg` where a window of `rounded` bytes
    /// may start to use mapped memory: where a mapping begins, or where the window ends as one
    /// does. Ending there, a request uses the tail of a piece and leaves the next whole, where a
    /// window from the piece's start would end inside one and keep all of it (seg_infer_long's
    /// 144 MiB block kept a 16 MiB piece for 0.6 MiB of it: docs/benchmarks.md, session 16).
    pub(crate) fn window_starts(&self, seg: u32, addr: u64, len: u64, rounded: u64) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for m in self.runs.iter().flatten().filter(|m| m.seg == seg) {
            let ending = (m.addr + m.size).checked_sub(rounded);
            for at in [Some(m.addr), ending].into_iter().flatten() {
                if at > addr && at <= addr + len && at % SEGMENT == 0 {
                    out.push(at);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Checks each mapping's pages against `counts` (from [`Pages::check`] over every virtual
    /// segment) and returns the bytes mapped.
    pub(crate) fn check(&self, counts: &[u32]) -> Result<u64, String> {
        if self.settled_below > self.begun {
            return Err(format!(
                "{} synchronizes begun, but those before {} settled",
                self.begun, self.settled_below
            ));
        }
        let mut total = 0;
        for (i, m) in self.runs.iter().enumerate() {
            if let Some(m) = m {
                let pages = counts.get(i).copied().unwrap_or(0);
                if u64::from(pages) * SEGMENT != m.size {
                    return Err(format!(
                        "mapping at {:#x} of {} bytes backs {} pages",
                        m.addr, m.size, pages
                    ));
                }
                total += m.size;
            }
        }
        let vacant = self.runs.iter().filter(|m| m.is_none()).count();
        if vacant != self.vacant.len() {
            return Err(format!(
                "{} empty mapping slots but {} listed vacant",
                vacant,
                self.vacant.len()
            ));
        }
        Ok(total)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs.iter().all(|m| m.is_none())
    }

    /// Every live mapping.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.runs.iter().flatten()
    }

    /// Every live mapping with its number.
    pub(crate) fn numbered(&self) -> impl Iterator<Item = (u32, &Mapping)> {
        self.runs
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| (i as u32, m)))
    }

    pub(crate) fn get(&self, i: u32) -> &Mapping {
        self.runs[i as usize]
            .as_ref()
            .expect("a mapped page names a live mapping")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_mapping_is_idle_once_no_block_touches_it() {
        let base = 0x7f00_0000_0000;
        let mut pages = Pages::new(base, 16 * MIB);
        let mut maps = Mappings::default();
        assert_eq!(pages.unmapped(base + MIB, 4 * MIB), vec![(base, 6 * MIB)]);
        maps.add(&mut pages, 0, (base, 6 * MIB), 42);
        assert!(pages.is_mapped(base + MIB, 4 * MIB));
        assert_eq!(
            pages.unmapped(base + 5 * MIB, 2 * MIB),
            vec![(base + 6 * MIB, 2 * MIB)]
        );
        let idle = |pages: &Pages, maps: &Mappings| -> Vec<u32> {
            let idle = maps.numbered().filter(|(_, m)| pages.is_idle(m));
            idle.map(|(i, _)| i).collect()
        };
        pages.pin(base + MIB, 256);
        pages.pin(base + MIB + 256, 4 * MIB);
        assert!(idle(&pages, &maps).is_empty());
        pages.unpin(base + MIB, 256, maps.begun());
        assert!(idle(&pages, &maps).is_empty());
        pages.unpin(base + MIB + 256, 4 * MIB, maps.begun());
        let idle = idle(&pages, &maps);
        assert_eq!(idle.len(), 1);
        let m = maps.remove(&mut pages, idle[0]);
        assert_eq!((m.addr, m.size, m.token), (base, 6 * MIB, 42));
        assert!(pages.is_unmapped());
    }

    /// A mapping may go back with no synchronize of its own once every page of it was idle
    /// before a synchronize that completed: not one a block left while it ran, not after one
    /// that failed, and of two at once, only what the one that completed began after. Memory
    /// mapped since and never touched, the device never used.
    #[test]
    fn a_mapping_is_settled_once_idle_through_a_synchronize_that_completed() {
        let base = 0x7f00_0000_0000;
        let mut pages = Pages::new(base, 16 * MIB);
        let mut maps = Mappings::default();
        maps.add(&mut pages, 0, (base, 4 * MIB), 1);
        maps.add(&mut pages, 0, (base + 4 * MIB, 4 * MIB), 2);
        let settled = |pages: &Pages, maps: &Mappings, i: u32| {
            pages.is_settled(maps.get(i), maps.settled_below())
        };
        assert!(!settled(&pages, &maps, 0), "no synchronize yet");

        pages.pin(base + 3 * MIB, 2 * MIB); // a block across both
        let first = maps.begin_synchronize();
        pages.unpin(base + 3 * MIB, 2 * MIB, maps.begun()); // freed while it runs
        maps.end_synchronize(first, true);
        assert!(!settled(&pages, &maps, 0) && !settled(&pages, &maps, 1));

        let failed = maps.begin_synchronize();
        maps.end_synchronize(failed, false);
        assert!(!settled(&pages, &maps, 0), "a failed one settles nothing");

        let early = maps.begin_synchronize();
        pages.pin(base + 6 * MIB, MIB);
        pages.unpin(base + 6 * MIB, MIB, maps.begun()); // between the two
        let late = maps.begin_synchronize();
        maps.end_synchronize(early, true);
        assert!(settled(&pages, &maps, 0), "idle before the early one");
        assert!(
            !settled(&pages, &maps, 1),
            "idle only after the early one began"
        );
        maps.end_synchronize(late, true);
        assert!(settled(&pages, &maps, 1), "idle before the late one");

        pages.pin(base + MIB, 256);
        assert!(!settled(&pages, &maps, 0), "busy again");
        pages.unpin(base + MIB, 256, maps.begun());
        let old = maps.remove(&mut pages, 0);
        maps.add(&mut pages, 0, (old.addr, old.size), 3);
        assert!(settled(&pages, &maps, 0), "new memory, never touched");
    }
}
