//! The pool's hot path: an alloc+free pair the pool can serve, single-threaded and on 8
//! threads, with virtual segments (the default) and plain ones, each with freed blocks reused
//! at once (work in one order, a program on the default stream) and after a synchronize (a
//! program with streams), next to the same pair made straight to the (counting) device. Prints
//! the median nanoseconds per pair over batches.
use std::sync::Arc;
use std::time::Instant;

use rocmguard_core::{Config, CountingSource, DeviceSource, Pool, PoolOptions};

const PAIRS: u64 = 200_000;
const BATCHES: usize = 15;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn pool_pairs(pool: &Pool<CountingSource>, sizes: &[u64]) -> f64 {
    let start = Instant::now();
    for i in 0..PAIRS {
        let a = pool.alloc(sizes[i as usize % sizes.len()]).unwrap();
        pool.free(a);
    }
    start.elapsed().as_nanos() as f64 / PAIRS as f64
}

/// Median ns per pair on one thread and on 8, and the pool's stats after.
fn measure(
    vmm: bool,
    in_order: bool,
    device: u64,
    sizes: [u64; 6],
) -> (f64, f64, rocmguard_core::Stats) {
    let config = Config {
        vmm,
        ..Config::default()
    };
    let pool = Arc::new(Pool::new(
        CountingSource::new(device),
        PoolOptions::from_config(&config, device),
    ));
    pool.source().set_in_order(in_order);
    pool_pairs(&pool, &sizes);
    let single = median((0..BATCHES).map(|_| pool_pairs(&pool, &sizes)).collect());
    let threaded = median(
        (0..BATCHES)
            .map(|_| {
                let start = Instant::now();
                let hs: Vec<_> = (0..8)
                    .map(|_| {
                        let p = pool.clone();
                        std::thread::spawn(move || pool_pairs(&p, &sizes))
                    })
                    .collect();
                hs.into_iter().for_each(|h| {
                    h.join().unwrap();
                });
                start.elapsed().as_nanos() as f64 / (8 * PAIRS) as f64
            })
            .collect(),
    );
    (single, threaded, pool.stats())
}

fn main() {
    let device = 64u64 << 30;
    let sizes = [512u64, 4096, 65536, 1 << 20, 3 << 20, 8 << 20];
    for (vmm, in_order, name) in [
        (true, true, "virtual, reuse at once"),
        (true, false, "virtual, reuse after sync"),
        (false, true, "plain, reuse at once"),
        (false, false, "plain, reuse after sync"),
    ] {
        let (single, threaded, s) = measure(vmm, in_order, device, sizes);
        println!(
            "pooled alloc+free pair, 1 thread, {}:   {:>7.1} ns (median of {} x {} pairs)",
            name, single, BATCHES, PAIRS
        );
        println!(
            "pooled alloc+free pair, 8 threads, {}:  {:>7.1} ns wall per pair (all threads together)",
            name, threaded
        );
        println!(
            "  pool hits {} of {} allocs, {} device allocs, {} synchronizes",
            s.pool_hits, s.allocs, s.source_allocs, s.syncs
        );
    }

    let source = CountingSource::new(device);
    let direct = median(
        (0..BATCHES)
            .map(|_| {
                let start = Instant::now();
                for i in 0..PAIRS {
                    let size = (sizes[i as usize % sizes.len()] + (2 << 20) - 1) & !((2 << 20) - 1);
                    let a = source.alloc(size).unwrap();
                    source.free(a, size).unwrap();
                }
                start.elapsed().as_nanos() as f64 / PAIRS as f64
            })
            .collect(),
    );
    println!(
        "counting device alone, 1 thread:    {:>7.1} ns (baseline: no pool)",
        direct
    );
}
