//! Replays the tensor-level rows of the real PyTorch traces listed in `data/traces/corpus.tsv`
//! through the pool over a device that only counts, with each trace's half (TUNE: constants may
//! be chosen on it; REPORT: it only reports) and a summary per half at the end, and prints peak
//! reserved against peak live and the device calls per 100 requests, next to what PyTorch's caching allocator did on the same runs:
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
        "{:<18} {:<6} {:<6} {:<8} {:>14} {:>14} {:>8} {:>14} {:>14} {:>10}",
        "trace",
        "half",
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
    // The corpus and its halves (data/traces/corpus.tsv): a pool change is judged on the
    // REPORT half, whose traces no constant was chosen on.
    let corpus = rocmguard_tests::corpus_in(&dir);
    // (half, vmm, reuse) -> ratios, for the summary per half.
    let mut ratios = std::collections::BTreeMap::<(&str, &str, &str), Vec<f64>>::new();
    for (name, half) in &corpus {
        let (name, half) = (name.as_str(), half.as_str());
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
            let ratio = s.peak_reserved as f64 / s.peak_live as f64;
            ratios.entry((half, vmm, reuse)).or_default().push(ratio);
            println!(
                "{:<18} {:<6} {:<6} {:<8} {:>14} {:>14} {:>8.3} {:>14.2} {:>14.2} {:>10.2}",
                name,
                half,
                vmm,
                reuse,
                s.peak_live,
                s.peak_reserved,
                ratio,
                (s.source_allocs + s.source_frees) as f64 * 100.0 / requests,
                torch_calls,
                s.syncs as f64 * 100.0 / requests
            );
        }
    }
    println!(
        "\n{:<6} {:<6} {:<8} {:>7} {:>8} {:>8} {:>8}",
        "half", "vmm", "reuse", "traces", "median", "max", "> 1.05"
    );
    for ((half, vmm, reuse), mut r) in ratios {
        r.sort_by(f64::total_cmp);
        let median = rocmguard_tests::median(&r);
        let over = r.iter().filter(|&&x| x > 1.05).count();
        let max = r[r.len() - 1];
        println!(
            "{:<6} {:<6} {:<8} {:>7} {:>8.3} {:>8.3} {:>8}",
            half,
            vmm,
            reuse,
            r.len(),
            median,
            max,
            over
        );
    }
}
