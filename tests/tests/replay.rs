//! `rocmguard replay` and the trace readers: the real binary on the shared PyTorch traces, RMM's
//! own logs, our format and PyTorch snapshots; its errors; and property tests that no input
//! makes a reader panic or a capacity search lie.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flate2::write::GzEncoder;
use flate2::Compression;
use proptest::prelude::*;
use rocmguard_cli::replay::load::{self, Op, Trace};
use rocmguard_cli::replay::policy::{self, Policy, RESOLUTION, UNLIMITED};
use rocmguard_core::trace::{self, Action, Event};
use rocmguard_tests::{cli, output, root, text};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/replay").join(name)
}

fn shared_traces() -> PathBuf {
    root().join("data/traces")
}

/// A fresh scratch directory for one test, removed when the test ends (pass or fail).
fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("rocmguard-replay-{}-", test))
        .tempdir()
        .unwrap()
}

fn replay(args: &[&str], files: &[&Path]) -> Output {
    output(Command::new(cli()).arg("replay").args(args).args(files))
}

/// Runs `replay --json` and returns the parsed report, asserting success and a quiet stderr (no
/// progress bar when stderr is not a terminal).
fn replay_json(args: &[&str], files: &[&Path]) -> Value {
    let out = replay(&[&["--json"], args].concat(), files);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stderr.is_empty(), "stderr not quiet: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}: {}", e, text(&out)))
}

fn trace<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["traces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["trace"] == name)
        .unwrap_or_else(|| panic!("no trace {} in {}", name, report))
}

fn policy<'a>(trace: &'a Value, name: &str) -> &'a Value {
    trace["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == name)
        .unwrap_or_else(|| panic!("no policy {} in {}", name, trace))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{} is not a count", v))
}

/// The README's fragmentation target for the pool: peak reserved / peak live.
const TARGET: f64 = 1.05;

fn ratio(p: &Value) -> f64 {
    u(&p["peak_reserved"]) as f64 / u(&p["peak_live"]) as f64
}

/// Traces of workloads nobody tuned the pool for, captured on the H100 with
/// `scripts/gpu/capture_traces.py` (data/traces/README.md): the figures the README gives, so a
/// change to the pool that moves them shows here, with the device calls (pieces mapped and
/// given back) against PyTorch's (its segment rows): since small blocks have a pool of their
/// own and pieces are 16 MiB (2026-11-26), every one is under the 1.05 target (LoRA with
/// activation checkpointing was 1.0726) for about three times PyTorch's device calls; since
/// pieces are at most 1/128 of the peak live (session 22), 3 to 12 times (lora 1.0438 -> 1.0307,
/// moe 1.0344 -> 1.0412); since a medium request splits mapped memory only where it fits
/// closely (session 23), lora 1.0190.
#[test]
fn captured_traces_of_untuned_workloads_keep_their_figures() {
    let dir = shared_traces();
    let files: Vec<PathBuf> = ["moe", "decode", "unet", "lora"]
        .iter()
        .map(|n| dir.join(format!("{}.csv.gz", n)))
        .collect();
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let report = replay_json(&[], &refs);
    // name, peak live, PyTorch's ratio, ours, our device calls, PyTorch's.
    for (name, peak_live, torch, ours, calls, torch_calls) in [
        ("moe", 4_969_152_672u64, 1.2247, 1.0412, 800, 283),
        ("decode", 142_852_096, 1.1010, 1.0130, 77, 16),
        ("unet", 168_212_016, 1.1719, 1.0348, 151, 20),
        ("lora", 1_603_289_112, 1.2060, 1.0190, 1107, 94),
    ] {
        let t = trace(&report, name);
        assert_eq!(u(&t["peak_live"]), peak_live, "{}", name);
        assert_eq!(u(&t["unknown_frees"]), 0, "{}", name);
        let r = ratio(policy(t, "recorded"));
        assert!(
            (r - torch).abs() < 0.0015,
            "{} recorded {:.4} vs {}",
            name,
            r,
            torch
        );
        let pool = policy(t, "rocmguard");
        assert_eq!(u(&pool["ooms"]), 0);
        let g = ratio(pool);
        assert!(
            (g - ours).abs() < 0.0015,
            "{}: rocmguard {:.4} vs {}",
            name,
            g,
            ours
        );
        assert!(
            g < r,
            "{}: rocmguard {:.4} above PyTorch's {:.4}",
            name,
            g,
            r
        );
        assert_calls(name, pool, calls, policy(t, "recorded"), torch_calls);
    }
}

#[test]
fn a_real_cache_off_run_recorded_by_the_shim_stays_under_the_target() {
    // GPT-2 on an H100 with PyTorch's cache off, recorded by ROCMGUARD_TRACE (two threads:
    // the autograd engine frees from its own). A pool change that made each request over
    // 128 MiB a piece of its own improved gpt2_train and ran this one at 1.112 (the GPU said
    // 1.165): the traces of PyTorch's cache alone do not show how the pool is used without it.
    let file = shared_traces().join("gpt2_nocache.csv.gz");
    let report = replay_json(&[], &[file.as_path()]);
    let t = trace(&report, "gpt2_nocache");
    let pool = policy(t, "rocmguard");
    assert_eq!(u(&pool["ooms"]), 0);
    let g = ratio(pool);
    assert!(
        (1.0..=TARGET).contains(&g),
        "gpt2_nocache: rocmguard's peak reserved / peak live {:.4} is above {}",
        g,
        TARGET
    );
    assert!(
        (g - 1.0169).abs() < 0.0015,
        "gpt2_nocache: rocmguard {:.4} vs 1.0169",
        g
    );
}

