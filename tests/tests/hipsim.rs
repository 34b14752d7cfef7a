//! The simulated HIP runtime (`shim/hipsim`) and rocBLAS (`shim/rocblassim`) on their own, without
//! the shim: real C programs from `tests/c/sim_*.c` run against them and print what each call
//! returned; the assertions are here. Needs `cargo build --release` first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use rocmguard_tests::{compile_c, output, release_dir, sim_command, text};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

const SUCCESS: i64 = 0;
const INVALID_VALUE: i64 = 1;
const OUT_OF_MEMORY: i64 = 2;
const NO_DEVICE: i64 = 100;
const INVALID_DEVICE: i64 = 101;
const CAPTURE_UNSUPPORTED: i64 = 900;
const CAPTURE_INVALIDATED: i64 = 901;

/// Compiles a test program once per test binary (tests run in parallel and would otherwise
/// write the same output file at once).
fn program(name: &str, sources: &[&str], extra: &[&str]) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .get_or_insert_with(HashMap::new)
        .entry(name.to_string())
        .or_insert_with(|| compile_c(name, sources, extra))
        .clone()
}

fn ops_program() -> PathBuf {
    program("sim_ops", &["sim_ops.c"], &["-lamdhip64"])
}

fn interposer() -> PathBuf {
    program(
        "libsim_interposer.so",
        &["sim_interposer.c"],
        &["-shared", "-fPIC", "-ldl"],
    )
}

/// One printed line: the op, then its `key=value` pairs.
struct Line {
    op: String,
    values: HashMap<String, String>,
}

/// The output of a run, one line per op.
struct Run {
    out: Output,
    lines: Vec<Line>,
}

impl Run {
    fn parse(out: Output) -> Run {
        assert!(out.status.success(), "{}", text(&out));
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let mut words = l.split_whitespace();
                let op = words.next().unwrap_or_default().to_string();
                let values = words
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                Line { op, values }
            })
            .collect();
        Run { out, lines }
    }

    /// The line that starts with `op` (the first if several do).
    fn line(&self, op: &str) -> &Line {
        self.lines
            .iter()
            .find(|l| l.op == op)
            .unwrap_or_else(|| panic!("no line for {}\n{}", op, text(&self.out)))
    }

    fn str(&self, op: &str, key: &str) -> &str {
        self.str_of(self.line(op), key)
    }

    fn str_of<'a>(&self, line: &'a Line, key: &str) -> &'a str {
        line.values
            .get(key)
            .unwrap_or_else(|| panic!("{} has no {}\n{}", line.op, key, text(&self.out)))
    }

    fn num(&self, op: &str, key: &str) -> i64 {
        let v = self.str(op, key);
        v.parse()
            .unwrap_or_else(|_| panic!("{} {}={} is not a number", op, key, v))
    }

    fn unum(&self, op: &str, key: &str) -> u64 {
        let v = self.str(op, key);
        v.parse()
            .unwrap_or_else(|_| panic!("{} {}={} is not a number", op, key, v))
    }

    /// `rc` of every line that has one (all but `counters`), in order.
    fn rcs(&self) -> Vec<i64> {
        self.lines
            .iter()
            .filter_map(|l| l.values.get("rc"))
            .map(|rc| rc.parse().unwrap())
            .collect()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// Runs `sim_ops` with `env` and the ops.
fn ops(env: &[(&str, &str)], ops: &[&str]) -> Run {
    let mut cmd = sim_command(&ops_program());
    cmd.envs(env.iter().copied()).args(ops);
    Run::parse(output(&mut cmd))
}

fn run(exe: &Path, env: &[(&str, &str)]) -> Run {
    let mut cmd = sim_command(exe);
    cmd.envs(env.iter().copied());
    Run::parse(output(&mut cmd))
}

fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let out = output(Command::new(program).args(args).arg(file));
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The version `objdump -T` lists for `symbol` in `dump`.
fn version_of<'a>(dump: &'a str, symbol: &str) -> Option<&'a str> {
    dump.lines().find_map(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            [.., version, name] if *name == symbol => Some(*version),
            _ => None,
        }
    })
}

