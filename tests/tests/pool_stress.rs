//! 8 threads of mixed-size allocations and frees against one pool over a counting device: no
//! overlap ever, every invariant of the pool after every step, and every byte back at the
//! device at the end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rocmguard_core::{Config, CountingSource, Pool, PoolOptions};

#[test]
fn eight_threads_mixed_sizes() {
    let device = 8u64 << 30;
    let pool = Arc::new(Pool::new(
        CountingSource::new(device),
        PoolOptions::from_config(&Config::default(), device),
    ));
    let live: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (pool, live) = (pool.clone(), live.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                for i in 0..20_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let size = match x % 10 {
                        0..=5 => 1 + x % 8192,
                        6..=8 => 1 + x % (2 << 20),
                        _ => 1 + x % (24 << 20),
                    };
                    if let Err(e) = pool.check_invariants() {
                        panic!("thread {} step {}: pool invariant broken: {}", t, i, e);
                    }
                    if mine.is_empty() || (mine.len() < 64 && !(x >> 8).is_multiple_of(3)) {
                        let addr = pool.alloc(size).expect("8 GiB is plenty");
                        let mut l = live.lock().unwrap();
                        if let Some((&a, &s)) = l.range(..=addr).next_back() {
                            assert!(a + s <= addr, "overlaps the block below");
                        }
                        if let Some((&a, _)) = l.range(addr..).next() {
                            assert!(addr + size <= a, "overlaps the block above");
                        }
                        l.insert(addr, size);
                        mine.push(addr);
                    } else {
                        let addr = mine.swap_remove((i as usize) % mine.len());
                        live.lock().unwrap().remove(&addr);
                        assert!(pool.free(addr).is_some());
                    }
                }
                for addr in mine {
                    live.lock().unwrap().remove(&addr);
                    pool.free(addr);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.live, 0);
    assert_eq!(s.allocs, s.frees);
    pool.trim_to(0);
    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().reserved, 0);
    assert_eq!(pool.source().used(), 0, "every byte is back at the device");
}
