//! `rocmguard tune`: the real binary on the repository's traces. The line it prints is checked
//! against an independent `replay` of the same setting, its time against issue 23's minute.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rocmguard_cli::replay::load;
use rocmguard_tests::{cli, output, root, text};
use serde_json::Value;

fn traces() -> PathBuf {
    root().join("data/traces")
}

fn tune(args: &[&str]) -> Output {
    output(Command::new(cli()).arg("tune").args(args))
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    assert!(out.stderr.is_empty(), "stderr not quiet: {}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}: {}", e, text(out)))
}

/// Peak reserved of `policy` on `trace` as `replay` reports it.
fn replayed_peak(trace: &Path, policy: &str) -> u64 {
    let out = output(
        Command::new(cli())
            .args(["replay", "--json", "--policy", policy])
            .arg(trace),
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["traces"][0]["policies"][0]["peak_reserved"]
        .as_u64()
        .unwrap()
}

/// Issue 23: on resnet_train tune prints a line to paste whose peak reserved, replayed on its
/// own, is no worse than the default's, with the default's figures beside it.
#[test]
fn tune_prints_a_line_no_worse_than_the_default() {
    let trace = traces().join("resnet_train.csv.gz");
    let out = tune(&[trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find_map(|l| l.trim().strip_prefix("PYTORCH_HIP_ALLOC_CONF="))
        .unwrap_or_else(|| panic!("no line to paste in\n{}", table));
    for want in [
        "(unset: PyTorch's defaults)",
        "with the default",
        "rocmguard's pool",
    ] {
        assert!(table.contains(want), "no `{}` in\n{}", want, table);
    }
    let pick = replayed_peak(&trace, &format!("pytorch:{}", line));
    let default = replayed_peak(&trace, "pytorch");
    assert!(
        pick <= default,
        "{}: {} B, default {} B",
        line,
        pick,
        default
    );
    assert!(
        table.contains(&format!("({} B)", pick)),
        "tune and replay agree on {}:\n{}",
        pick,
        table
    );
}

/// Where tune names the pool, a program that allocates on several streams (fsdp_shard: FSDP2
/// gathers parameters on a stream of its own) is told what PyTorch's cache off costs it in step
/// time; a program on one stream (lora) is not.
#[test]
fn tune_names_the_step_time_cost_of_several_streams() {
    for (trace, streams) in [("fsdp_shard", 2), ("lora", 1)] {
        let path = traces().join(format!("{}.csv.gz", trace));
        let report = json(&tune(&["--json", path.to_str().unwrap()]));
        assert_eq!(report["streams"], streams, "{}", trace);
        assert_eq!(report["pool_wins"], true, "{}: the pool is named", trace);
        let out = tune(&[path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        let warned = table.contains(&format!("allocates on {} streams", streams))
            && table.contains("keep PyTorch's cache on with the line above");
        assert_eq!(warned, streams > 1, "{}:\n{}", trace, table);
    }
}

/// Tune ends with the command that shows why its pick and the pool reserve what they do; that
/// command runs as printed and shows both policies' peaks, at the capacity tune was given.
#[test]
fn tune_prints_a_peak_layout_command_that_runs() {
    let trace = traces().join("lora.csv.gz");
    for capacity in [None, Some("1590MiB")] {
        let mut args = vec![trace.to_str().unwrap()];
        if let Some(c) = capacity {
            args.extend(["--capacity", c]);
        }
        let out = tune(&args);
        assert!(out.status.success(), "{}", text(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        let command = table
            .lines()
            .find_map(|l| l.trim().strip_prefix("rocmguard replay --peak-layout "))
            .unwrap_or_else(|| panic!("no peak-layout command in\n{}", table));
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(
            words.contains(&"--capacity"),
            capacity.is_some(),
            "{}",
            command
        );
        let shown = output(
            Command::new(cli())
                .args(["replay", "--peak-layout"])
                .args(&words),
        );
        assert!(shown.status.success(), "{}: {}", command, text(&shown));
        let shown = String::from_utf8_lossy(&shown.stdout);
        for policy in words.iter().skip(1).step_by(2).take(2) {
            assert!(
                shown.contains(&format!("{} at its peak", policy)),
                "no peak of {} in\n{}",
                policy,
                shown
            );
        }
    }
}

/// Under a minute for the repository's largest trace (most allocations and frees), as for
/// resnet_train.
#[test]
fn tune_takes_under_a_minute_per_trace() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(traces())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
        .collect();
    files.sort();
    let largest = files
        .iter()
        .max_by_key(|p| load::load_path(p).unwrap()[0].events())
        .unwrap()
        .clone();
    for trace in [traces().join("resnet_train.csv.gz"), largest] {
        let start = Instant::now();
        let report = json(&tune(&["--json", trace.to_str().unwrap()]));
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(60),
            "{}: {:?}",
            trace.display(),
            took
        );
        // Every setting was tried: 5 max_split x 3 divisions x 2 expandable, and the pool at
        // four piece sizes and with a larger slack; without a capacity the pool is named with
        // its default pieces.
        assert_eq!(report["settings"].as_array().unwrap().len(), 35);
        assert_eq!(
            report["pool_piece_size"],
            Value::Null,
            "{}",
            trace.display()
        );
    }
}

/// The pool with `--peak-slack 25%` is shown beside the default pool and never named: on
/// seg_infer_long, whose layout changes at its peak, it makes under half the driver calls for
/// more memory, and a line says so; on resnet_train, whose layout does not, it changes nothing
/// and no line is printed.
#[test]
fn tune_shows_the_larger_slack_and_never_picks_it() {
    let seg = traces().join("seg_infer_long.csv.gz");
    let report = json(&tune(&["--json", seg.to_str().unwrap()]));
    let settings = report["settings"].as_array().unwrap();
    let pool = |slack: Value| {
        settings
            .iter()
            .find(|s| s["conf"].is_null() && s["piece_size"].is_null() && s["peak_slack"] == slack)
            .unwrap_or_else(|| panic!("no pool with peak_slack {} in {}", slack, report))
    };
    let (default, slack) = (pool(Value::Null), pool(Value::from("25%")));
    let calls = |s: &Value| s["runs"][0]["driver_calls"].as_u64().unwrap();
    assert!(
        2 * calls(slack) <= calls(default),
        "{} against {}",
        calls(slack),
        calls(default)
    );
    assert!(slack["mean_ratio"].as_f64().unwrap() > default["mean_ratio"].as_f64().unwrap());
    assert_eq!(
        report["pool_piece_size"],
        Value::Null,
        "the default pool is named"
    );
    let out = tune(&[seg.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("rocmguard's pool, --peak-slack 25%"),
        "{}",
        table
    );
    assert!(table.contains("(--peak-slack 25%: "), "{}", table);
    let resnet = traces().join("resnet_train.csv.gz");
    let out = tune(&[resnet.to_str().unwrap()]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("(--peak-slack"),
        "{}",
        text(&out)
    );
}

/// With a capacity the default cannot complete resnet_train in, the pick completes it, the
/// default is marked, and garbage collection is tried (it acts only under a fraction).
#[test]
fn tune_at_a_capacity_picks_a_setting_that_completes() {
    let trace = traces().join("resnet_train.csv.gz");
    let report = json(&tune(&[
        "--json",
        "--capacity",
        "3100MiB",
        trace.to_str().unwrap(),
    ]));
    let settings = report["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 95, "with garbage collection thresholds");
    assert_eq!(settings[0]["completes"], true, "{}", settings[0]);
    let default = settings.iter().find(|s| s["conf"] == "").unwrap();
    assert_eq!(default["completes"], false, "{}", default);
    assert!(settings.iter().any(|s| s["conf"]
        .as_str()
        .is_some_and(|c| c.contains("garbage_collection_threshold:0.6"))));
    let out = tune(&["--capacity", "3100MiB", trace.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(OOM)"),
        "{}",
        text(&out)
    );
}

/// Whether `policy` completes `trace` on a device of `capacity`, as `replay` reports it.
fn replay_completes(trace: &Path, policy: &str, capacity: &str) -> bool {
    let out = output(
        Command::new(cli())
            .args([
                "replay",
                "--json",
                "--capacity",
                capacity,
                "--policy",
                policy,
            ])
            .arg(trace),
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["traces"][0]["policies"][0]["ooms"].as_u64().unwrap() == 0
}

/// At a capacity where no PyTorch setting and not the pool's default pieces complete lora, tune
/// names the pool with the coarsest pieces that do, as a command line; replay agrees that those
/// complete and that the next coarser ones do not.
#[test]
fn tune_at_a_tight_capacity_names_the_pieces_that_fit() {
    let trace = traces().join("lora.csv.gz");
    let (path, capacity) = (trace.to_str().unwrap(), "1540MiB");
    let report = json(&tune(&["--json", "--capacity", capacity, path]));
    let settings = report["settings"].as_array().unwrap();
    assert!(
        settings
            .iter()
            .filter(|s| s["conf"].is_string())
            .all(|s| s["completes"] == false),
        "some PyTorch setting completes at {}",
        capacity
    );
    assert_eq!(report["pool_wins"], true);
    let piece = report["pool_piece_size"]
        .as_u64()
        .expect("finer pieces named");
    assert!(replay_completes(
        &trace,
        &format!("rocmguard:piece_size={}", piece),
        capacity
    ));
    let coarser = settings
        .iter()
        .filter_map(|s| s["piece_size"].as_u64())
        .filter(|&p| p > piece)
        .min()
        .unwrap_or(128 << 20);
    assert!(!replay_completes(
        &trace,
        &format!("rocmguard:piece_size={}", coarser),
        capacity
    ));
    let out = tune(&["--capacity", capacity, path]);
    let want = format!(
        "PYTORCH_NO_HIP_MEMORY_CACHING=1 rocmguard run --piece-size {}MiB -- ",
        piece >> 20
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&want),
        "no `{}` in\n{}",
        want,
        text(&out)
    );
    // Its note on driver time follows the figures: near the capacity the default pieces give
    // memory back and map it again, and may cost more than the finer ones.
    let driver_ms = |piece: Option<u64>| {
        let s = settings
            .iter()
            .find(|s| {
                s["conf"].is_null()
                    && s["peak_slack"].is_null()
                    && s["piece_size"].as_u64() == piece
            })
            .expect("a pool setting");
        s["runs"][0]["driver_ms"].as_f64().unwrap()
    };
    let cheaper = driver_ms(Some(piece)) <= driver_ms(None);
    let note = if cheaper {
        "finer pieces, and no more driver time here"
    } else {
        "expect slower steps"
    };
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(note),
        "no `{}` in\n{}",
        note,
        text(&out)
    );
}

#[test]
fn tune_plots_the_default_the_pick_and_the_pool() {
    let dir = tempfile::Builder::new()
        .prefix("rocmguard-tune-")
        .tempdir()
        .unwrap();
    let svg = dir.path().join("tune.svg");
    let trace = traces().join("unet.csv.gz");
    let out = tune(&["--plot", svg.to_str().unwrap(), trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        doc.lines().filter(|l| l.starts_with("<polyline")).count(),
        3
    );
    for want in ["unet", "pytorch:", "rocmguard"] {
        assert!(doc.contains(want), "no {} in the plot", want);
    }
    let out = tune(&["--plot", "x.png", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let out = tune(&["--capacity", "85%", trace.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("share needs a device size"));
}