#[test]
fn exports_carry_the_symbol_versions_of_rocm() {
    let lib = release_dir().join("libamdhip64.so");
    let dump = tool("objdump", &["-T"], &lib);
    for (symbol, version) in [
        ("hipMalloc", "hip_4.2"),
        ("hipFree", "hip_4.2"),
        ("hipMemGetInfo", "hip_4.2"),
        ("hipExtMallocWithFlags", "hip_4.2"),
        ("hipMallocManaged", "hip_4.2"),
        ("hipDeviceGetAttribute", "hip_4.2"),
        ("hipGetLastError", "hip_4.2"),
        ("hipStreamBeginCapture", "hip_4.3"),
        ("hipStreamEndCapture", "hip_4.3"),
        ("hipThreadExchangeStreamCaptureMode", "hip_5.0"),
        ("hipMallocAsync", "hip_5.1"),
        ("hipFreeAsync", "hip_5.1"),
        ("hipMallocFromPoolAsync", "hip_5.1"),
        ("hipMemPoolTrimTo", "hip_5.1"),
        ("hipDeviceGetDefaultMemPool", "hip_5.1"),
        ("hipGetDevicePropertiesR0600", "hip_6.0"),
        ("hipGetProcAddress", "hip_6.1"),
    ] {
        assert_eq!(
            version_of(&dump, symbol),
            Some(version),
            "{} in\n{}",
            symbol,
            dump
        );
    }
    let headers = tool("objdump", &["-p"], &lib);
    assert!(
        headers.contains("SONAME               libamdhip64.so.6"),
        "{}",
        headers
    );

    // A program linked against it binds the versioned symbol, as against the real runtime.
    let exe_dump = tool("objdump", &["-T"], &ops_program());
    assert_eq!(
        version_of(&exe_dump, "hipMalloc"),
        Some("(hip_4.2)"),
        "{}",
        exe_dump
    );

    let blas = tool("objdump", &["-p"], &release_dir().join("librocblas.so"));
    assert!(
        blas.contains("SONAME               librocblas.so.4"),
        "{}",
        blas
    );
    assert!(
        blas.contains("NEEDED               libamdhip64.so.6"),
        "{}",
        blas
    );
}

#[test]
fn capacity_bounds_allocations_and_mem_get_info_follows() {
    let r = ops(
        &[("HIPSIM_VRAM", "64MiB")],
        &[
            "info",
            "malloc:41943040", // 40 MiB
            "info",
            "malloc:31457280", // 30 MiB: more than is free
            "malloc:25165824", // 24 MiB: exactly what is free
            "info",
            "free:0",
            "info",
            "malloc:0",
            "malloc:100",
            "counters",
        ],
    );
    assert_eq!(r.rcs(), [0, 0, 0, 2, 0, 0, 0, 0, 0, 0]);
    let info = |i: usize| {
        let l = &r.lines[i];
        let n = |k| r.str_of(l, k).parse::<u64>().unwrap();
        (n("free"), n("total"))
    };
    assert_eq!(info(0), (64 * MIB, 64 * MIB));
    assert_eq!(info(2), (24 * MIB, 64 * MIB));
    assert_eq!(info(5), (0, 64 * MIB));
    assert_eq!(info(7), (40 * MIB, 64 * MIB));
    assert_eq!(r.str_of(&r.lines[1], "aligned2m"), "1");
    assert_eq!(r.str_of(&r.lines[3], "ptr"), "(nil)");
    assert_eq!(r.str_of(&r.lines[8], "ptr"), "(nil)");
    assert_ne!(r.str_of(&r.lines[9], "ptr"), "(nil)");
    assert_eq!(r.unum("counters", "allocs"), 3);
    assert_eq!(r.unum("counters", "failed_allocs"), 1);
    assert_eq!(r.unum("counters", "frees"), 1);
    assert_eq!(r.unum("counters", "syncs"), 1, "hipFree synchronizes");
    assert_eq!(r.unum("counters", "live_bytes"), 24 * MIB + 100);
    assert_eq!(r.unum("counters", "peak_bytes"), 64 * MIB);
}

#[test]
fn free_accepts_null_and_rejects_unknown_pointers() {
    let r = ops(
        &[],
        &[
            "malloc:0",
            "malloc:4096",
            "free:0",
            "free:1",
            "free:1",
            "last",
        ],
    );
    assert_eq!(r.rcs(), [0, 0, 0, 0, INVALID_VALUE, INVALID_VALUE]);
}

