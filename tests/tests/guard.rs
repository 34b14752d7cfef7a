//! librocmguard.so in real processes: C and Python programs that know nothing of rocmguard, run
//! under `LD_PRELOAD` against hipsim, the simulated HIP runtime (shim/hipsim).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use rocmguard_tests::{
    compile_c, exit_table_column, guarded_command, output, sim_command, text, Seen,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap();
    built
        .entry(name.to_string())
        .or_insert_with(|| match name {
            "guard_rocblas" => compile_c(name, &["guard_rocblas.c"], &["-lamdhip64", "-lrocblas"]),
            "guard_module.so" => compile_c(
                name,
                &["guard_module.c"],
                &["-shared", "-fPIC", "-lamdhip64"],
            ),
            "guard_local" => compile_c(name, &["guard_local.c"], &["-ldl"]),
            _ => compile_c(
                name,
                &[&format!("{}.c", name)],
                &["-lamdhip64", "-ldl", "-pthread"],
            ),
        })
        .clone()
}

fn guarded(name: &str, args: &[&str], env: &[(&str, &str)]) -> Seen {
    let mut cmd = guarded_command(&program(name));
    cmd.args(args).envs(env.iter().copied());
    Seen::new(output(&mut cmd))
}

fn unguarded(name: &str, args: &[&str], env: &[(&str, &str)]) -> Seen {
    let mut cmd = sim_command(&program(name));
    cmd.args(args).envs(env.iter().copied());
    Seen::new(output(&mut cmd))
}

#[test]
fn memory_queries_show_the_cap_and_refusals_leave_the_program_running() {
    let s = guarded("guard_cap", &[], &[("ROCMGUARD_VRAM_LIMIT", "1GiB")]);
    s.succeeded();
    assert_eq!(s.num("total"), GIB as i64);
    assert_eq!(s.num("free"), GIB as i64);
    assert_eq!(s.num("device_total"), GIB as i64);
    assert_eq!(s.num("attribute"), GIB as i64);
    assert_eq!(s.num("props_total"), GIB as i64);
    assert_eq!(s.num("free_after_600MiB"), (GIB - 600 * MIB) as i64);
    assert_eq!(s.num("past_cap"), 2, "hipErrorOutOfMemory past the cap");
    assert_eq!(
        s.num("last_error_after_refusal"),
        2,
        "the refusal is the last error, as the runtime's would be"
    );
    assert_eq!(s.num("last_error_then"), 0, "and reading it clears it");
    assert!(
        s.stderr().contains("[VRAM Limit]"),
        "the refusal is logged:\n{}",
        s.stderr()
    );
    assert!(
        s.stderr().starts_with("rocmguard "),
        "one line at first use:\n{}",
        s.stderr()
    );

    let plain = unguarded("guard_cap", &[], &[]);
    plain.succeeded();
    assert_eq!(
        plain.num("total"),
        16 * GIB as i64,
        "the simulator's own 16 GiB without the shim"
    );
    assert_eq!(plain.num("past_cap"), 0);
}

#[test]
fn virtual_segments_join_free_neighbours_and_give_back_what_no_block_uses() {
    let s = guarded("guard_ops", &["holes"], &[("ROCMGUARD_LOG", "info")]);
    s.succeeded();
    assert!(s.stderr().contains("virtual segments"), "{}", s.stderr());
    assert_eq!(
        s.num("span_device_allocs"),
        0,
        "200 MiB across two freed 100 MiB runs"
    );
    assert_eq!(s.num("span_data_ok"), 1, "data holds across the runs");
    assert_eq!(
        s.num("device_live_under_4mib"),
        4 * MIB as i64,
        "pieces are at most 1/128 of the peak live, here a page: only the pages under the 4 MiB \
         block stay"
    );
    // Without virtual memory in the runtime: plain segments, one more device call for the span;
    // the idle 200 MiB segment is far from the 4 MiB request, so it goes back and the block gets
    // a segment of its own (4 MiB) rather than keep all 200 MiB.
    let plain = guarded(
        "guard_ops",
        &["holes"],
        &[("HIPSIM_VMM", "0"), ("ROCMGUARD_LOG", "info")],
    );
    plain.succeeded();
    assert!(
        plain.stderr().contains("plain segments"),
        "{}",
        plain.stderr()
    );
    assert_eq!(plain.num("span_device_allocs"), 1);
    assert_eq!(plain.num("span_data_ok"), 1);
    assert_eq!(plain.num("device_live_under_4mib"), 4 * MIB as i64);
}

