//! Replays the tensor-level rows of the real PyTorch traces in `data/traces/` through the
//! pool over a device that only counts, and prints peak reserved against peak live and the
//! device calls per 100 requests, next to what PyTorch's caching allocator did on the same runs:
//! with the default settings (virtual memory, which the counting device offers) and with plain
//! segments (`vmm=0`, what a device without virtual memory gets); each with freed blocks reused
//! at once (`ordered_reuse`, a program with all its work on one stream, as these runs had) and
//! after a synchronize (`ordered_reuse=0`, what a program with streams of its own gets).
//! Reads the traces with the replay's own reader, so both see the same rows. PyTorch's calls are
//! the trace's own segment rows (one `cudaMalloc` or `cudaFree` each); the pool's are device
//! memory pieces created and given back (one each, though a real device is asked for create,
//! map and access to make one, unmap and release to give it back), or plain segments.

use rocmguard_cli::replay::load;
use rocmguard_cli::replay::policy::{self, Policy};

fn main() {
    let dir = std::env::var("ROCMGUARD_TRACES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../data/traces").into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    println!(
        "{:<18} {:<6} {:<8} {:>14} {:>14} {:>8} {:>14} {:>14} {:>10}",
        "trace",
        "vmm",
        "reuse",
        "peak live",
        "peak reserved",
        "ratio",
        "dev calls/100",
        "torch calls/100",
        "syncs/100"
    );
    let policies = [
        ("1", "at once", "rocmguard"),
        ("1", "synced", "rocmguard:ordered_reuse=0"),
        ("0", "at once", "rocmguard:vmm=0"),
        ("0", "synced", "rocmguard:vmm=0,ordered_reuse=0"),
    ]
    .map(|(vmm, reuse, spec)| (vmm, reuse, Policy::parse(spec).expect("the policy parses")));
    let recorded = Policy::parse("recorded").expect("the policy parses");
    for name in [
        "gpt2_train",
        "resnet_train",
        "model_swap_video",
        "moe",
        "decode",
        "unet",
        "lora",
        // Recorded by the shim itself (PyTorch's cache off): no segment rows, so no PyTorch
        // calls to compare; it caught a pool change that looked good on the others.
        "gpt2_nocache",
    ] {
        let path = dir.join(format!("{}.csv.gz", name));
        let traces = load::load_path(&path).unwrap_or_else(|e| panic!("{}", e));
        let trace = &traces[0];
        // PyTorch's own driver calls: the trace's segment rows (cudaMalloc, cudaFree).
        let torch = policy::replay(trace, &recorded, u64::MAX, false, None);
        let torch_calls =
            (torch.source_allocs + torch.source_frees) as f64 * 100.0 / trace.allocs as f64;
        for (vmm, reuse, pool) in &policies {
            let s = policy::replay(trace, pool, 80 << 30, false, None);
            assert_eq!(s.ooms, 0, "{} fits in 80 GiB", name);
            let requests = trace.allocs as f64;
            println!(
                "{:<18} {:<6} {:<8} {:>14} {:>14} {:>8.3} {:>14.2} {:>14.2} {:>10.2}",
                name,
                vmm,
                reuse,
                s.peak_live,
                s.peak_reserved,
                s.peak_reserved as f64 / s.peak_live as f64,
                (s.source_allocs + s.source_frees) as f64 * 100.0 / requests,
                torch_calls,
                s.syncs as f64 * 100.0 / requests
            );
        }
    }
}