#[test]
fn a_default_device_is_a_16_gib_discrete_gfx1100() {
    let r = ops(
        &[],
        &["info", "attr:84", "attr:16", "props", "count", "total:0"],
    );
    assert_eq!(r.unum("info", "total"), 16 * GIB);
    assert_eq!(r.num("attr:84", "value"), i32::MAX as i64, "clamped to int");
    assert_eq!(r.num("attr:16", "value"), 0);
    assert_eq!(r.str("props", "name"), "hipsim_(simulated)_gfx1100");
    assert_eq!(r.str("props", "arch"), "gfx1100");
    assert_eq!(r.unum("props", "total"), 16 * GIB);
    assert_eq!(r.num("props", "integrated"), 0);
    assert_eq!(r.num("props", "past_end_untouched"), 1);
    assert_eq!(r.num("count", "count"), 1);
    assert_eq!(r.unum("total:0", "total"), 16 * GIB);
}

#[test]
fn devices_have_their_own_capacity_and_selection_is_checked() {
    let env = [("HIPSIM_DEVICES", "2"), ("HIPSIM_VRAM", "1GiB")];
    let r = ops(
        &env,
        &[
            "count",
            "setdev:1",
            "malloc:268435456",
            "info",
            "setdev:0",
            "info",
            "setdev:2",
            "total:1",
        ],
    );
    assert_eq!(r.rcs(), [0, 0, 0, 0, 0, 0, INVALID_DEVICE, 0]);
    assert_eq!(r.num("count", "count"), 2);
    assert_eq!(r.str_of(&r.lines[3], "free"), (768 * MIB).to_string());
    assert_eq!(r.str_of(&r.lines[5], "free"), GIB.to_string());

    let none = ops(
        &[("HIPSIM_DEVICES", "0")],
        &["count", "malloc:4096", "setdev:0"],
    );
    assert_eq!(none.rcs(), [NO_DEVICE, NO_DEVICE, NO_DEVICE]);
    assert_eq!(none.num("count", "count"), 0);
}

#[test]
fn an_integrated_device_reports_less_than_it_can_allocate() {
    let env = [
        ("HIPSIM_INTEGRATED", "1"),
        ("HIPSIM_VRAM", "64GiB"),
        ("HIPSIM_REPORTED_VRAM", "8GiB"),
    ];
    let r = ops(
        &env,
        &[
            "info",
            "attr:16",
            "props",
            "malloc:21474836480", // 20 GiB, beyond the reported total
            "info",
            "malloc:53687091200", // 50 GiB, beyond the real capacity
        ],
    );
    assert_eq!(r.rcs(), [0, 0, 0, 0, 0, OUT_OF_MEMORY]);
    assert_eq!(r.str_of(&r.lines[0], "total"), (8 * GIB).to_string());
    assert_eq!(r.str_of(&r.lines[0], "free"), (8 * GIB).to_string());
    assert_eq!(r.num("attr:16", "value"), 1);
    assert_eq!(r.num("props", "integrated"), 1);
    assert_eq!(r.unum("props", "total"), 8 * GIB);
    assert_eq!(r.str("props", "arch"), "gfx1151");
    assert_eq!(r.str_of(&r.lines[4], "free"), "0");

    // Without HIPSIM_REPORTED_VRAM a large APU reports what Strix Halo does.
    let big = ops(
        &[("HIPSIM_INTEGRATED", "1"), ("HIPSIM_VRAM", "128GiB")],
        &["info"],
    );
    assert_eq!(big.unum("info", "total"), (15.49 * GIB as f64) as u64);
}

#[test]
fn fail_nth_counts_every_allocating_call() {
    let r = ops(
        &[("HIPSIM_FAIL_NTH", "2,4")],
        &[
            "stream",
            "malloc:4096",
            "ext:4096",
            "malloc:0", // asks for nothing: not counted
            "managed:4096",
            "async:4096",
            "pool:4096",
            "counters",
        ],
    );
    assert_eq!(r.rcs(), [0, 0, OUT_OF_MEMORY, 0, 0, OUT_OF_MEMORY, 0]);
    assert_eq!(r.str("ext:4096", "ptr"), "(nil)");
    assert_eq!(r.unum("counters", "failed_allocs"), 2);
    assert_eq!(r.unum("counters", "allocs"), 3);
}