#[test]
fn a_percentage_cap_follows_the_device() {
    let s = guarded(
        "guard_cap",
        &[],
        &[("ROCMGUARD_VRAM_LIMIT", "25%"), ("HIPSIM_VRAM", "8GiB")],
    );
    assert_eq!(s.num("total"), 2 * GIB as i64);
}

#[test]
fn a_transient_device_oom_is_absorbed_by_one_retry() {
    // Under the shim allocating call 1 is the pool's check of virtual memory at first use, so
    // the fault hits the pool's first segment, as it hits the program's hipMalloc without it.
    let env = [("HIPSIM_FAIL_NTH", "2"), ("ROCMGUARD_STATS", "1")];
    let s = guarded("guard_ops", &["retry"], &env);
    s.succeeded();
    assert_eq!(s.num("malloc"), 0, "the program sees success");
    assert_eq!(s.num("last_error"), 0, "and no error left behind");
    assert_eq!(
        exit_table_column(&s.stderr(), "retries"),
        1,
        "{}",
        s.stderr()
    );
    let plain = unguarded("guard_ops", &["retry"], &[("HIPSIM_FAIL_NTH", "1")]);
    assert_eq!(
        plain.num("malloc"),
        2,
        "without the shim the same run fails"
    );
}

#[test]
fn an_error_pending_before_a_recovered_allocation_stays_pending() {
    // Call 1 is the check of virtual memory at first use; 2 the pool's first segment.
    let s = guarded("guard_ops", &["sticky"], &[("HIPSIM_FAIL_NTH", "2")]);
    s.succeeded();
    assert_eq!(s.num("malloc"), 0);
    assert_eq!(
        s.num("first"),
        101,
        "hipErrorInvalidDevice from hipSetDevice(99) is still there"
    );
    assert_eq!(s.num("second"), 0);
}

#[test]
fn trim_on_threshold_returns_cached_segments() {
    let env = [
        ("ROCMGUARD_VRAM_LIMIT", "1GiB"),
        ("ROCMGUARD_TRIM_THRESHOLD", "0.5"),
    ];
    let s = guarded("guard_ops", &["threshold"], &env);
    s.succeeded();
    assert!(s.num("device_live_full") >= 800 * MIB as i64);
    assert!(
        s.num("device_live_after") <= 512 * MIB as i64,
        "{}",
        text(&s.out)
    );
}

#[test]
fn mem_pool_trim_to_releases_pooled_memory() {
    let s = guarded("guard_ops", &["pool_trim"], &[]);
    s.succeeded();
    assert!(
        s.num("device_live_cached") >= 64 * MIB as i64,
        "the pool caches what was freed"
    );
    assert_eq!(s.num("device_live_trimmed"), 0);
}

#[test]
fn repeated_pairs_are_served_from_the_pool() {
    let s = guarded("guard_ops", &["pooled"], &[]);
    s.succeeded();
    // The address range and the two pages under the 3 MiB block (pieces are at most 1/128 of
    // the peak live, at least a page).
    assert!(s.num("device_allocs") <= 3, "{}", text(&s.out));
    assert_eq!(
        unguarded("guard_ops", &["pooled"], &[]).num("device_allocs"),
        1000
    );
}

#[test]
fn no_synchronize_while_a_stream_capture_is_active() {
    let s = guarded("guard_ops", &["capture"], &[("ROCMGUARD_WARMUP", "256MiB")]);
    s.succeeded();
    assert_eq!(s.num("malloc_in_capture"), 0);
    assert_eq!(s.num("end_capture"), 0, "the capture was not invalidated");
    assert_eq!(s.num("invalidations"), 0);
}

