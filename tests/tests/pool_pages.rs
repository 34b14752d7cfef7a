//! Virtual segments give memory back page by page: each 2 MiB page mapped is a piece of device
//! memory of its own, so a page goes back once no block touches it, whatever was mapped with
//! it and whatever stays live beside it; and a map the device fails part way leaves the pool
//! whole, with nothing of the device's memory lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use rocmguard_core::{Config, CountingSource, DeviceSource, Pool, PoolOptions, SourceError};

const MIB: u64 = 1 << 20;
const DEVICE: u64 = 1 << 30;

fn options() -> PoolOptions {
    let mut o = PoolOptions::from_config(&Config::default(), DEVICE);
    o.backoff = std::time::Duration::ZERO;
    o
}

fn fresh() -> Pool<CountingSource> {
    let pool = Pool::new(CountingSource::new(DEVICE), options());
    pool.source().set_in_order(true);
    pool
}

#[test]
fn a_page_goes_back_while_its_neighbours_stay_live() {
    // a 3 MiB, m 4 MiB, c 2 MiB side by side from the segment's start: m shares its first page
    // with a and its last with c, and has one page of its own. m freed and trimmed: that page
    // goes back to the device; the shared ones stay under a and c.
    let pool = fresh();
    let a = pool.alloc(3 * MIB).unwrap();
    let m = pool.alloc(4 * MIB).unwrap();
    let c = pool.alloc(2 * MIB).unwrap();
    assert_eq!((m - a, c - m), (3 * MIB, 4 * MIB), "side by side");
    assert_eq!(pool.source().used(), 10 * MIB);
    pool.free(m);
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().reserved, 8 * MIB);
    assert_eq!(pool.source().used(), 8 * MIB, "given back on the device");
    assert!(
        !pool.source().is_backed(a + 4 * MIB, 1),
        "m's own page is unmapped"
    );
    assert!(pool.source().is_backed(a, 3 * MIB) && pool.source().is_backed(c, 2 * MIB));
    let m2 = pool.alloc(4 * MIB).unwrap();
    assert!(
        pool.source().is_backed(m2, 4 * MIB),
        "mapped again for its next block"
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_long_lived_block_pins_its_own_pages_only() {
    // A 100 MiB block and a long-lived 1.5 MiB one after it, on the page where the first
    // ends: once the big one is freed, the pool holds the pages the small one touches.
    let pool = fresh();
    let big = pool.alloc(100 * MIB + 512 * 1024).unwrap();
    let keep = pool.alloc(3 * MIB / 2).unwrap();
    pool.free(big);
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    let s = pool.stats();
    assert!(
        s.reserved <= 4 * MIB,
        "{} bytes held for 1.5 MiB",
        s.reserved
    );
    assert!(pool.source().is_backed(keep, 3 * MIB / 2));
}

#[test]
fn a_request_gets_its_own_whole_pages_as_one_piece_and_shared_pages_alone() {
    // 9 MiB at the segment's start: its four whole pages one piece, the page it ends in (which
    // the next block shares) another. 5 MiB after it: that shared page is mapped already, its
    // own two whole pages one piece.
    let pool = fresh();
    let a = pool.alloc(9 * MIB).unwrap();
    assert_eq!(pool.stats().source_allocs, 2);
    let b = pool.alloc(5 * MIB).unwrap();
    assert_eq!(b, a + 9 * MIB);
    assert_eq!(pool.stats().source_allocs, 3);
    pool.check_invariants().unwrap();
    // a goes: its 8 MiB piece goes back whole; the shared page stays under b.
    pool.free(a);
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    assert_eq!(
        pool.source().used(),
        6 * MIB,
        "b's pages: the shared one and its own two"
    );
}

#[test]
fn a_whole_piece_serves_one_block_and_only_one_that_nearly_covers_it() {
    let pool = fresh();
    let a = pool.alloc(16 * MIB).unwrap();
    let guard = pool.alloc(4 * MIB).unwrap();
    pool.free(a);
    let calls = pool.stats().source_allocs;
    // Seven eighths of it or more: served there, with the rest of the piece, no device call.
    let b = pool.alloc(15 * MIB).unwrap();
    assert_eq!((b, pool.stats().source_allocs), (a, calls));
    assert_eq!(
        pool.block_containing(a + 16 * MIB - 1),
        None,
        "the rest is b's, unasked"
    );
    pool.check_invariants().unwrap();
    pool.free(b);
    // A smaller block never lands on it: it would pin 16 MiB. The piece goes back first.
    let c = pool.alloc(3 * MIB).unwrap();
    pool.check_invariants().unwrap();
    pool.trim_to(0);
    let s = pool.stats();
    assert!(
        s.reserved <= 4 * MIB + 4 * MIB,
        "{} bytes for 7 MiB live",
        s.reserved
    );
    assert!(pool.source().is_backed(c, 3 * MIB) && pool.source().is_backed(guard, 4 * MIB));
}

#[test]
fn a_freed_piece_merged_into_free_space_serves_a_request_that_nearly_covers_it() {
    // a 3 MiB, big 16 MiB (its own pages 4..18 MiB one piece), c 2 MiB. a and big freed: one
    // free block from a's start, where the search by block start finds no fit for 13 MiB; the
    // idle 14 MiB piece serves it, with no device call.
    let pool = fresh();
    let a = pool.alloc(3 * MIB).unwrap();
    let big = pool.alloc(16 * MIB).unwrap();
    let _c = pool.alloc(2 * MIB).unwrap();
    pool.free(a);
    pool.free(big);
    let pieces = pool.stats().source_allocs;
    let d = pool.alloc(13 * MIB).unwrap();
    assert_eq!(d, a + 4 * MIB, "at the piece's start");
    assert_eq!(pool.stats().source_allocs, pieces, "no device call");
    assert!(pool.source().is_backed(d, 13 * MIB));
    pool.check_invariants().unwrap();
}

/// A device whose `fail_at`-th map call (counting from 1) fails as out of memory, after
/// creating and then undoing part of its run, as the real one does.
struct FailingNth {
    inner: CountingSource,
    calls: AtomicU64,
    fail_at: u64,
}

const OOM: SourceError = SourceError {
    code: 2,
    out_of_memory: true,
};

impl DeviceSource for FailingNth {
    fn alloc(&self, size: u64) -> Result<u64, SourceError> {
        self.inner.alloc(size)
    }
    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        self.inner.free(addr, size)
    }
    fn mem_info(&self) -> Result<(u64, u64), SourceError> {
        self.inner.mem_info()
    }
    fn synchronize(&self) -> Result<(), SourceError> {
        self.inner.synchronize()
    }
    fn in_order(&self) -> bool {
        true
    }
    fn has_virtual_memory(&self) -> bool {
        true
    }
    fn reserve(&self, size: u64) -> Result<u64, SourceError> {
        self.inner.reserve(size)
    }
    fn unreserve(&self, addr: u64, size: u64) -> Result<(), SourceError> {
        self.inner.unreserve(addr, size)
    }
    fn map(&self, addr: u64, size: u64, chunk: u64) -> Result<Vec<u64>, SourceError> {
        if self.calls.fetch_add(1, Ordering::Relaxed) + 1 == self.fail_at {
            // Part of the run made, then undone: all or nothing.
            let half = size / 2 / chunk * chunk;
            if half > 0 {
                let tokens = self.inner.map(addr, half, chunk)?;
                for (i, t) in tokens.into_iter().enumerate() {
                    self.inner.unmap(addr + i as u64 * chunk, chunk, t)?;
                }
            }
            return Err(OOM);
        }
        self.inner.map(addr, size, chunk)
    }
    fn unmap(&self, addr: u64, size: u64, token: u64) -> Result<(), SourceError> {
        self.inner.unmap(addr, size, token)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_map_failing_midway_leaves_the_pool_whole_and_nothing_leaked(
        fail_at in 1u64..12,
        sizes in proptest::collection::vec(
            prop_oneof![(MIB + 1)..(12 * MIB), (12 * MIB)..(200 * MIB)], 1..40),
        frees in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let pool = Pool::new(
            FailingNth { inner: CountingSource::new(DEVICE), calls: AtomicU64::new(0), fail_at },
            options(),
        );
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for (i, &size) in sizes.iter().enumerate() {
            if let Ok(addr) = pool.alloc(size) {
                prop_assert!(pool.source().inner.is_backed(addr, size));
                live.insert(addr, size);
            }
            if frees[i] {
                if let Some((&addr, _)) = live.iter().next() {
                    live.remove(&addr);
                    pool.free(addr);
                }
            }
            pool.check_invariants().map_err(TestCaseError::fail)?;
            // Every piece the device holds for the pool is one the pool knows of.
            prop_assert_eq!(pool.stats().reserved, pool.source().inner.used());
        }
        for (&addr, _) in live.iter() {
            pool.free(addr);
        }
        pool.trim_to(0);
        pool.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(pool.stats().reserved, 0);
        prop_assert_eq!(pool.source().inner.used(), 0, "nothing leaked on the device");
    }
}