#[test]
fn fail_prob_draws_follow_the_seed() {
    let calls: Vec<&str> = vec!["malloc:4096"; 40];
    let outcome = |seed: &str| {
        ops(
            &[("HIPSIM_FAIL_PROB", "0.5"), ("HIPSIM_SEED", seed)],
            &calls,
        )
        .rcs()
    };
    let first = outcome("42");
    assert_eq!(first, outcome("42"));
    assert_ne!(first, outcome("7"));
    let failed = first.iter().filter(|&&rc| rc == OUT_OF_MEMORY).count();
    assert!((8..=32).contains(&failed), "{} of 40 failed", failed);
    assert!(first.iter().all(|&rc| rc == SUCCESS || rc == OUT_OF_MEMORY));
}

#[test]
fn fail_above_refuses_large_allocations_only() {
    let r = ops(
        &[("HIPSIM_FAIL_ABOVE", "1MiB")],
        &["malloc:1048576", "malloc:1048577", "malloc:4096"],
    );
    assert_eq!(r.rcs(), [0, OUT_OF_MEMORY, 0]);
}

#[test]
fn bad_knob_values_warn_once_and_keep_defaults() {
    let r = ops(
        &[
            ("HIPSIM_VRAM", "lots"),
            ("HIPSIM_FAIL_PROB", "2"),
            ("HIPSIM_LATENCY_US", "100"),
        ],
        &["info", "malloc:4096", "malloc:4096", "info"],
    );
    assert_eq!(r.unum("info", "total"), 16 * GIB);
    assert_eq!(r.rcs(), [0, 0, 0, 0]);
    let err = r.stderr();
    assert_eq!(err.matches("HIPSIM_VRAM").count(), 1, "{}", err);
    assert_eq!(err.matches("HIPSIM_FAIL_PROB").count(), 1, "{}", err);
    assert!(!err.contains("HIPSIM_LATENCY_US"), "{}", err);
    assert!(
        err.lines()
            .all(|l| l.starts_with("hipsim (simulated HIP runtime): ")),
        "{}",
        err
    );
}

#[test]
fn the_last_error_is_sticky_until_read() {
    let r = ops(
        &[],
        &[
            "malloc:1125899906842624", // 1 PiB
            "malloc:4096",
            "peek",
            "last",
            "last",
            "errname:2",
        ],
    );
    assert_eq!(
        r.rcs(),
        [OUT_OF_MEMORY, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0]
    );
    assert_eq!(r.str("errname:2", "name"), "hipErrorOutOfMemory");
    assert_eq!(r.str("errname:2", "string"), "out_of_memory");
}

#[test]
fn a_device_synchronize_during_capture_invalidates_it() {
    let r = ops(
        &[],
        &[
            "stream",
            "begin:0",
            "capturing",
            "sync",
            "capturing",
            "end",
            "capturing",
            "sync",
            "counters",
        ],
    );
    assert_eq!(
        r.rcs(),
        [0, 0, 0, CAPTURE_UNSUPPORTED, 0, CAPTURE_INVALIDATED, 0, 0]
    );
    assert_eq!(r.str_of(&r.lines[2], "status"), "1");
    assert_eq!(r.str_of(&r.lines[4], "status"), "2");
    assert_eq!(r.str("end", "graph_null"), "1");
    assert_eq!(r.str_of(&r.lines[6], "status"), "0");
    assert_eq!(r.unum("counters", "capture_invalidations"), 1);
    assert_eq!(
        r.unum("counters", "syncs"),
        1,
        "only the sync after the capture ran"
    );
}

#[test]
fn malloc_and_free_are_refused_during_a_global_capture() {
    let r = ops(
        &[],
        &[
            "malloc:4096",
            "stream",
            "begin:0",
            "malloc:4096",
            "free:0",
            "end",
            "counters",
        ],
    );
    assert_eq!(
        r.rcs(),
        [
            0,
            0,
            0,
            CAPTURE_UNSUPPORTED,
            CAPTURE_UNSUPPORTED,
            CAPTURE_INVALIDATED
        ]
    );
    assert_eq!(
        r.unum("counters", "live_allocs"),
        1,
        "the refused free freed nothing"
    );

    // A relaxed capture, or a thread in relaxed mode, allows them.
    let relaxed = ops(&[], &["stream", "begin:2", "malloc:4096", "free:0", "end"]);
    assert_eq!(relaxed.rcs(), [0; 5]);
    assert_eq!(relaxed.str("end", "graph_null"), "0");
    let thread = ops(&[], &["mode:2", "stream", "begin:0", "malloc:4096", "end"]);
    assert_eq!(thread.rcs(), [0; 5]);
    assert_eq!(thread.num("mode:2", "previous"), 0);
}