#[test]
fn a_freed_block_is_not_reused_while_queued_work_may_write_it() {
    let s = guarded("guard_ops", &["reuse"], &[]);
    s.succeeded();
    assert_eq!(
        s.num("same_address"),
        5,
        "every round reuses the freed block once the work on it is done: {}",
        text(&s.out)
    );
    assert_eq!(s.num("corrupted_bytes"), 0);
}

#[test]
fn on_the_default_stream_alone_a_freed_block_is_reused_at_once_and_in_order() {
    let s = guarded("guard_ops", &["in_order"], &[]);
    s.succeeded();
    assert_eq!(s.num("same_address"), 5, "{}", text(&s.out));
    assert_eq!(s.num("syncs_beyond_the_program_own"), 0);
    assert_eq!(s.num("corrupted_bytes"), 0);
    let off = guarded(
        "guard_ops",
        &["in_order"],
        &[("ROCMGUARD_ORDERED_REUSE", "0"), ("ROCMGUARD_RECLAIM", "0")],
    );
    off.succeeded();
    assert!(
        off.num("syncs_beyond_the_program_own") >= 5,
        "ROCMGUARD_ORDERED_REUSE=0: every reuse waits for a synchronize; {}",
        text(&off.out)
    );
    assert_eq!(off.num("corrupted_bytes"), 0);
}

#[test]
fn the_first_stream_waits_for_work_on_blocks_freed_before_it() {
    let s = guarded("guard_ops", &["first_stream"], &[]);
    s.succeeded();
    assert_eq!(s.num("same_address"), 1, "{}", text(&s.out));
    assert_eq!(s.num("corrupted_bytes"), 0);
}

#[test]
fn a_stream_under_pytorch_cache_off_warns_of_the_synchronizes() {
    // Out of one order every reuse waits for a synchronize: with PyTorch's cache off that is
    // every tensor's (ddp_buckets 37% slower on an H100), so the user hears it at the default
    // log level; with PyTorch's cache on the pool sees little and the line stays at info.
    let warning = "leave PyTorch's cache on";
    for name in [
        "PYTORCH_NO_HIP_MEMORY_CACHING",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
    ] {
        let off = guarded("guard_ops", &["first_stream"], &[(name, "1")]);
        off.succeeded();
        let err = String::from_utf8_lossy(&off.out.stderr);
        assert_eq!(err.matches(warning).count(), 1, "{name}=1, once: {err}");
    }
    let mut cmd = guarded_command(&program("guard_ops"));
    cmd.arg("first_stream")
        .env_remove("PYTORCH_NO_HIP_MEMORY_CACHING")
        .env_remove("PYTORCH_NO_CUDA_MEMORY_CACHING");
    let on = Seen::new(output(&mut cmd));
    on.succeeded();
    assert!(!String::from_utf8_lossy(&on.out.stderr).contains(warning));
}

#[test]
fn sixteen_threads_of_mixed_operations() {
    let s = guarded("guard_ops", &["threads"], &[]);
    s.succeeded();
    assert_eq!(s.num("thread_errors"), 0);
}

#[test]
fn a_forked_child_allocates() {
    let s = guarded("guard_ops", &["fork"], &[]);
    s.succeeded();
    assert_eq!(s.num("child_exit"), 0);
}

#[test]
fn exit_with_live_blocks_is_clean() {
    let s = guarded("guard_ops", &["live_at_exit"], &[("ROCMGUARD_STATS", "1")]);
    s.succeeded();
    assert_eq!(s.num("exiting_with_live_blocks"), 1);
    assert!(s.stderr().contains("memory at exit"), "{}", s.stderr());
}

/// The exit table says how long the pool's device calls took, measured: on a simulated device
/// whose allocating calls take 20 ms each (`HIPSIM_LATENCY_US`), at least 20 ms for each piece
/// or segment the pool made; on a quick one, less than one such call.
#[test]
fn the_exit_table_times_the_pools_device_calls() {
    for (latency_us, slow) in [("20000", true), ("0", false)] {
        let s = guarded(
            "guard_ops",
            &["live_at_exit"],
            &[("ROCMGUARD_STATS", "1"), ("HIPSIM_LATENCY_US", latency_us)],
        );
        s.succeeded();
        let (made, ms) = (
            exit_table_column(&s.stderr(), "dev-allocs"),
            exit_table_column(&s.stderr(), "dev-ms"),
        );
        assert!(made >= 1, "{}", s.stderr());
        if slow {
            assert!(
                ms >= 20 * made,
                "{} ms for {} calls:\n{}",
                ms,
                made,
                s.stderr()
            );
        } else {
            assert!(ms < 20, "{} ms for {} calls:\n{}", ms, made, s.stderr());
        }
    }
}

