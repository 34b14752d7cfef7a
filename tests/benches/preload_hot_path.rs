//! The preloaded hot path: hipMalloc+hipFree pairs served from the pool through the real
//! interposition (LD_PRELOAD, a C program, hipsim underneath), against the same calls straight
//! into the simulator with HIPSIM_LATENCY_US=0, and with trace recording on (two events a
//! pair). Prints the median nanoseconds per pair. Also what a program with its own cache pays:
//! `hipGetLastError` (PyTorch checks it after every kernel launch) through the shim and straight,
//! the medians of 5 interleaved runs each, and the difference per call. And what a program
//! that waits pays: CPU and thread wake-ups over 2 s asleep after it made a stream.
//! Needs `cargo build --release` first.
use rocmguard_tests::{compile_c, guarded_command, output, sim_command, text};

fn main() {
    let exe = compile_c("bench_pairs", &["bench_pairs.c"], &["-O2", "-lamdhip64"]);
    let measure = |mut cmd: std::process::Command, pairs: &str| -> f64 {
        let out = output(cmd.args(pairs.split(' ')).env("HIPSIM_LATENCY_US", "0"));
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let guarded = measure(guarded_command(&exe), "200000");
    let direct = measure(sim_command(&exe), "20000");
    let dir = tempfile::tempdir().unwrap();
    let mut traced_cmd = guarded_command(&exe);
    traced_cmd.env("ROCMGUARD_TRACE", dir.path().join("bench.csv"));
    let traced = measure(traced_cmd, "200000");
    println!(
        "hipMalloc+hipFree pair through librocmguard.so (pooled): {:>8.1} ns",
        guarded
    );
    println!(
        "hipMalloc+hipFree pair straight into hipsim (latency 0): {:>8.1} ns",
        direct
    );
    println!(
        "the same pair with ROCMGUARD_TRACE recording:           {:>8.1} ns ({:.1} ns per recorded event)",
        traced,
        (traced - guarded) / 2.0
    );
    let (mut shim, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        shim.push(measure(guarded_command(&exe), "2000000 lasterror"));
        straight.push(measure(sim_command(&exe), "2000000 lasterror"));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
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