#[test]
fn capture_rules_for_streams() {
    // Synchronizing the capturing stream is refused but does not invalidate the capture; the
    // null stream cannot be captured.
    let r = ops(&[], &["stream", "begin:0", "streamsync", "end"]);
    assert_eq!(r.rcs(), [0, 0, CAPTURE_UNSUPPORTED, 0]);
    let null = ops(&[], &["begin:0"]);
    assert_eq!(null.rcs(), [CAPTURE_UNSUPPORTED]);
}

#[test]
fn stream_ordered_pools_and_trims() {
    let r = ops(
        &[("HIPSIM_VRAM", "16MiB")],
        &[
            "stream",
            "async:8388608",
            "pool:8388608",
            "info",
            "freeasync:0",
            "freeasync:0",
            "streamsync",
            "info",
            "trim",
            "trim",
            "counters",
        ],
    );
    assert_eq!(r.rcs(), [0, 0, 0, 0, 0, INVALID_VALUE, 0, 0, 0, 0]);
    assert_eq!(r.str_of(&r.lines[3], "free"), "0");
    assert_eq!(r.str_of(&r.lines[7], "free"), (8 * MIB).to_string());
    assert_eq!(r.unum("counters", "mempool_trims"), 2);
}

#[test]
fn device_reset_frees_every_block() {
    let r = ops(
        &[("HIPSIM_VRAM", "64MiB")],
        &[
            "malloc:4194304",
            "managed:4096",
            "reset",
            "info",
            "counters",
        ],
    );
    assert_eq!(r.rcs(), [0; 4]);
    assert_eq!(r.unum("info", "free"), 64 * MIB);
    assert_eq!(r.unum("counters", "live_allocs"), 0);
}

#[test]
fn get_proc_address_returns_the_runtime_own_functions() {
    let exe = program("sim_procaddr", &["sim_procaddr.c"], &["-lamdhip64", "-ldl"]);
    let plain = run(&exe, &[]);
    assert_eq!(plain.num("malloc", "rc"), SUCCESS);
    assert_eq!(plain.num("malloc", "status"), 0);
    assert_eq!(plain.num("malloc", "same_as_program"), 1);
    assert_eq!(plain.num("malloc", "same_as_runtime"), 1);
    assert_eq!(plain.num("malloc", "allocs"), 2);

    let mut cmd = sim_command(&exe);
    cmd.env("LD_PRELOAD", interposer());
    let preloaded = Run::parse(output(&mut cmd));
    assert_eq!(preloaded.num("malloc", "direct_rc"), SUCCESS);
    assert_eq!(preloaded.num("malloc", "via_rc"), SUCCESS);
    assert_eq!(preloaded.num("malloc", "same_as_program"), 0);
    assert_eq!(preloaded.num("malloc", "same_as_runtime"), 1);
    assert_eq!(
        preloaded.num("malloc", "interposed"),
        1,
        "only the direct call reaches the preloaded hipMalloc"
    );
    assert_eq!(preloaded.num("malloc", "allocs"), 2);

    assert_eq!(plain.num("unknown", "rc"), INVALID_VALUE);
    assert_eq!(plain.num("unknown", "status"), 1);
    assert_eq!(plain.num("unknown", "pfn_null"), 1);
    assert_eq!(plain.num("unknown", "last"), INVALID_VALUE);
    assert_eq!(plain.num("props", "r0600"), 1);
    assert_eq!(plain.num("props", "r0000"), 1);
}