#[test]
fn runtime_error_codes_reach_the_caller_unchanged() {
    let with = guarded("guard_ops", &["errors"], &[]);
    let without = unguarded("guard_ops", &["errors"], &[]);
    with.succeeded();
    for key in [
        "free_bad",
        "free_null",
        "malloc_zero",
        "malloc_null_out",
        "meminfo_null",
    ] {
        assert_eq!(
            with.num(key),
            without.num(key),
            "{} differs under the shim",
            key
        );
    }
    assert_ne!(with.num("free_bad"), 0);
}

#[test]
fn lookups_that_bypass_symbol_binding_get_the_hooks() {
    let module = program("guard_module.so");
    let env = [("ROCMGUARD_VRAM_LIMIT", "1GiB")];
    let s = guarded("guard_lookup", &[module.to_str().unwrap()], &env);
    s.succeeded();
    assert_eq!(
        s.num("proc_address"),
        2,
        "hipGetProcAddress handed out the hook"
    );
    assert_eq!(
        s.num("dlsym_handle"),
        2,
        "dlsym on the runtime's handle handed out the hook"
    );
    assert_eq!(s.num("module"), 2);
    assert_eq!(s.num("module_total"), GIB as i64);
    let plain = unguarded("guard_lookup", &[module.to_str().unwrap()], &env);
    assert_eq!(plain.num("proc_address"), 0, "without the shim 2 GiB fits");
}

#[test]
fn the_runtime_is_found_when_only_an_rtld_local_module_loaded_it() {
    let module = program("guard_module.so");
    let s = guarded(
        "guard_local",
        &[module.to_str().unwrap()],
        &[("ROCMGUARD_VRAM_LIMIT", "1GiB")],
    );
    s.succeeded();
    assert_eq!(s.num("module"), 2);
    assert_eq!(s.num("module_total"), GIB as i64);
}

#[test]
fn python_ctypes_goes_through_the_guard() {
    let script = rocmguard_tests::root().join("tests/c/guard_ctypes.py");
    let mut cmd = guarded_command(std::path::Path::new("python3"));
    cmd.arg(script).env("ROCMGUARD_VRAM_LIMIT", "1GiB");
    let s = Seen::new(output(&mut cmd));
    s.succeeded();
    assert_eq!(s.num("total"), GIB as i64);
    assert_eq!(s.num("malloc_2gib"), 2);
    assert_eq!(s.num("malloc_256mib"), 0);
    assert_eq!(s.num("free"), 0);
}

#[test]
fn the_handle_guard_turns_a_failing_rocblas_create_handle_into_success() {
    let env = [("HIPSIM_FAIL_NTH", "1")];
    let plain = unguarded("guard_rocblas", &[], &env);
    assert_eq!(
        plain.num("create"),
        5,
        "without us: rocblas_status_memory_error"
    );
    let s = guarded("guard_rocblas", &[], &env);
    s.succeeded();
    assert_eq!(s.num("create"), 0);
    assert_eq!(s.num("handle"), 1);
    assert_eq!(s.num("destroy"), 0);
}

#[test]
fn disable_passes_everything_through() {
    let env = [("ROCMGUARD_VRAM_LIMIT", "1GiB"), ("ROCMGUARD_DISABLE", "1")];
    let s = guarded("guard_cap", &[], &env);
    s.succeeded();
    assert_eq!(s.num("total"), 16 * GIB as i64);
    assert!(
        s.stderr().contains("ROCMGUARD_DISABLE"),
        "the reason is logged once:\n{}",
        s.stderr()
    );
}

