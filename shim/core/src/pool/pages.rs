//! Virtual segments: an address range reserved from the device and backed by device memory only
//! where blocks are, in 2 MiB pages mapped a run at a time. A run ("mapping") goes back to the
//! device once no block touches any of its pages, so a long-lived block in the middle of a big
//! segment pins its own pages, not the segment: what PyTorch's `expandable_segments` builds on.
//!
//! Pure bookkeeping: which page is mapped by which run, and how many live or quarantined blocks
//! touch it. The pool makes the device calls.

use super::{NIL, SEGMENT};

#[derive(Clone, Copy)]
pub(crate) struct Page {
    /// Live or quarantined blocks that touch the page; a mapped page with none is cached.
    uses: u32,
    /// The mapping that backs it, or `NIL`.
    mapping: u32,
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
    /// Pages of the run that some block touches ([`COUNT`]; releasable at 0), and while there
    /// are none, whether the device may still use it ([`PENDING`], [`SETTLED`]).
    busy: u32,
}

/// An idle mapping's flag: idle when a synchronize of the pool's began.
const PENDING: u32 = 1 << 31;
/// An idle mapping's flag: idle since before a synchronize that completed, so the device no
/// longer uses it and it may go back without another. The pin that makes it busy clears both
/// flags in the same store as its count (no cost on the hot path).
const SETTLED: u32 = 1 << 30;
/// The count of busy pages in [`Mapping::busy`].
const COUNT: u32 = SETTLED - 1;

impl Pages {
    pub(crate) fn new(base: u64, size: u64) -> Pages {
        Pages {
            base,
            pages: vec![
                Page {
                    uses: 0,
                    mapping: NIL,
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
    pub(crate) fn pin(&mut self, mappings: &mut Mappings, addr: u64, size: u64) {
        let range = self.range(addr, size);
        for page in &mut self.pages[range] {
            if page.uses == 0 {
                let m = mappings.get_mut(page.mapping);
                m.busy = (m.busy & COUNT) + 1;
            }
            page.uses += 1;
        }
    }

    /// Takes back what [`Pages::pin`] counted.
    pub(crate) fn unpin(&mut self, mappings: &mut Mappings, addr: u64, size: u64) {
        let range = self.range(addr, size);
        for page in &mut self.pages[range] {
            page.uses -= 1;
            if page.uses == 0 {
                mappings.get_mut(page.mapping).busy -= 1;
            }
        }
    }

    /// Checks the pages against `blocks`, the `(addr, size)` of every live or quarantined
    /// block in the segment: each block's pages mapped, each page's count of blocks right, each
    /// mapped page named by a mapping that covers it. Adds to `counts`, by mapping, the pages
    /// that name it and those of them some block touches. For
    /// [`super::Pool::check_invariants`].
    pub(crate) fn check(
        &self,
        blocks: &[(u64, u64)],
        mappings: &Mappings,
        counts: &mut Vec<(u32, u32)>,
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
        counts.resize(counts.len().max(mappings.runs.len()), (0, 0));
        for (p, page) in self.pages.iter().enumerate() {
            let at = self.base + p as u64 * SEGMENT;
            if page.uses != uses[p] {
                return Err(format!(
                    "page at {:#x} counts {} blocks, not {}",
                    at, page.uses, uses[p]
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
            let c = &mut counts[page.mapping as usize];
            c.0 += 1;
            c.1 += u32::from(page.uses > 0);
        }
        Ok(())
    }

    fn set(&mut self, addr: u64, size: u64, mapping: u32) {
        for p in self.range(addr, size) {
            self.pages[p].mapping = mapping;
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
    /// Whether a synchronize's flags are out ([`Mappings::begin_synchronize`]).
    flagged: bool,
}

impl Mappings {
    fn get_mut(&mut self, i: u32) -> &mut Mapping {
        self.runs[i as usize]
            .as_mut()
            .expect("a mapped page names a live mapping")
    }

    /// Records that `[addr, addr + size)` of virtual segment `seg` is now backed.
    pub(crate) fn add(&mut self, pages: &mut Pages, seg: u32, run: (u64, u64), token: u64) {
        let (addr, size) = run;
        let m = Mapping {
            addr,
            size,
            token,
            seg,
            busy: 0,
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

    /// Mappings no block touches.
    pub(crate) fn idle(&self) -> Vec<u32> {
        self.runs
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| (i, m)))
            .filter(|(_, m)| m.busy & COUNT == 0)
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Flags the idle mappings as a synchronize begins, unless another's flags are out (two
    /// at once on two threads: the first to end would settle what went idle after it began).
    /// Returns whether it flagged; then [`Mappings::end_synchronize`] settles those still idle
    /// when it completes.
    pub(crate) fn begin_synchronize(&mut self) -> bool {
        if self.flagged {
            return false;
        }
        self.flagged = true;
        for m in self.runs.iter_mut().flatten() {
            if m.busy & COUNT == 0 {
                m.busy |= PENDING;
            }
        }
        true
    }

    /// After a synchronize that flagged: what was idle throughout it is settled if it
    /// `completed`.
    pub(crate) fn end_synchronize(&mut self, completed: bool) {
        self.flagged = false;
        for m in self.runs.iter_mut().flatten() {
            if m.busy & PENDING != 0 {
                m.busy = if completed {
                    SETTLED
                } else {
                    m.busy & !PENDING
                };
            }
        }
    }

    /// Whether idle mapping `i` may go back with no synchronize first.
    pub(crate) fn is_settled(&self, i: u32) -> bool {
        self.get(i).busy & SETTLED != 0
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

    /// Checks each mapping's pages and busy pages against `counts` (from [`Pages::check`] over
    /// every virtual segment) and returns the bytes mapped.
    pub(crate) fn check(&self, counts: &[(u32, u32)]) -> Result<u64, String> {
        let mut total = 0;
        for (i, m) in self.runs.iter().enumerate() {
            if let Some(m) = m {
                let (pages, busy) = counts.get(i).copied().unwrap_or((0, 0));
                if u64::from(pages) * SEGMENT != m.size {
                    return Err(format!(
                        "mapping at {:#x} of {} bytes backs {} pages",
                        m.addr, m.size, pages
                    ));
                }
                if m.busy & COUNT != busy {
                    return Err(format!(
                        "mapping at {:#x} counts {} busy pages, not {}",
                        m.addr,
                        m.busy & COUNT,
                        busy
                    ));
                }
                if busy > 0 && m.busy & !COUNT != 0 {
                    return Err(format!("busy mapping at {:#x} flagged idle", m.addr));
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

    /// Whether mapping `i` is idle and larger than a page: a small block placed in it would
    /// keep all of it mapped.
    pub(crate) fn is_idle_run(&self, i: u32) -> bool {
        let m = self.get(i);
        m.busy & COUNT == 0 && m.size > SEGMENT
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs.iter().all(|m| m.is_none())
    }

    /// Every live mapping.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.runs.iter().flatten()
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
        pages.pin(&mut maps, base + MIB, 256);
        pages.pin(&mut maps, base + MIB + 256, 4 * MIB);
        assert!(maps.idle().is_empty());
        pages.unpin(&mut maps, base + MIB, 256);
        assert!(maps.idle().is_empty());
        pages.unpin(&mut maps, base + MIB + 256, 4 * MIB);
        let idle = maps.idle();
        assert_eq!(idle.len(), 1);
        let m = maps.remove(&mut pages, idle[0]);
        assert_eq!((m.addr, m.size, m.token), (base, 6 * MIB, 42));
        assert!(pages.is_unmapped());
    }
}