#[test]
fn queued_fills_run_later_and_synchronizing_calls_wait_for_them() {
    let exe = program("sim_fill", &["sim_fill.c"], &["-lamdhip64"]);
    let r = run(&exe, &[]);
    assert_eq!(r.num("stream", "rc"), SUCCESS);
    assert_eq!(r.num("stream", "before"), 0, "the fill is still queued");
    assert_eq!(r.num("stream", "after_first"), 0xab);
    assert_eq!(r.num("stream", "after_last"), 0xab);

    assert_eq!(r.num("free", "rc"), SUCCESS);
    assert_eq!(r.num("free", "fills_before"), 1);
    assert_eq!(
        r.num("free", "fills_after"),
        2,
        "hipFree waited for the fill"
    );
    assert_eq!(r.num("free", "syncs_added"), 1);
    assert_eq!(r.num("free", "dropped"), 0);

    assert_eq!(r.num("memcpy", "rc"), SUCCESS);
    assert_eq!(
        r.num("memcpy", "host"),
        0xcd,
        "the copy waited for the fill"
    );

    assert_eq!(r.num("freeasync", "rc"), SUCCESS);
    let before = r.num("freeasync", "live_before");
    assert_eq!(
        r.num("freeasync", "live_queued"),
        before,
        "queued behind the fill"
    );
    assert_eq!(r.num("freeasync", "live_synced"), before - 1);
    assert_eq!(r.num("freeasync", "fills_added"), 1);
    assert_eq!(r.num("freeasync", "dropped"), 0);

    assert_eq!(r.num("dropped", "rc"), SUCCESS);
    assert_eq!(
        r.num("dropped", "dropped"),
        1,
        "freed memory is never written"
    );
    assert_eq!(r.num("invalid", "rc"), INVALID_VALUE);
}

#[test]
fn current_device_and_last_error_are_per_thread() {
    let exe = program(
        "sim_threads",
        &["sim_threads.c"],
        &["-lamdhip64", "-pthread"],
    );
    let r = run(&exe, &[("HIPSIM_DEVICES", "2")]);
    assert_eq!(r.num("worker", "set_rc"), SUCCESS);
    assert_eq!(r.num("worker", "malloc_rc"), OUT_OF_MEMORY);
    assert_eq!(r.num("worker", "device"), 1);
    assert_eq!(r.num("worker", "peek"), OUT_OF_MEMORY);
    assert_eq!(r.num("main", "device"), 0);
    assert_eq!(r.num("main", "peek"), SUCCESS);
}

fn rocblas_program() -> PathBuf {
    program(
        "sim_rocblas",
        &["sim_rocblas.c"],
        &["-lrocblas", "-lamdhip64", "-ldl"],
    )
}

#[test]
fn rocblas_handles_allocate_their_workspace_with_hip_malloc() {
    let r = run(&rocblas_program(), &[]);
    assert_eq!(r.num("create", "status"), 0);
    assert_eq!(r.num("create", "null"), 0);
    assert_eq!(r.num("create", "untouched"), 0);
    assert_eq!(r.unum("create", "live_bytes"), 32 * MIB);
    assert_eq!(r.num("destroy", "status"), 0);
    assert_eq!(r.unum("destroy", "live_bytes"), 0);
    assert_eq!(r.num("null", "status"), 1);

    let sized = run(
        &rocblas_program(),
        &[("ROCBLAS_DEVICE_MEMORY_SIZE", "65536")],
    );
    assert_eq!(sized.unum("create", "live_bytes"), 64 * KIB);
}

#[test]
fn rocblas_handle_creation_fails_cleanly_without_memory() {
    let r = run(&rocblas_program(), &[("HIPSIM_VRAM", "16MiB")]);
    assert_eq!(r.num("create", "status"), 5, "rocblas_status_memory_error");
    assert_eq!(r.num("create", "untouched"), 1);
    assert_eq!(r.num("create", "last"), OUT_OF_MEMORY);
}

#[test]
fn rocblas_calls_reach_a_preloaded_hip_malloc() {
    let mut cmd = sim_command(&rocblas_program());
    cmd.env("LD_PRELOAD", interposer());
    let r = Run::parse(output(&mut cmd));
    assert_eq!(r.num("create", "status"), 0);
    assert_eq!(r.num("create", "interposed"), 1);
}

#[test]
fn rocblas_loaded_locally_brings_the_runtime_along() {
    let exe = program("sim_rocblas_dlopen", &["sim_rocblas_dlopen.c"], &["-ldl"]);
    let r = run(&exe, &[]);
    assert_eq!(r.num("dlopen", "status"), 0);
    assert_eq!(r.num("dlopen", "handle"), 1);
    assert_eq!(r.num("dlopen", "runtime_loaded"), 1);
    assert_eq!(r.num("dlopen", "allocs"), 1);
}

