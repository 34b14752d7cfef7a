//! A cap the program fits in without one never fails it: every trace of `data/traces/` replayed
//! through the default pool, with virtual segments and with plain ones (`vmm=0`, where the
//! device's virtual memory fails its check), and with the finer pieces `rocmguard tune` names,
//! on a device exactly as large as that pool's own peak reserved completes, with no allocation
//! refused. A pool whose placement changes near the cap (a trim threshold below 1, address
//! space no bigger than the cap) broke this on 6 of the 23 traces with virtual segments and 5
//! with plain ones; looking for idle mapped memory inside every free block, ties broken by
//! block size (the first version of the branch `least-mapping-search`), broke it on framepack
//! with 8 and 2 MiB pieces.

use rocmguard_cli::replay::load;
use rocmguard_cli::replay::policy::{self, Policy, UNLIMITED};
use rocmguard_cli::tune::search;
use rocmguard_tests::root;

#[test]
fn every_trace_completes_at_a_cap_of_its_own_peak() {
    // The default, plain segments, and each piece size `rocmguard tune` may name for a run that
    // does not fit with the default's.
    let mut pools = vec![Policy::parse("rocmguard:vmm=0").unwrap()];
    pools.extend(
        search::candidates(false)
            .into_iter()
            .filter(|c| c.conf.is_none())
            .map(|c| c.policy),
    );
    let mut failed = Vec::new();
    let mut traces = 0;
    let mut files: Vec<_> = std::fs::read_dir(root().join("data/traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
        .collect();
    files.sort();
    for file in files {
        for trace in load::load_path(&file).unwrap() {
            traces += 1;
            for pool in &pools {
                let free = policy::replay(&trace, pool, UNLIMITED, false, None);
                let cap = free.peak_reserved.div_ceil(2 << 20) * (2 << 20);
                let capped = policy::replay(&trace, pool, cap, false, None);
                if capped.ooms > 0 {
                    failed.push(format!(
                        "{}, {}: {} refused at a cap of {} B, its peak without one",
                        trace.name, pool.name, capped.ooms, cap
                    ));
                }
            }
        }
    }
    assert!(traces >= 20, "the corpus is there: {} traces", traces);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