/// The runtime's free waits for the work the program queued: the replay counts the first free
/// after the program ran as a synchronize. Passing every request straight to the driver, every
/// free waits; a plain pool's trims give back every idle segment once one must go, so on a
/// trace that re-lays its segments every step (seg_infer_long) few of its frees wait (on an
/// H200 its step time went from 1.26 to 1.03 times PyTorch's cache's with that; session 25).
#[test]
fn the_frees_that_wait_for_the_program_count_as_synchronizes() {
    const PLAIN: &str = "rocmguard:vmm=0";
    let file = shared_traces().join("seg_infer_long.csv.gz");
    let report = replay_json(
        &["--policy", PLAIN, "--policy", "passthrough"],
        &[file.as_path()],
    );
    let t = trace(&report, "seg_infer_long");
    let passthrough = policy(t, "passthrough");
    assert_eq!(
        u(&passthrough["syncs"]),
        u(&passthrough["source_frees"]),
        "every free of a request waits for the work before it"
    );
    let plain = policy(t, PLAIN);
    let (waits, frees) = (u(&plain["syncs"]), u(&plain["source_frees"]));
    assert!(
        waits > 0 && waits * 4 <= frees,
        "plain segments: {} of {} frees waited",
        waits,
        frees
    );
}

/// `peak_slack` trades peak memory for driver calls. seg_infer's layout changes at its peak in
/// every step (12 requests of 1..4 images at 256..768 px): with the default slack (1/64) it
/// keeps to the target and maps and gives back pieces in every step; with 25% its steps after
/// the eighth make almost no driver call (the 40-step trace makes 17 more than the 8-step one,
/// where the default makes over 1,800 more), within 25% of its peak live. On an H200 that took
/// its step time from +2.1% to +0.2% of PyTorch's cache (docs/benchmarks.md, session 18; with
/// pieces of 1/32 of the peak live the later steps made none at all).
#[test]
fn a_larger_peak_slack_keeps_a_changing_layout_off_the_driver() {
    const SLACK: &str = "rocmguard:peak_slack=25%";
    let files =
        ["seg_infer", "seg_infer_long"].map(|t| shared_traces().join(format!("{}.csv.gz", t)));
    let files: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let report = replay_json(&["--policy", "rocmguard", "--policy", SLACK], &files);
    let (short, long) = (
        trace(&report, "seg_infer"),
        trace(&report, "seg_infer_long"),
    );
    let calls = |p: &Value| {
        (
            u(&p["source_allocs"]),
            u(&p["source_frees"]),
            u(&p["syncs"]),
        )
    };
    let later = |long: (u64, u64, u64), short: (u64, u64, u64)| long.0 + long.1 - short.0 - short.1;
    let (slack_short, slack_long) = (calls(policy(short, SLACK)), calls(policy(long, SLACK)));
    let (default_short, default_long) = (
        calls(policy(short, "rocmguard")),
        calls(policy(long, "rocmguard")),
    );
    assert!(
        later(slack_long, slack_short) * 50 <= later(default_long, default_short),
        "with 25% of slack, steps 9-40 make {:?} - {:?} driver calls, the default {:?} - {:?}",
        slack_long,
        slack_short,
        default_long,
        default_short
    );
    let slack = policy(long, SLACK);
    assert!(
        u(&slack["peak_reserved"]) as f64
            <= u(&slack["peak_live"]) as f64 * 1.25 + (2 << 20) as f64,
        "peak reserved past the slack: {}",
        slack
    );
    assert!(
        2 * (default_long.0 - default_short.0) > default_short.0,
        "the default slack maps pieces in every step: {:?} in 40 steps, {:?} in 8",
        default_long,
        default_short
    );
    assert!(ratio(policy(long, "rocmguard")) <= TARGET);
}

/// The pool's device calls (`source_allocs + source_frees`) are `calls`, PyTorch's recorded ones
/// `torch_calls`; where the pool makes no more than PyTorch, that stays so.
fn assert_calls(name: &str, pool: &Value, calls: u64, recorded: &Value, torch_calls: u64) {
    let ours = u(&pool["source_allocs"]) + u(&pool["source_frees"]);
    let torch = u(&recorded["source_allocs"]) + u(&recorded["source_frees"]);
    assert_eq!(torch, torch_calls, "{}: PyTorch's segment rows", name);
    assert_eq!(ours, calls, "{}: rocmguard's device calls", name);
    if calls <= torch_calls {
        assert!(
            ours <= torch,
            "{}: {} device calls, PyTorch {}",
            name,
            ours,
            torch
        );
    }
}