/// `tests/c/sim_costs.c SIZE`: per timed call, its microseconds and return code.
fn costs(size: u64, env: &[(&str, &str)]) -> HashMap<String, (f64, i64)> {
    let exe = program("sim_costs", &["sim_costs.c"], &["-lamdhip64"]);
    let mut cmd = sim_command(&exe);
    cmd.arg(size.to_string()).envs(env.iter().copied());
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((w[0].to_string(), (w[1].parse().ok()?, w[2].parse().ok()?)))
        })
        .collect()
}

#[test]
fn driver_costs_grow_with_the_size_and_are_off_by_default() {
    const CALLS: [&str; 7] = [
        "malloc",
        "free",
        "create",
        "map",
        "setaccess",
        "unmap",
        "release",
    ];
    // Every call: 2 ms, plus 400 ms per GiB (202 ms at 512 MiB).
    let vars: Vec<String> = CALLS
        .iter()
        .map(|c| format!("HIPSIM_COST_{}", c.to_uppercase()))
        .collect();
    let env: Vec<(&str, &str)> = vars
        .iter()
        .map(|v| (v.as_str(), "2000+400000/GiB"))
        .collect();
    let big = costs(512 * MIB, &env);
    let small = costs(4 * KIB, &env);
    let off = costs(512 * MIB, &[]);
    for call in CALLS {
        let (b, s, o) = (big[call], small[call], off[call]);
        assert_eq!((b.1, s.1, o.1), (SUCCESS, SUCCESS, SUCCESS), "{}", call);
        assert!(b.0 >= 202_000.0, "{} of 512 MiB took {} us", call, b.0);
        assert!(s.0 >= 2_000.0, "{} of 4 KiB took {} us", call, s.0);
    }
    // Upper bounds only in total, against the 1.4 s the large calls must take, so that a busy
    // machine's stalls cannot fail them: small calls pay their fixed part, free ones nothing.
    let total = |r: &HashMap<String, (f64, i64)>| CALLS.iter().map(|c| r[*c].0).sum::<f64>();
    assert!(total(&small) < total(&big) / 2.0, "{:?}\n{:?}", small, big);
    assert!(total(&off) < total(&big) / 2.0, "{:?}\n{:?}", off, big);
}

#[test]
fn self_calls_go_through_the_dynamic_linker_only_when_asked() {
    let exe = program("sim_selfcall", &["sim_selfcall.c"], &["-lamdhip64", "-ldl"]);
    let seen = |on: &str| {
        let mut cmd = sim_command(&exe);
        cmd.env("LD_PRELOAD", interposer())
            .env("HIPSIM_SELF_CALLS", on);
        Run::parse(output(&mut cmd))
    };
    // What a preloaded library sees beyond the program's own calls: (mallocs, frees, syncs).
    let counts = |r: &Run, step: &str| {
        assert_eq!(r.num(step, "rc"), SUCCESS, "{}", step);
        (
            r.num(step, "mallocs"),
            r.num(step, "frees"),
            r.num(step, "syncs"),
        )
    };
    let native = seen("0");
    for step in [
        "managed",
        "pitched",
        "malloc",
        "h2d",
        "d2h",
        "d2d",
        "free",
        "free_managed",
    ] {
        assert_eq!(counts(&native, step), (0, 0, 0), "natively, at {}", step);
    }
    // Counts are cumulative: managed and pitched over hipMalloc, each host<->device copy one
    // staging hipMalloc + hipFree, each hipFree one hipDeviceSynchronize.
    let plt = seen("1");
    let expected = [
        ("managed", (1, 0, 0)),
        ("pitched", (2, 0, 0)),
        ("malloc", (2, 0, 0)),
        ("h2d", (3, 1, 1)),
        ("d2h", (4, 2, 2)),
        ("d2d", (4, 2, 2)),
        ("free", (4, 2, 3)),
        ("free_managed", (4, 2, 4)),
    ];
    for (step, want) in expected {
        assert_eq!(counts(&plt, step), want, "HIPSIM_SELF_CALLS=1, at {}", step);
    }
}
