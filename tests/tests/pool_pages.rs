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
    // Three 2 MiB blocks, one page each, side by side on a run of three pages mapped with one
    // call: the middle one freed and trimmed, its page goes back to the device; its neighbours
    // keep theirs.
    let pool = fresh();
    let run = pool.alloc(6 * MIB).unwrap();
    pool.free(run);
    let (a, b, c) = (
        pool.alloc(2 * MIB).unwrap(),
        pool.alloc(2 * MIB).unwrap(),
        pool.alloc(2 * MIB).unwrap(),
    );
    assert_eq!(
        (a, b - a, c - b),
        (run, 2 * MIB, 2 * MIB),
        "side by side on the run"
    );
    assert_eq!(
        pool.source().maps.load(Ordering::Relaxed),
        1,
        "one map call"
    );
    pool.free(b);
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().reserved, 4 * MIB);
    assert_eq!(pool.source().used(), 4 * MIB, "given back on the device");
    assert!(!pool.source().is_backed(b, 1), "the freed page is unmapped");
    assert!(pool.source().is_backed(a, 2 * MIB) && pool.source().is_backed(c, 2 * MIB));
    let b2 = pool.alloc(2 * MIB).unwrap();
    assert!(
        pool.source().is_backed(b2, 2 * MIB),
        "mapped again for its next block"
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_run_mapped_at_once_goes_back_in_parts() {
    // A 20 MiB block, its ten pages mapped with one call; freed, then a 3 MiB block at its
    // start (no call: mapped already). A trim gives back the eight pages it does not touch,
    // though all ten came in one run.
    let pool = fresh();
    let big = pool.alloc(20 * MIB).unwrap();
    assert_eq!(
        pool.source().maps.load(Ordering::Relaxed),
        1,
        "one map call"
    );
    pool.free(big);
    let small = pool.alloc(3 * MIB).unwrap();
    assert_eq!(small, big, "served from the mapped run");
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    assert_eq!(
        pool.stats().reserved,
        4 * MIB,
        "two pages under the 3 MiB block"
    );
    assert_eq!(pool.source().used(), 4 * MIB);
    assert!(pool.source().is_backed(small, 3 * MIB));
    pool.free(small);
    pool.trim_to(0);
    assert_eq!(pool.source().used(), 0);
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
fn memory_mapped_ahead_stays_under_the_peak_the_trim_threshold_and_the_cap() {
    // Nothing ahead of a request while the pool grows past its peak: a bet must not set one.
    let fresh = Pool::new(CountingSource::new(DEVICE), options());
    fresh.alloc(3 << 20).unwrap();
    assert_eq!(fresh.stats().reserved, 4 << 20, "only the request's pages");
    // Cap 12 MiB, trim at 80%, a peak of 12 MiB set before: a 3 MiB request needs 4 MiB of
    // pages; ahead of it only what keeps reserved at or under 9.6 MiB, whole pages: 8 MiB.
    let pool = Pool::new(CountingSource::new(DEVICE), options());
    pool.set_cap(12 << 20);
    let whole = pool.alloc(12 << 20).unwrap();
    pool.free(whole);
    pool.trim_to(0);
    let a = pool.alloc(3 << 20).unwrap();
    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().reserved, 8 << 20);
    let maps = pool.source().maps.load(Ordering::Relaxed);
    let b = pool.alloc(3 << 20).unwrap();
    assert_eq!(
        pool.source().maps.load(Ordering::Relaxed),
        maps,
        "the second lands in the first's run"
    );
    // A device that refuses the memory mapped ahead still serves the request (a retry).
    let tight = Pool::new(CountingSource::new(8 << 20), options());
    let first = tight.alloc(8 << 20).unwrap();
    tight.free(first);
    tight.trim_to(0);
    tight.source().alloc(4 << 20).unwrap();
    assert!(tight.alloc(3 << 20).is_ok());
    assert_eq!(tight.stats().reserved, 4 << 20);
    assert_eq!(tight.stats().retries, 1);
    tight.check_invariants().unwrap();
    pool.free(a);
    pool.free(b);
}

#[test]
fn a_pool_growing_back_to_its_peak_maps_fewer_runs_than_requests() {
    // 400 requests of 1.25 MiB, all live: 500 MiB, twice, everything given back in between.
    // The second time, under the first's peak, runs of at least 1/64 of what the pool holds
    // are mapped ahead: far fewer map calls than requests.
    let pool = Pool::new(CountingSource::new(DEVICE), options());
    let mut blocks: Vec<u64> = (0..400).map(|_| pool.alloc(5 << 18).unwrap()).collect();
    for b in blocks.drain(..) {
        pool.free(b);
    }
    pool.trim_to(0);
    let maps = pool.source().maps.load(Ordering::Relaxed);
    blocks = (0..400).map(|_| pool.alloc(5 << 18).unwrap()).collect();
    pool.check_invariants().unwrap();
    let s = pool.stats();
    let calls = pool.source().maps.load(Ordering::Relaxed) - maps;
    assert!(calls <= 140, "{} map calls", calls);
    assert!(
        s.peak_reserved as f64 <= s.peak_live as f64 * 1.05,
        "{} reserved for {} live",
        s.peak_reserved,
        s.peak_live
    );
    for b in blocks {
        pool.free(b);
    }
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
            let half = (size / 2) & !(chunk - 1);
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
