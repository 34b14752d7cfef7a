//! The preloaded hot path: hipMalloc+hipFree pairs served from the pool through the real
//! interposition (LD_PRELOAD, a C program, hipsim underneath), against the same calls straight
//! into the simulator with HIPSIM_LATENCY_US=0, and with trace recording on (two events a
//! pair). Then the same pairs as a plugin host makes them: a C program not linked to the
//! runtime dlopens an extension that is (RTLD_LOCAL) and calls it once per pair, 64 KiB pairs
//! and 8 MiB pairs. Each figure is the median nanoseconds per pair over 15 batches in one
//! process; the pooled ones are the median (and range) of 5 processes run in turn. Also what a
//! program with its own cache pays: `hipGetLastError` (PyTorch checks it after every kernel
//! launch) through the shim and straight, and the difference per call. And what a program
//! that waits pays: CPU and thread wake-ups over 2 s asleep after it made a stream.
//! Needs `cargo build --release` first.
use rocmguard_tests::{compile_c, guarded_command, output, sim_command, text};

const RUNS: usize = 5;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// "median (min-max)" of `v`.
fn spread(v: &mut [f64]) -> String {
    let m = median(v);
    format!("{:.1} ns ({:.1}-{:.1})", m, v[0], v[v.len() - 1])
}

fn main() {
    let exe = compile_c("bench_pairs", &["bench_pairs.c"], &["-O2", "-lamdhip64"]);
    let ext = compile_c(
        "libbench_pairs_ext.so",
        &["bench_pairs_ext_module.c"],
        &["-O2", "-shared", "-fPIC", "-lamdhip64"],
    );
    let host = compile_c("bench_pairs_ext", &["bench_pairs_ext.c"], &["-O2", "-ldl"]);
    let figures = |mut cmd: std::process::Command, args: &[&str]| -> Vec<f64> {
        let out = output(cmd.args(args).env("HIPSIM_LATENCY_US", "0"));
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect()
    };
    let measure = |cmd: std::process::Command, pairs: &str| -> f64 {
        figures(cmd, &pairs.split(' ').collect::<Vec<_>>())[0]
    };
    let ext_path = ext.to_str().unwrap();
    let (mut mixed, mut small, mut large) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        mixed.push(measure(guarded_command(&exe), "200000"));
        let through_ext = figures(guarded_command(&host), &[ext_path, "200000"]);
        small.push(through_ext[0]);
        large.push(through_ext[1]);
    }
    let guarded = median(&mut mixed);
    let direct = measure(sim_command(&exe), "20000");
    let direct_ext = figures(sim_command(&host), &[ext_path, "20000"]);
    let dir = tempfile::tempdir().unwrap();
    let mut traced_cmd = guarded_command(&exe);
    traced_cmd.env("ROCMGUARD_TRACE", dir.path().join("bench.csv"));
    let traced = measure(traced_cmd, "200000");
    println!(
        "hipMalloc+hipFree pair through librocmguard.so (pooled, sizes 512 B-8 MiB in turn): {}",
        spread(&mut mixed)
    );
    println!(
        "the same from a host through an RTLD_LOCAL extension, 64 KiB pairs / 8 MiB pairs: {} / {}",
        spread(&mut small),
        spread(&mut large)
    );
    println!(
        "hipMalloc+hipFree pair straight into hipsim (latency 0): {:.1} ns; through the extension {:.1} / {:.1} ns",
        direct, direct_ext[0], direct_ext[1]
    );
    println!(
        "the same pair with ROCMGUARD_TRACE recording:           {:>8.1} ns ({:.1} ns per recorded event)",
        traced,
        (traced - guarded) / 2.0
    );
    let (mut shim, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        shim.push(measure(guarded_command(&exe), "2000000 lasterror"));
        straight.push(measure(sim_command(&exe), "2000000 lasterror"));
    }
    let (shim, straight) = (median(&mut shim), median(&mut straight));
    println!(
        "hipGetLastError through librocmguard.so / straight:      {:>8.1} / {:.1} ns (+{:.1} ns a call)",
        shim,
        straight,
        shim - straight
    );
    let idle = |mut cmd: std::process::Command| -> String {
        let out = output(cmd.arg("idle"));
        assert!(out.status.success(), "{}", text(&out));
        let figures = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let (cpu, wakeups) = figures.split_once(' ').unwrap();
        format!("{} ms CPU, {} wake-ups", cpu, wakeups)
    };
    println!(
        "2 s asleep after a stream, through librocmguard.so / straight: {} / {}",
        idle(guarded_command(&exe)),
        idle(sim_command(&exe))
    );
}
