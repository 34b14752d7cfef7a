//! Replays the tensor-level rows of the real PyTorch traces in `../shared/traces/` through the
//! pool over a device that only counts, and prints peak reserved against peak live and the
//! device calls per 100 requests, next to what PyTorch's caching allocator did on the same runs.
use std::io::{BufRead, BufReader};

use rocmguard_core::{Config, CountingSource, Pool, PoolOptions};

fn main() {
    let dir = std::env::var("ROCMGUARD_TRACES").unwrap_or_else(|_| "../../shared/traces".into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    println!(
        "{:<18} {:>14} {:>14} {:>8} {:>14} {:>14} {:>10}",
        "trace",
        "peak live",
        "peak reserved",
        "ratio",
        "dev calls/100",
        "torch calls/100",
        "syncs/100"
    );
    for (name, torch_calls) in [
        ("gpt2_train", 1.7),
        ("resnet_train", 1.3),
        ("model_swap_video", 0.6),
    ] {
        let path = dir.join(format!("{}.csv.gz", name));
        let file =
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
        let reader = BufReader::new(flate2::read::GzDecoder::new(file));
        let total = 80u64 << 30;
        let pool = Pool::new(
            CountingSource::new(total),
            PoolOptions::from_config(&Config::default(), total),
        );
        let mut map = std::collections::HashMap::new();
        let mut requests = 0u64;
        for line in reader.lines().skip(1) {
            let line = line.unwrap();
            let f: Vec<&str> = line.split(',').collect();
            let ptr = u64::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap();
            let size: u64 = f[4].parse().unwrap();
            match f[2] {
                "allocate" => {
                    requests += 1;
                    map.insert(ptr, pool.alloc(size).expect("replay fits in 80 GiB"));
                }
                "free" => {
                    if let Some(a) = map.remove(&ptr) {
                        pool.free(a);
                    }
                }
                _ => {}
            }
        }
        let s = pool.stats();
        println!(
            "{:<18} {:>14} {:>14} {:>8.3} {:>14.2} {:>14.1} {:>10.2}",
            name,
            s.peak_live,
            s.peak_reserved,
            s.peak_reserved as f64 / s.peak_live as f64,
            (s.source_allocs + s.source_frees) as f64 * 100.0 / requests as f64,
            torch_calls,
            s.syncs as f64 * 100.0 / requests as f64
        );
    }
}