#[test]
fn shared_traces_reproduce_the_readme() {
    let dir = shared_traces();
    let files: Vec<PathBuf> = ["gpt2_train", "resnet_train", "model_swap_video"]
        .iter()
        .map(|n| dir.join(format!("{}.csv.gz", n)))
        .collect();
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let report = replay_json(&[], &refs);
    assert_eq!(report["capacity"], Value::Null);
    // peak live to the byte; PyTorch's own peak reserved / peak live; the README's cost of
    // 2 MiB rounding with small requests packed perfectly (our passthrough model); the README's
    // figure for the pool with default settings.
    // ... and the pool's device calls against PyTorch's: more on all three since pieces are
    // 16 MiB (issue 15's target is no more; docs/benchmarks.md, session 13), and more again
    // since they are at most 1/32 of the peak live (the first ones of a run are small), and
    // more again since 1/128 (session 22: model_swap_video 200 -> 448, at 1.0369 -> 1.0291);
    // gpt2_train's 1555 -> 1778 since medium requests split mapped memory only where they fit
    // closely (session 23: they map pages of their own instead).
    for (name, peak_live, torch, rounding, ours, live_at_end, calls, torch_calls) in [
        (
            "gpt2_train",
            13_594_206_920u64,
            1.123,
            1.019,
            1.0155,
            3,
            1778,
            154,
        ),
        (
            "resnet_train",
            3_192_592_912,
            1.117,
            1.062,
            1.0096,
            3,
            606,
            118,
        ),
        (
            "model_swap_video",
            1_077_977_344,
            1.832,
            1.033,
            1.0330,
            2,
            449,
            63,
        ),
    ] {
        let t = trace(&report, name);
        assert_eq!(u(&t["peak_live"]), peak_live, "{}", name);
        assert_eq!(u(&t["live_at_end"]), live_at_end, "{}", name);
        assert_eq!(u(&t["unknown_frees"]), 0, "{}", name);
        let recorded = policy(t, "recorded");
        assert_eq!(u(&recorded["peak_live"]), peak_live);
        let r = ratio(recorded);
        assert!(
            (r - torch).abs() < 0.015,
            "{} recorded {:.4} vs README {}",
            name,
            r,
            torch
        );
        let passthrough = policy(t, "passthrough");
        let p = ratio(passthrough);
        assert!(
            (p - rounding).abs() < 0.0015,
            "{} passthrough {:.4} vs {}",
            name,
            p,
            rounding
        );
        assert_eq!(u(&passthrough["source_allocs"]), u(&t["allocs"]));
        assert_eq!(u(&passthrough["source_frees"]), u(&t["frees"]));
        let pool = policy(t, "rocmguard");
        assert_eq!(
            u(&pool["peak_live"]),
            peak_live,
            "{}: no OOM, same demand",
            name
        );
        assert_eq!(u(&pool["ooms"]), 0);
        let g = ratio(pool);
        assert!(
            (1.0..=TARGET).contains(&g),
            "{}: rocmguard's peak reserved / peak live {:.4} is above the README's target {}",
            name,
            g,
            TARGET
        );
        assert!(
            (g - ours).abs() < 0.0015,
            "{}: rocmguard {:.4} vs README {}",
            name,
            g,
            ours
        );
        // Pooled: memory is reused, not given back and made again (growing to 13 GiB in 16 MiB
        // pieces maps 850 of them on gpt2_train, one a growth, not a churn).
        assert!(
            u(&pool["source_frees"]) < u(&t["allocs"]) / 10,
            "{}: pooled",
            name
        );
        assert_calls(name, pool, calls, recorded, torch_calls);
        for p in t["policies"].as_array().unwrap() {
            let min = u(&p["min_capacity"]);
            assert!(
                min >= peak_live && min.is_multiple_of(RESOLUTION),
                "{}: {}",
                name,
                p
            );
            assert!(p["events_per_sec"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn the_table_shows_every_policy_and_the_notes() {
    let out = replay(&[], &[&shared_traces().join("resnet_train.csv.gz")]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    for want in [
        "resnet_train",
        "peak live 2.97 GiB = 3192592912 B",
        "3 allocations (65.0 MiB) still live at the end",
        "min capacity",
        "rocmguard ",
        "passthrough ",
        "recorded ",
    ] {
        assert!(table.contains(want), "no `{}` in\n{}", want, table);
    }
    assert!(out.stderr.is_empty(), "{}", text(&out));
}

#[test]
fn rmm_native_logs_read() {
    let report = replay_json(&[], &[&fixture("rmm_native.csv")]);
    let t = trace(&report, "rmm_native");
    assert_eq!(u(&t["peak_live"]), 5 << 20);
    assert_eq!(u(&t["allocs"]), 3);
    assert_eq!(u(&t["frees"]), 1);
    assert_eq!(u(&t["unknown_frees"]), 1);
    assert_eq!(u(&t["skipped"]), 1, "the allocate failure row");
    assert_eq!(u(&t["live_at_end"]), 2);
    assert_eq!(u(&t["live_at_end_bytes"]), 5 << 20);
    let names: Vec<&str> = t["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["rocmguard", "passthrough"],
        "no segment rows: no recorded"
    );
}

#[test]
fn our_format_splits_devices_and_skips_shim_events() {
    let mut text = String::new();
    trace::write_header(&mut text);
    let mut t = 0;
    let mut row = |text: &mut String, action, pointer, size, device| {
        t += 10;
        let e = Event {
            thread: 7,
            time_us: t,
            device,
            detail: "hipMalloc",
            ..Event::new(action, pointer, size)
        };
        trace::write_event(&e, text);
    };
    row(
        &mut text,
        Action::SegmentAlloc,
        0x7f00_0000_0000,
        2 << 20,
        0,
    );
    row(&mut text, Action::Allocate, 0x7f00_0000_0000, 1000, 0);
    row(&mut text, Action::Allocate, 0x7f00_0000_0000, 3000, 1);
    row(&mut text, Action::Trim, 0, 2 << 20, 0);
    row(&mut text, Action::Sync, 0, 0, 1);
    row(&mut text, Action::Oom, 0, 1 << 40, 1);
    row(&mut text, Action::Free, 0x7f00_0000_0000, 1000, 0);
    row(&mut text, Action::SegmentFree, 0x7f00_0000_0000, 2 << 20, 0);
    let dir = scratch("devices");
    let path = dir.path().join("rec.csv");
    std::fs::write(&path, &text).unwrap();
    let report = replay_json(&[], &[&path]);
    let d0 = trace(&report, "rec (dev 0)");
    let d1 = trace(&report, "rec (dev 1)");
    assert_eq!((u(&d0["device"]), u(&d1["device"])), (0, 1));
    assert_eq!((u(&d0["peak_live"]), u(&d1["peak_live"])), (1000, 3000));
    assert_eq!((u(&d0["skipped"]), u(&d1["skipped"])), (1, 2));
    assert_eq!(u(&policy(d0, "recorded")["peak_reserved"]), 2 << 20);
    assert_eq!(u(&policy(d0, "recorded")["source_frees"]), 1);
    assert!(d1["policies"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["policy"] != "recorded"));
}

/// Writes a `torch.cuda.memory._dump_snapshot` pickle with python3's own pickle module, laid out
/// as torch/csrc/cuda/Module.cpp builds it: `segments`, `device_traces` (one list per device) of
/// dicts with action, addr, size, stream, time_us, frames, and `oom` entries with device_free.
fn write_snapshot(path: &Path, protocol: u32) {
    let script = r#"
import pickle, sys
MiB = 1 << 20
frames = [{"filename": "train.py", "line": 12, "name": "forward"}]
def e(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": frames, "compile_context": "N/A", "user_metadata": ""}
dev0 = [
    e("segment_alloc", 0x7f0000000000, 20 * MiB, 1000),
    e("alloc", 0x7f0000000000, 3 * MiB, 1001),
    e("alloc", 0x7f0000300000, 1 * MiB, 1002),
    e("free_requested", 0x7f0000000000, 3 * MiB, 1003),
    e("free_completed", 0x7f0000000000, 3 * MiB, 1004),
    e("alloc", 0x7f0000400000, 5 * MiB, 1005),
    {"action": "oom", "device_free": 12345, "size": 80 * MiB, "stream": 0, "time_us": 1006,
     "frames": [], "compile_context": "N/A", "user_metadata": ""},
    e("free_completed", 0x7e0000000000, 4 * MiB, 1007),
    e("snapshot", 0, 0, 1008),
]
dev1 = [e("alloc", 0x7f1000000000, 7 * MiB, 5)]
snap = {"segments": [{"device": 0, "address": 0x7f0000000000, "total_size": 20 * MiB,
                      "stream": 0, "segment_type": "large", "blocks": []}],
        "device_traces": [dev0, dev1, []],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
        "external_annotations": []}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snap, f, protocol=int(sys.argv[2]))
"#;
    let out = output(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(path)
            .arg(protocol.to_string()),
    );
    assert!(out.status.success(), "python3: {}", text(&out));
}

#[test]
fn pytorch_snapshots_read() {
    let dir = scratch("snapshot");
    for protocol in [2, 4, 5] {
        let path = dir.path().join(format!("snap{}.pickle", protocol));
        write_snapshot(&path, protocol);
        let report = replay_json(&[], &[&path]);
        let name = format!("snap{}", protocol);
        let d0 = trace(&report, &format!("{} (dev 0)", name));
        assert_eq!(u(&d0["peak_live"]), 6 << 20, "protocol {}", protocol);
        assert_eq!(u(&d0["allocs"]), 3);
        assert_eq!(u(&d0["frees"]), 1);
        assert_eq!(u(&d0["unknown_frees"]), 1);
        assert_eq!(u(&d0["live_at_end"]), 2);
        assert_eq!(u(&d0["skipped"]), 3, "free_requested, oom, snapshot");
        assert_eq!(u(&policy(d0, "recorded")["peak_reserved"]), 20 << 20);
        let d1 = trace(&report, &format!("{} (dev 1)", name));
        assert_eq!(u(&d1["peak_live"]), 7 << 20);
        assert_eq!(
            report["traces"].as_array().unwrap().len(),
            2,
            "device 2 is empty"
        );
    }
}

#[test]
fn a_pickle_that_is_no_snapshot_is_refused() {
    let dir = scratch("notsnapshot");
    let path = dir.path().join("list.pickle");
    let out = output(
        Command::new("python3")
            .arg("-c")
            .arg("import pickle,sys; pickle.dump([1, 2], open(sys.argv[1], 'wb'), protocol=4)")
            .arg(&path),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = replay(&[], &[&path]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("rocmguard: {}: ", path.display()))
            && err.contains("not a PyTorch memory snapshot"),
        "{}",
        err
    );
}

#[test]
fn gzip_is_recognized_by_content_not_name() {
    let dir = scratch("gzip");
    let plain = std::fs::read(fixture("rmm_native.csv")).unwrap();
    let zipped = dir.path().join("rmm_native.csv");
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&plain).unwrap();
    std::fs::write(&zipped, gz.finish().unwrap()).unwrap();
    let misnamed = dir.path().join("plain.gz");
    std::fs::write(&misnamed, &plain).unwrap();
    let report = replay_json(&[], &[&zipped, &misnamed]);
    assert_eq!(u(&trace(&report, "rmm_native")["peak_live"]), 5 << 20);
    assert_eq!(u(&trace(&report, "plain")["peak_live"]), 5 << 20);
}

#[test]
fn broken_files_name_file_line_and_problem() {
    let bad = fixture("bad_size.csv");
    let out = replay(&[], &[&bad]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "rocmguard: {}:5: Size `12x` is not a byte count\n",
            bad.display()
        )
    );
    assert!(out.stdout.is_empty(), "nothing reported for a broken file");

    let dir = scratch("broken");
    let truncated = dir.path().join("truncated.csv.gz");
    let full = std::fs::read(shared_traces().join("gpt2_train.csv.gz")).unwrap();
    std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let out = replay(&[], &[&truncated]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let prefix = format!("rocmguard: {}:", truncated.display());
    let line: u64 = err
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no FILE:LINE: in {}", err));
    assert!(line > 1000, "the cut is deep in the file: {}", err);

    let missing = dir.path().join("missing.csv");
    let out = replay(&[], &[&missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

#[test]
fn unknown_policies_and_knobs_list_what_exists() {
    let f = fixture("two_allocs.csv");
    let out = replay(&["--policy", "tlsf"], &[&f]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in [
        "unknown policy `tlsf`",
        "rocmguard",
        "passthrough",
        "recorded",
    ] {
        assert!(err.contains(name), "{}", err);
    }
    let out = replay(&["--policy", "rocmguard:max_splt=64MiB"], &[&f]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in [
        "unknown knob `max_splt`",
        "max_split",
        "trim_threshold",
        "vram_limit",
    ] {
        assert!(err.contains(name), "{}", err);
    }
    let out = replay(&["--policy", "rocmguard:trim_threshold=7"], &[&f]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 1"));
    let out = replay(&["--policy", "passthrough:max_split=1MiB"], &[&f]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn capacity_ooms_and_min_capacity_agree() {
    // 3 MiB and 5 MiB live together: a driver reserves 4 + 6 MiB.
    let f = fixture("two_allocs.csv");
    let report = replay_json(&[], &[&f]);
    let t = trace(&report, "two_allocs");
    assert_eq!(u(&policy(t, "passthrough")["min_capacity"]), 10 << 20);
    assert_eq!(u(&policy(t, "passthrough")["peak_reserved"]), 10 << 20);
    for capacity in ["8MiB", "10MiB", "64MiB"] {
        let report = replay_json(
            &[
                "--capacity",
                capacity,
                "--policy",
                "rocmguard",
                "--policy",
                "rocmguard:max_split=4MiB,trim_threshold=0.5",
                "--policy",
                "passthrough",
            ],
            &[&f],
        );
        let cap = rocmguard_core::parse_size(capacity).unwrap();
        assert_eq!(u(&report["capacity"]), cap);
        for p in trace(&report, "two_allocs")["policies"].as_array().unwrap() {
            let fits = u(&p["min_capacity"]) <= cap;
            assert_eq!(u(&p["ooms"]) == 0, fits, "at {}: {}", capacity, p);
        }
    }
    let report = replay_json(&["--capacity", "8MiB", "--policy", "passthrough"], &[&f]);
    assert_eq!(
        u(&policy(trace(&report, "two_allocs"), "passthrough")["ooms"]),
        1
    );
    // A cap below the trace's need: no device is big enough.
    let report = replay_json(&["--policy", "rocmguard:vram_limit=6MiB"], &[&f]);
    let p = policy(trace(&report, "two_allocs"), "rocmguard:vram_limit=6MiB");
    assert_eq!(p["min_capacity"], Value::Null);
    assert_eq!(u(&p["ooms"]), 1);
}

#[test]
fn plots_show_every_trace_and_policy() {
    let dir = scratch("plot");
    let svg = dir.path().join("out.svg");
    let traces = shared_traces();
    let gpt2 = traces.join("gpt2_train.csv.gz");
    let resnet = traces.join("resnet_train.csv.gz");
    let out = replay(
        &["--plot", svg.to_str().unwrap(), "--capacity", "16GiB"],
        &[&gpt2, &resnet],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
    for want in [
        "gpt2_train",
        "resnet_train",
        "rocmguard",
        "passthrough",
        "recorded",
        "capacity 16.00 GiB",
    ] {
        assert!(doc.contains(want), "no {} in the plot", want);
    }
    let lines: Vec<&str> = doc.lines().filter(|l| l.starts_with("<polyline")).collect();
    assert_eq!(
        lines.len(),
        6,
        "two traces x three policies, none with OOMs at 16 GiB"
    );
    for l in lines {
        let points = l
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .count();
        assert!((500..=3000).contains(&points), "{} points", points);
    }
    let html = dir.path().join("out.html");
    let out = replay(&["--plot", html.to_str().unwrap()], &[&gpt2]);
    assert!(out.status.success(), "{}", text(&out));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("<svg"));
    let out = replay(
        &["--plot", dir.path().join("out.png").to_str().unwrap()],
        &[&gpt2],
    );
    assert_eq!(out.status.code(), Some(2));
}

// ---- property tests: the readers never panic, the search never lies ----

fn valid_trace_text() -> String {
    let mut text = String::new();
    trace::write_header(&mut text);
    for i in 0..40u64 {
        let action = if i % 3 == 2 {
            Action::Free
        } else {
            Action::Allocate
        };
        let e = Event {
            time_us: i * 17,
            ..Event::new(
                action,
                0x7f00_0000_0000 + (i % 7) * 0x10_0000,
                (i + 1) * 999_983,
            )
        };
        trace::write_event(&e, &mut text);
    }
    text
}

fn check_invariants(traces: &[Trace]) {
    for t in traces {
        assert_eq!(t.ops.len(), t.times.len());
        assert!(t.times.windows(2).all(|w| w[0] <= w[1]));
        let allocs = t
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Alloc { .. }))
            .count() as u64;
        assert_eq!(allocs, t.allocs);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_bytes_never_panic(
        prefix in prop::sample::select(vec![
            Vec::new(),
            b"Thread,Time,Action,Pointer,Size,Stream\n".to_vec(),
            vec![0x1f, 0x8b],
            vec![0x80, 0x04],
            vec![0x80, 0x02, b'}'],
        ]),
        bytes in prop::collection::vec(any::<u8>(), 0..3000),
    ) {
        let input = [prefix, bytes].concat();
        if let Ok(traces) = load::load_bytes("fuzz", &input) {
            check_invariants(&traces);
        }
    }

    #[test]
    fn mutated_traces_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..12),
        zip in any::<bool>(),
    ) {
        let mut bytes = valid_trace_text().into_bytes();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len().max(1));
            match kind {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i.min(bytes.len()), byte),
                _ if i < bytes.len() => { bytes.remove(i); }
                _ => {}
            }
        }
        let input = if zip { gzip(&bytes) } else { bytes };
        match load::load_bytes("fuzz", &input) {
            Ok(traces) => {
                check_invariants(&traces);
                for t in &traces {
                    for p in Policy::defaults() {
                        let _ = policy::replay(t, &p, 64 << 20, false, None);
                    }
                }
            }
            Err(e) => prop_assert!(e.file == "fuzz" && !e.message.is_empty()),
        }
    }

    #[test]
    fn written_events_read_back(
        thread in any::<u64>(), time in any::<u64>(), pointer in any::<u64>(),
        size in any::<u64>(), stream in any::<u64>(), device in any::<i32>(),
        action in prop::sample::select(Action::ALL.to_vec()),
        detail in "[ -~]{0,40}",
    ) {
        let e = Event { thread, time_us: time, action, pointer, size, stream, device, detail: &detail };
        let mut line = String::new();
        trace::write_event(&e, &mut line);
        prop_assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let columns = trace::Columns::parse_header(trace::header(), 1).unwrap();
        let got = trace::parse_event(line.trim_end_matches('\n'), &columns, 2).unwrap();
        let clean: String = detail.chars().map(|c| if c == ',' || c == '"' { ' ' } else { c }).collect();
        prop_assert_eq!(got, Event { detail: clean.trim(), ..e });
    }

    #[test]
    fn the_capacity_search_is_exact(
        ops in prop::collection::vec((any::<bool>(), 0..12usize, 1u64..(40 << 20)), 1..60),
    ) {
        let mut text = String::new();
        trace::write_header(&mut text);
        for (i, (free, slot, size)) in ops.into_iter().enumerate() {
            let action = if free { Action::Free } else { Action::Allocate };
            let e = Event { time_us: i as u64, ..Event::new(action, 0x1000 * (slot as u64 + 1), size) };
            trace::write_event(&e, &mut text);
        }
        let traces = load::load_bytes("prop", text.as_bytes()).unwrap();
        for t in &traces {
            for p in [
                Policy::parse("rocmguard").unwrap(),
                Policy::parse("rocmguard:max_split=8MiB,trim_threshold=0.6").unwrap(),
                Policy::parse("pytorch").unwrap(),
                Policy::parse("pytorch:expandable_segments:True").unwrap(),
                Policy::parse("pytorch:max_split_size_mb:20,roundup_power2_divisions:4").unwrap(),
                Policy::parse("passthrough").unwrap(),
            ] {
                let free_run = policy::replay(t, &p, UNLIMITED, false, None);
                prop_assert_eq!(free_run.ooms, 0);
                prop_assert_eq!(free_run.peak_live, t.peak_live);
                prop_assert!(free_run.peak_reserved >= t.peak_live);
                let found = policy::min_capacity(t, &p, free_run.peak_reserved).capacity;
                if t.allocs == 0 {
                    continue;
                }
                let c = found.unwrap();
                prop_assert_eq!(policy::replay(t, &p, c, false, None).ooms, 0, "{} at {}", p.name, c);
                if c >= RESOLUTION {
                    prop_assert!(policy::replay(t, &p, c - RESOLUTION, true, None).ooms > 0, "{} at {} - 2 MiB", p.name, c);
                }
            }
        }
    }
}

#[test]
fn truncated_gzip_never_panics() {
    let zipped = gzip(valid_trace_text().as_bytes());
    for cut in 0..zipped.len() {
        match load::load_bytes("cut", &zipped[..cut]) {
            Ok(traces) => check_invariants(&traces),
            Err(e) => assert!(!e.message.is_empty()),
        }
    }
    let full = std::fs::read(shared_traces().join("resnet_train.csv.gz")).unwrap();
    for cut in (0..full.len()).step_by(full.len() / 97) {
        let e = load::load_bytes("cut", &full[..cut]).unwrap_err();
        assert!(cut == 0 || e.line.is_some(), "{}", e);
    }
}

/// `--capacity` suggests only what it accepts: each example in its error message is taken.
#[test]
fn capacity_errors_suggest_what_capacity_accepts() {
    let f = fixture("two_allocs.csv");
    let out = replay(&["--capacity", "banana"], &[&f]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let hint = err
        .split("(try ")
        .nth(1)
        .unwrap_or_else(|| panic!("a suggestion: {}", err));
    let examples: Vec<&str> = hint
        .trim_end()
        .trim_end_matches(')')
        .split([',', ' '])
        .filter(|w| !w.is_empty() && w.chars().next().unwrap().is_ascii_digit())
        .collect();
    assert!(!examples.is_empty(), "{}", err);
    for example in examples {
        let out = replay(&["--json", "--capacity", example], &[&f]);
        assert!(
            out.status.success(),
            "suggested `{}`: {}",
            example,
            text(&out)
        );
    }
}

/// The events/s column has one definition, and `replay --help` gives it.
#[test]
fn help_defines_the_events_per_second_column() {
    let out = output(Command::new(cli()).args(["replay", "--help"]));
    assert!(out.status.success(), "{}", text(&out));
    // One line per phrase, however the terminal width wrapped it.
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("events/s = the trace's allocations and frees over the time of one replay")
            && help.contains("the search is not counted"),
        "{}",
        help
    );
}

// ---- PyTorch's caching allocator, modelled and checked against what PyTorch did ----

/// Where the model and PyTorch's recorded segments differ by more than 0.1%, by how much and
/// why (the test prints them). Cached blocks of one size are taken lowest address first, so
/// the driver's addresses decide ties. The model hands out `cudaMalloc` addresses downwards:
/// upwards, w4_swap was 4.1% apart, beam_search 5.1% and moe_top2 0.5%; downwards all three
/// match. The real driver goes neither way throughout (w4_swap's rows), so a tie can still go
/// the other way, as on decode.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "unet",
        "+1.06%: the recording began after PyTorch had cached one 2 MiB small segment (the first \
         rows use it with no segment_alloc row before them): the model counts that segment, the \
         recorded rows cannot",
    ),
    (
        "decode",
        "+1.33%: one 2 MiB small segment more; with the model's addresses going upwards it was \
         exact, so a tie between two cached blocks of one size went the other way (the \
         driver's real addresses are in the rows, not in the model)",
    ),
];

/// The `expandable_segments:True` ratios measured on the GPU (peak reserved / peak allocated)
/// that data/traces/README.md's tables give, by trace: from a column whose header names
/// `expandable_segments` (the second figure of an `A / B` cell whose header names the default
/// first).
fn measured_expandable_ratios() -> BTreeMap<String, f64> {
    let readme = std::fs::read_to_string(shared_traces().join("README.md")).unwrap();
    let mut out = BTreeMap::new();
    let mut column: Option<(usize, bool)> = None;
    let mut in_table = false;
    for line in readme.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if !in_table {
            in_table = true;
            column = cells
                .iter()
                .position(|c| c.contains("expandable_segments"))
                .map(|i| {
                    let h = cells[i].to_ascii_lowercase();
                    (
                        i,
                        h.contains("default") && h.find("default") < h.find("expandable"),
                    )
                });
            continue;
        }
        let Some((i, second)) = column else { continue };
        let numbers: Vec<f64> = cells
            .get(i)
            .unwrap_or(&"")
            .split('/')
            .filter_map(|part| {
                let n: String = part
                    .trim()
                    .trim_matches('*')
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                n.parse().ok()
            })
            .collect();
        let value = if second {
            numbers.get(1)
        } else {
            numbers.first()
        };
        if let Some(&v) = value {
            out.insert(cells[0].trim_matches('`').to_string(), v);
        }
    }
    out
}

/// Every trace file in data/traces/, whatever its number (the corpus grows).
fn all_shared_trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(shared_traces())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            [".csv.gz", ".csv", ".pickle", ".pkl"]
                .iter()
                .any(|ext| name.ends_with(ext))
        })
        .collect();
    files.sort();
    files
}

/// The peak reserved of each workload's own process without recording, with PyTorch's default
/// settings (data/traces/gpu_figures.json, `default`), by trace.
fn plain_process_peaks() -> BTreeMap<String, u64> {
    let path = shared_traces().join("gpu_figures.json");
    let figures: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    figures["workloads"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(name, w)| Some((name.clone(), w["default"]["peak_reserved"].as_u64()?)))
        .collect()
}

/// Issue 23's acceptance: on every trace with PyTorch's segment rows the model with default
/// settings lands within 3% of the peak PyTorch reserved, and `expandable_segments:True`
/// within 0.03 of the ratio measured on the GPU where the README gives one. Where the
/// recording process reserved other than the same program's process without recording
/// (beam_search: 855.6 MB against 834.7 MB, 2.5% apart), PyTorch has two answers, and the
/// model must land within 3% of one of them.
#[test]
fn the_pytorch_model_reserves_what_pytorch_reserved() {
    let files = all_shared_trace_files();
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let expandable = "pytorch:expandable_segments:True";
    let report = replay_json(
        &[
            "--policy", "recorded", "--policy", "pytorch", "--policy", expandable,
        ],
        &refs,
    );
    let measured = measured_expandable_ratios();
    let plain = plain_process_peaks();
    let (mut checked, mut checked_expandable) = (0, 0);
    println!(
        "{:<22} {:>16} {:>16} {:>8}   {:>8} {:>8}",
        "trace", "recorded B", "model B", "diff", "exp GPU", "exp model"
    );
    for t in report["traces"].as_array().unwrap() {
        let name = t["trace"].as_str().unwrap();
        let Some(recorded) = t["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["policy"] == "recorded")
        else {
            continue;
        };
        let (rec, model) = (
            u(&recorded["peak_reserved"]),
            u(&policy(t, "pytorch")["peak_reserved"]),
        );
        let diff = (model as f64 - rec as f64) / rec as f64;
        let exp = ratio(policy(t, expandable));
        let gpu = measured.get(name).copied();
        println!(
            "{:<22} {:>16} {:>16} {:>+7.2}%   {:>8} {:>8.3}",
            name,
            rec,
            model,
            diff * 100.0,
            gpu.map_or("-".to_string(), |g| format!("{:.3}", g)),
            exp
        );
        if diff.abs() > 0.001 {
            let why = KNOWN_DIFFERENCES
                .iter()
                .find(|k| k.0 == name)
                .map_or("no explanation recorded yet", |k| k.1);
            println!("    {}: {}", name, why);
        }
        let plain_diff = plain
            .get(name)
            .map_or(f64::INFINITY, |&p| (model as f64 - p as f64) / p as f64);
        assert!(
            diff.abs() <= 0.03 || plain_diff.abs() <= 0.03,
            "{}: the model reserves {} B, PyTorch reserved {} B ({:+.2}%), {:+.2}% from its \
             process without recording",
            name,
            model,
            rec,
            diff * 100.0,
            plain_diff * 100.0
        );
        assert_eq!(u(&policy(t, "pytorch")["ooms"]), 0, "{}", name);
        checked += 1;
        if let Some(gpu) = gpu {
            assert!(
                (exp - gpu).abs() <= 0.03,
                "{}: expandable_segments:True modelled at {:.3}, measured {:.3} on the GPU",
                name,
                exp,
                gpu
            );
            checked_expandable += 1;
        }
    }
    // The repository's traces with segment rows and measured ratios were found.
    assert!(checked >= 7, "{} traces with segment rows", checked);
    assert!(
        checked_expandable >= 3,
        "{} measured ratios",
        checked_expandable
    );
}

/// One allocation trace in our format: (allocate?, slot, bytes, stream).
fn synthetic(rows: &[(bool, u64, u64, u64)]) -> Trace {
    let mut text = String::new();
    trace::write_header(&mut text);
    for (i, &(alloc, slot, size, stream)) in rows.iter().enumerate() {
        let action = if alloc {
            Action::Allocate
        } else {
            Action::Free
        };
        let e = Event {
            time_us: i as u64,
            stream,
            ..Event::new(action, 0x1000 * (slot + 1), size)
        };
        trace::write_event(&e, &mut text);
    }
    load::load_bytes("synthetic", text.as_bytes())
        .unwrap()
        .remove(0)
}

fn torch(trace: &Trace, conf: &str, capacity: u64) -> policy::Outcome {
    let p = Policy::parse(&format!("pytorch{}", conf)).unwrap();
    policy::replay(trace, &p, capacity, false, None)
}

const MIB: u64 = 1 << 20;

/// PyTorch caches a freed block for the stream it was allocated on only.
#[test]
fn pytorch_blocks_stay_with_their_stream() {
    let on = |stream| {
        synthetic(&[
            (true, 0, 4 * MIB, 1),
            (false, 0, 4 * MIB, 1),
            (true, 1, 4 * MIB, stream),
        ])
    };
    // 1-10 MiB requests share 20 MiB segments (kLargeBuffer).
    assert_eq!(torch(&on(1), "", UNLIMITED).peak_reserved, 20 * MIB);
    assert_eq!(torch(&on(0), "", UNLIMITED).peak_reserved, 40 * MIB);
}

/// `max_split_size_mb`: larger blocks are never split and serve only requests within
/// `max_non_split_rounding_mb` (20 MiB) of their size.
#[test]
fn pytorch_max_split_size_keeps_large_blocks_whole() {
    let t = |second| {
        synthetic(&[
            (true, 0, 200 * MIB, 0),
            (false, 0, 200 * MIB, 0),
            (true, 1, second, 0),
        ])
    };
    assert_eq!(
        torch(&t(150 * MIB), "", UNLIMITED).peak_reserved,
        200 * MIB,
        "split"
    );
    let capped = ":max_split_size_mb:100";
    assert_eq!(
        torch(&t(150 * MIB), capped, UNLIMITED).peak_reserved,
        350 * MIB
    );
    assert_eq!(
        torch(&t(190 * MIB), capped, UNLIMITED).peak_reserved,
        200 * MIB
    );
    let wider = ":max_split_size_mb:100,max_non_split_rounding_mb:64";
    assert_eq!(
        torch(&t(150 * MIB), wider, UNLIMITED).peak_reserved,
        200 * MIB
    );
}

/// On a failed device allocation PyTorch frees its cached segments and retries.
#[test]
fn pytorch_frees_its_cache_and_retries_before_an_oom() {
    let t = synthetic(&[
        (true, 0, 60 * MIB, 0),
        (false, 0, 60 * MIB, 0),
        (true, 1, 70 * MIB, 0),
    ]);
    let o = torch(&t, "", 100 * MIB);
    assert_eq!((o.ooms, o.peak_reserved), (0, 70 * MIB));
    assert_eq!((o.source_allocs, o.source_frees), (2, 1));
    assert_eq!(torch(&t, "", 69 * MIB).ooms, 1);
}

/// `expandable_segments:True` maps 2 MiB pages for small requests and 20 MiB pages for large
/// ones, and a segment grows in place instead of a new one per request.
#[test]
fn pytorch_expandable_segments_grow_by_pages() {
    let exp = ":expandable_segments:True";
    let small = synthetic(&[(true, 0, 1000, 0)]);
    assert_eq!(torch(&small, exp, UNLIMITED).peak_reserved, 2 * MIB);
    let large = synthetic(&[(true, 0, 3 * MIB, 0), (true, 1, 30 * MIB, 0)]);
    let o = torch(&large, exp, UNLIMITED);
    // 3 MiB: one 20 MiB page; 30 MiB more: the 17 MiB left free and one more page.
    assert_eq!(o.peak_reserved, 40 * MIB);
    assert_eq!(
        torch(&large, "", UNLIMITED).peak_reserved,
        20 * MIB + 30 * MIB
    );
}

/// `garbage_collection_threshold` acts only under a memory fraction below 1, as in PyTorch
/// (`allowed_memory_maximum`): without one it changes nothing.
#[test]
fn pytorch_garbage_collection_needs_a_memory_fraction() {
    // Two 100 MiB segments cached, then a 300 MiB request on a 500 MiB device.
    let t = synthetic(&[
        (true, 0, 100 * MIB, 0),
        (true, 1, 100 * MIB, 0),
        (false, 0, 100 * MIB, 0),
        (false, 1, 100 * MIB, 0),
        (true, 2, 300 * MIB, 0),
    ]);
    let plain = torch(&t, ":garbage_collection_threshold:0.5", 500 * MIB);
    assert_eq!(plain.peak_reserved, 500 * MIB, "gc off without a fraction");
    let gc = torch(
        &t,
        ":garbage_collection_threshold:0.5,per_process_memory_fraction:0.99",
        500 * MIB,
    );
    assert_eq!((gc.ooms, gc.peak_reserved), (0, 300 * MIB));
}

/// `--capacity 85%`: a share of no device. The error says so and names what is accepted.
#[test]
fn a_capacity_share_asks_for_the_device_size() {
    let out = replay(&["--capacity", "85%"], &[&fixture("two_allocs.csv")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in ["share needs a device size", "24GiB", "default is unlimited"] {
        assert!(err.contains(want), "no `{}` in {}", want, err);
    }
}

/// A replay, plot included, leaves nothing in the temporary directory (issue 25).
#[test]
fn a_replay_leaves_nothing_behind() {
    let tmp = scratch("tmpdir");
    let out_dir = scratch("out");
    let plot = out_dir.path().join("p.svg");
    let out = output(
        Command::new(cli())
            .env("TMPDIR", tmp.path())
            .args(["replay", "--json", "--policy", "pytorch", "--plot"])
            .arg(&plot)
            .arg(fixture("two_allocs.csv")),
    );
    assert!(out.status.success(), "{}", text(&out));
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {:?}", left);
    let doc = std::fs::read_to_string(&plot).unwrap();
    assert!(
        doc.contains("pytorch") && doc.contains("<polyline"),
        "the plot draws it"
    );
}

/// A `pytorch:CONF` PyTorch would refuse is refused with PyTorch's words.
#[test]
fn pytorch_confs_pytorch_refuses_are_refused() {
    let f = fixture("two_allocs.csv");
    for (conf, says) in [
        (
            "max_split_size_mb:16",
            "CachingAllocator option max_split_size_mb too small, must be >= 20",
        ),
        ("expandable_segments:true", "Expected 'True' or 'False'"),
        (
            "max_split_size=128",
            "Unrecognized key 'max_split_size=128' in CUDA allocator config",
        ),
    ] {
        let policy = format!("pytorch:{}", conf);
        let out = replay(&["--policy", &policy], &[&f]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("policy `{}`", policy)) && err.contains(says),
            "{}",
            err
        );
    }
}