#[test]
fn a_bad_value_warns_once_and_keeps_the_default() {
    let s = guarded("guard_cap", &[], &[("ROCMGUARD_TRIM_THRESHOLD", "lots")]);
    s.succeeded();
    let warnings = s.stderr().lines().filter(|l| l.contains("lots")).count();
    assert_eq!(warnings, 1, "{}", s.stderr());
    assert!(s.stderr().contains("default 1"), "{}", s.stderr());
}

#[test]
fn a_recorded_trace_replays_to_the_program_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["trace-%p.csv", "trace-%p.csv.gz"] {
        let path = dir.path().join(name);
        let s = guarded(
            "guard_ops",
            &["workload"],
            &[("ROCMGUARD_TRACE", path.to_str().unwrap())],
        );
        s.succeeded();
        let suffix = name.trim_start_matches("trace-%p");
        let file = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_str().unwrap().ends_with(suffix) && !p.to_str().unwrap().contains('%'))
            .expect("%p expanded to the pid");
        let out = output(
            std::process::Command::new(rocmguard_tests::cli())
                .arg("replay")
                .arg("--json")
                .arg(&file),
        );
        assert!(out.status.success(), "{}", text(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let trace = &json["traces"][0];
        assert_eq!(
            trace["peak_live"].as_i64().unwrap(),
            s.num("own_peak_live"),
            "{}",
            file.display()
        );
        assert_eq!(trace["allocs"].as_i64().unwrap(), s.num("own_allocs"));
        assert_eq!(trace["frees"].as_i64().unwrap(), s.num("own_frees"));
        std::fs::remove_file(file).unwrap();
    }
}

