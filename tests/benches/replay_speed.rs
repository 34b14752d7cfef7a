//! Replay speed on one core: each shared PyTorch trace replayed again and again through the
//! `rocmguard` policy (the pool over a counting device), through `pytorch` (the model of
//! PyTorch's caching allocator that `rocmguard tune` runs 31 to 91 times per trace, each with a
//! capacity search) and through `passthrough`, for about a second each, and the reader's own
//! speed. Targets: at least 5 M events per second for `rocmguard` and for `pytorch`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rocmguard_cli::replay::load::{self, Trace};
use rocmguard_cli::replay::policy::{self, Policy, UNLIMITED};

/// Events per second replaying `trace` through `policy` for about `budget`.
fn speed(trace: &Trace, policy: &Policy, budget: Duration) -> f64 {
    let (mut events, mut spent, mut runs) = (0u64, Duration::ZERO, 0);
    while spent < budget || runs < 3 {
        let o = policy::replay(black_box(trace), policy, UNLIMITED, false, None);
        events += o.events;
        spent += o.elapsed;
        runs += 1;
    }
    events as f64 / spent.as_secs_f64()
}

fn main() {
    let dir = std::env::var("ROCMGUARD_TRACES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../data/traces").into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let budget = Duration::from_millis(
        std::env::var("ROCMGUARD_BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000),
    );
    println!(
        "{:<18} {:>8} {:>16} {:>16} {:>16} {:>16}",
        "trace", "events", "rocmguard ev/s", "pytorch ev/s", "passthru ev/s", "read rows/s"
    );
    let pool = Policy::parse("rocmguard").expect("parses");
    let torch = Policy::parse("pytorch").expect("parses");
    let passthrough = Policy::parse("passthrough").expect("parses");
    for name in ["gpt2_train", "resnet_train", "model_swap_video"] {
        let path = dir.join(format!("{}.csv.gz", name));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
        let start = Instant::now();
        let mut reads = 0u64;
        let mut rows = 0u64;
        while start.elapsed() < budget / 4 || reads < 3 {
            let traces = load::load_bytes(name, black_box(&bytes)).expect("the trace reads");
            rows += traces[0].ops.len() as u64;
            reads += 1;
        }
        let read_rate = rows as f64 / start.elapsed().as_secs_f64();
        let trace = load::load_bytes(name, &bytes)
            .expect("the trace reads")
            .remove(0);
        println!(
            "{:<18} {:>8} {:>14.2} M {:>14.2} M {:>14.1} M {:>14.2} M",
            name,
            trace.events(),
            speed(&trace, &pool, budget) / 1e6,
            speed(&trace, &torch, budget) / 1e6,
            speed(&trace, &passthrough, budget) / 1e6,
            read_rate / 1e6
        );
    }
}