/// A program whose work leaves one stream's order makes the pool synchronize to reuse what it
/// frees (`reuse`: a side stream, then five rounds of a free and a request of its size). The
/// trace counts those synchronizes, and `rocmguard tune` names their cost beside the pool's
/// line; a program on one stream (`in_order`) records none.
#[test]
fn a_trace_counts_the_synchronizes_reuse_out_of_order_took() {
    let dir = tempfile::tempdir().unwrap();
    let tune = |scenario: &str, json: bool| {
        let path = dir.path().join(format!("{}.csv", scenario));
        let s = guarded(
            "guard_ops",
            &[scenario],
            &[("ROCMGUARD_TRACE", path.to_str().unwrap())],
        );
        s.succeeded();
        let mut cmd = std::process::Command::new(rocmguard_tests::cli());
        cmd.arg("tune").args(json.then_some("--json")).arg(&path);
        let out = output(&mut cmd);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report =
        |scenario| -> serde_json::Value { serde_json::from_str(&tune(scenario, true)).unwrap() };
    let (ordered, out_of_order) = (report("in_order"), report("reuse"));
    assert_eq!(ordered["recorded_syncs"], 0, "{}", ordered);
    let syncs = out_of_order["recorded_syncs"].as_u64().unwrap();
    assert!(syncs >= 5, "one synchronize a round at least: {}", syncs);
    assert_eq!(out_of_order["pool_wins"], true, "the pool is named");
    let table = tune("reuse", false);
    assert!(
        table.contains("rocmguard synchronized the device")
            && table.contains("keep PyTorch's cache on with the line above"),
        "{}",
        table
    );
}

/// The exit table says how long allocations waited on the program's own thread for the
/// synchronizes that reuse out of one stream's order takes, apart from the background
/// reclaimer's: with the reclaimer off, `reuse` waits in each of its five rounds for the
/// simulated kernel still writing the freed block (20 ms a round); a program on one stream
/// never waits.
#[test]
fn the_exit_table_says_how_long_allocations_waited() {
    let waited = |scenario: &str| -> Option<(u64, u64)> {
        let env = [("ROCMGUARD_STATS", "1"), ("ROCMGUARD_RECLAIM", "0")];
        let s = guarded("guard_ops", &[scenario], &env);
        s.succeeded();
        let err = s.stderr();
        let line = err.lines().find(|l| l.contains("allocations waited"))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        Some((words[3].parse().unwrap(), words[6].parse().unwrap()))
    };
    assert_eq!(waited("in_order"), None);
    let (ms, waits) = waited("reuse").expect("a line of waits at exit");
    assert!(waits >= 5, "a wait a round at least: {}", waits);
    assert!(
        ms >= 5 * 20 / 2,
        "{} ms: the kernels take 20 ms a round",
        ms
    );
}

#[test]
fn an_apu_reports_its_unified_memory_ceiling() {
    let root = rocmguard_tests::root().join("tests/fixtures/sysroot/strix-halo");
    let ceiling = rocmguard_core::topology::unified_memory_ceiling(
        &root,
        rocmguard_core::Config::default().host_reserve,
    )
    .expect("the Strix Halo tree has a GTT size");
    let env = [
        ("HIPSIM_INTEGRATED", "1"),
        ("HIPSIM_VRAM", "96GiB"),
        ("ROCMGUARD_SYSROOT", root.to_str().unwrap()),
    ];
    let plain = unguarded("guard_cap", &[], &env);
    assert!(
        plain.num("total") < 16 * GIB as i64,
        "the simulated APU misreports its memory"
    );
    let s = guarded("guard_cap", &[], &env);
    s.succeeded();
    assert_eq!(s.num("total"), ceiling as i64);
    assert_eq!(s.num("props_total"), ceiling as i64);
    assert!(
        ceiling > 32 * GIB,
        "the ceiling ({}) is far above the carve-out",
        ceiling
    );
    let off = guarded(
        "guard_cap",
        &[],
        &[env[0], env[1], env[2], ("ROCMGUARD_UMA", "0")],
    );
    assert_eq!(
        off.num("total"),
        plain.num("total"),
        "ROCMGUARD_UMA=0 keeps the runtime's figures"
    );
}

#[test]
fn rocmguard_stats_shows_a_live_process_and_forgets_it_at_exit() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = guarded_command(&program("guard_ops"));
    cmd.arg("hold")
        .env("ROCMGUARD_STATS_DIR", dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready 1");
    let pid = child.id().to_string();
    let stats = || {
        let mut c = std::process::Command::new(rocmguard_tests::cli());
        c.args(["stats", &pid])
            .env("ROCMGUARD_STATS_DIR", dir.path());
        output(&mut c)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let shown = loop {
        let out = stats();
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && t.contains("64.0 MiB") || std::time::Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        shown.contains("64.0 MiB"),
        "the live figures of pid {}:\n{}",
        pid,
        shown
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let after = stats();
    assert!(
        !String::from_utf8_lossy(&after.stdout).contains("64.0 MiB"),
        "{}",
        text(&after)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the file is removed at exit"
    );
}

#[test]
fn freed_blocks_are_released_in_the_background() {
    let s = guarded("guard_ops", &["background"], &[]);
    s.succeeded();
    assert!(s.num("background_syncs") >= 1, "{}", text(&s.out));
    // Asleep while nothing waits: a thread polling every 200 us woke about 2,000 times here.
    let idle = s.num("idle_wakeups");
    assert!((0..50).contains(&idle), "{} wake-ups while idle", idle);
    assert!(
        s.num("background_syncs_after_idle") >= 1 && s.num("wake_ms") < 500,
        "a free after the idle time wakes it (not its 5 s nap): {}",
        text(&s.out)
    );
    let off = guarded("guard_ops", &["background"], &[("ROCMGUARD_RECLAIM", "0")]);
    off.succeeded();
    assert_eq!(
        off.num("background_syncs"),
        0,
        "ROCMGUARD_RECLAIM=0 leaves the device alone"
    );
}

#[test]
fn the_log_also_goes_to_the_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rocmguard.log");
    let env = [
        ("ROCMGUARD_VRAM_LIMIT", "1GiB"),
        ("ROCMGUARD_LOG_FILE", file.to_str().unwrap()),
    ];
    let s = guarded("guard_cap", &[], &env);
    s.succeeded();
    let logged = std::fs::read_to_string(&file).expect("the log file exists");
    assert!(logged.contains("[VRAM Limit] refused"), "{}", logged);
    assert!(s.stderr().contains("[VRAM Limit] refused"), "stderr too");
}
