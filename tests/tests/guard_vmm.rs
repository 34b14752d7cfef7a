//! Memory a program makes itself with HIP's virtual memory calls counts against the cap, and the
//! address-range queries describe pooled blocks: `tests/c/guard_vmm.c` under `LD_PRELOAD` on
//! hipsim, the simulated HIP runtime, with its virtual memory on (its default on Linux).
//! The same program on a simulated 2 GiB device without the shim is the reference: under a
//! 2 GiB cap it must see what it sees there.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use rocmguard_tests::{compile_c, guarded_command, output, sim_command, text};

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;
const OUT_OF_MEMORY: i64 = 2;
const INVALID_VALUE: i64 = 1;
const NOT_FOUND: i64 = 500;

fn program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| compile_c("guard_vmm", &["guard_vmm.c"], &["-lamdhip64"]))
        .clone()
}

/// The `key value` lines of a run that succeeded.
fn run(mut cmd: Command, args: &[&str], env: &[(&str, &str)]) -> (HashMap<String, i64>, Output) {
    cmd.args(args).envs(env.iter().copied());
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out));
    let values = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect();
    (values, out)
}

fn guarded(args: &[&str], env: &[(&str, &str)]) -> (HashMap<String, i64>, Output) {
    let mut all = vec![("ROCMGUARD_VRAM_LIMIT", "2GiB")];
    all.extend_from_slice(env);
    run(guarded_command(&program()), args, &all)
}

fn native(args: &[&str]) -> (HashMap<String, i64>, Output) {
    run(sim_command(&program()), args, &[("HIPSIM_VRAM", "2GiB")])
}

fn num(seen: &(HashMap<String, i64>, Output), key: &str) -> i64 {
    *seen
        .0
        .get(key)
        .unwrap_or_else(|| panic!("no `{}` in the output:\n{}", key, text(&seen.1)))
}

#[test]
fn memory_from_hip_mem_create_counts_against_the_cap() {
    for vmm in ["1", "0"] {
        let s = guarded(&[], &[("ROCMGUARD_VMM", vmm)]);
        let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
        assert_eq!(num(&s, "free_before"), 2 * GIB);
        assert_eq!(num(&s, "create"), 0);
        assert_eq!(
            num(&s, "free_after_create"),
            512 * MIB,
            "the capped view counts 1.5 GiB of hipMemCreate (ROCMGUARD_VMM={})\n{}",
            vmm,
            stderr
        );
        assert_eq!(
            num(&s, "mapped_reads_back"),
            1,
            "the program's mapping works"
        );
        assert_eq!(
            num(&s, "malloc_past"),
            OUT_OF_MEMORY,
            "hipMalloc past the cap"
        );
        assert_eq!(
            num(&s, "create_past"),
            OUT_OF_MEMORY,
            "hipMemCreate past the cap"
        );
        assert_eq!(
            num(&s, "create_past_reached_runtime"),
            0,
            "a refusal by the cap never calls the runtime"
        );
        assert_eq!(num(&s, "last_error_after_create_past"), OUT_OF_MEMORY);
        assert_eq!(num(&s, "release"), 0);
        assert_eq!(
            num(&s, "free_after_release"),
            2 * GIB,
            "released: counted no more"
        );
        assert_eq!(num(&s, "malloc_after_release"), 0);
        assert_eq!(
            num(&s, "free_with_1GiB"),
            GIB,
            "the pool's own hipMemCreate calls are not counted a second time"
        );
        assert!(
            stderr.contains("[VRAM Limit] refused 1.00 GiB")
                && stderr.contains("outside the pool 1.50 GiB"),
            "the refusals are logged with what is held outside the pool:\n{}",
            stderr
        );
    }

    // The same program on a 2 GiB device, no shim: what the cap stands for.
    let (n, g) = (native(&[]), guarded(&[], &[]));
    for key in [
        "free_after_create",
        "malloc_past",
        "create_past",
        "free_after_release",
    ] {
        assert_eq!(num(&g, key), num(&n, key), "`{}` as on a 2 GiB device", key);
    }
}

#[test]
fn address_range_queries_describe_the_pooled_block() {
    for vmm in ["1", "0"] {
        let s = guarded(&["queries"], &[("ROCMGUARD_VMM", vmm)]);
        let n = native(&["queries"]);
        for seen in [&s, &n] {
            assert_eq!(num(seen, "data_ok"), 1);
            assert_eq!(num(seen, "range"), 0);
            assert_eq!(
                num(seen, "range_base_is_block"),
                1,
                "hipMemGetAddressRange of an interior pointer gives the block's start (ROCMGUARD_VMM={})",
                vmm
            );
            assert_eq!(num(seen, "range_size"), MIB + 100, "and its size");
            assert_eq!(num(seen, "range_last_byte_base_is_block"), 1);
            assert_eq!(num(seen, "range_last_byte_size"), 3000);
            assert_eq!(num(seen, "ptr_info"), 0);
            assert_eq!(
                num(seen, "ptr_info_size"),
                3000,
                "hipMemPtrGetInfo likewise"
            );
            assert_eq!(
                num(seen, "managed_base_is_block"),
                1,
                "the runtime's own allocations pass through"
            );
            assert_eq!(num(seen, "managed_size"), 5000);
            assert_eq!(
                num(seen, "unknown_range"),
                NOT_FOUND,
                "clr's code for no allocation"
            );
            assert_eq!(num(seen, "unknown_ptr_info"), INVALID_VALUE);
        }
    }
}

#[test]
fn pitched_allocations_go_through_the_pool_with_the_runtime_pitch() {
    for vmm in ["1", "0"] {
        let s = guarded(&["pitched"], &[("ROCMGUARD_VMM", vmm)]);
        let n = native(&["pitched"]);
        let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
        assert!(
            stderr.contains("refused 3.00 GiB"),
            "the pool served it, and refused past the cap:\n{}",
            stderr
        );
        for seen in [&s, &n] {
            assert_eq!(num(seen, "pitch_rc"), 0);
            assert_eq!(
                num(seen, "pitch"),
                1024,
                "rows padded to 256 bytes, as in ROCm"
            );
            assert_eq!(
                num(seen, "pitch_counted"),
                1024 * 300,
                "(ROCMGUARD_VMM={})",
                vmm
            );
            assert_eq!(num(seen, "pitch_range_base_is_block"), 1);
            assert_eq!(num(seen, "pitch_range_size"), 1024 * 300);
            assert_eq!(num(seen, "m3d"), 0);
            assert_eq!(
                (
                    num(seen, "m3d_pitch"),
                    num(seen, "m3d_xsize"),
                    num(seen, "m3d_ysize")
                ),
                (1024, 1000, 10)
            );
            assert_eq!(num(seen, "m3d_size"), 1024 * 10 * 3);
            assert_eq!(num(seen, "alloc_pitch_bad_element"), INVALID_VALUE);
            assert_eq!(
                (num(seen, "alloc_pitch"), num(seen, "alloc_pitch_pitch")),
                (0, 256)
            );
            assert_eq!(num(seen, "pitch_past"), OUT_OF_MEMORY);
            assert_eq!(
                (num(seen, "pitch_zero"), num(seen, "pitch_zero_null")),
                (0, 1)
            );
            assert_eq!(num(seen, "pitch_all_back"), 1);
        }
    }
}

/// A device that claims virtual memory support but refuses `hipMemSetAccess` (AMD's reports for
/// RDNA4 and gfx1151): the first-use check finds it, says so once, and the pool keeps to plain
/// segments from the start; the program's memory works.
#[test]
fn a_device_failing_set_access_gets_plain_segments_from_the_start() {
    let s = guarded(
        &["queries"],
        &[
            ("HIPSIM_VMM_SETACCESS_FAILS", "1"),
            ("ROCMGUARD_LOG", "info"),
        ],
    );
    let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
    assert_eq!(num(&s, "data_ok"), 1);
    assert_eq!(num(&s, "range_size"), MIB + 100);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("virtual memory"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("first-use check (create, map or set access: code 1)"),
        "one line, from the check at first use:\n{}",
        stderr
    );
    assert!(
        stderr.contains("cap 2.00 GiB, plain segments"),
        "the pool starts with plain segments:\n{}",
        stderr
    );

    let ok = guarded(&["queries"], &[("ROCMGUARD_LOG", "info")]);
    let stderr = String::from_utf8_lossy(&ok.1.stderr).into_owned();
    assert!(
        stderr.contains("cap 2.00 GiB, virtual segments") && !stderr.contains("first-use check"),
        "a device whose virtual memory works keeps it:\n{}",
        stderr
    );

    // Out of memory during the check (allocating call 1) says nothing about the device.
    let full = guarded(
        &["queries"],
        &[("HIPSIM_FAIL_NTH", "1"), ("ROCMGUARD_LOG", "info")],
    );
    let stderr = String::from_utf8_lossy(&full.1.stderr).into_owned();
    assert_eq!(num(&full, "data_ok"), 1);
    assert!(
        stderr.contains("cap 2.00 GiB, virtual segments") && !stderr.contains("first-use check"),
        "an out-of-memory check keeps virtual memory:\n{}",
        stderr
    );
}

#[test]
fn peer_access_reaches_pooled_virtual_memory_made_before_and_after() {
    let s = guarded(&["peer"], &[("HIPSIM_DEVICES", "2")]);
    assert_eq!(
        num(&s, "peer_before_enable"),
        0,
        "no access before the enable"
    );
    assert_eq!(num(&s, "enable"), 0);
    assert_eq!(
        num(&s, "enable_again"),
        704,
        "the runtime's own answer reaches the program"
    );
    assert_eq!(
        num(&s, "peer_existing"),
        3,
        "pieces mapped before the enable"
    );
    assert_eq!(num(&s, "peer_later"), 3, "pieces mapped after the enable");
    assert_eq!(num(&s, "own_later"), 3);
}

/// A trim that makes room for a request at the peak moves its pieces under the request, in a
/// real process on hipsim: the request needs handles only for what the trim did not free, its
/// memory is the program's to write and read back, open to the peer device as fresh pieces are,
/// and all of it goes back to the device at the end.
#[test]
fn memory_a_trim_frees_for_a_request_moves_under_it() {
    let s = moved(&[]);
    assert_eq!(
        num(&s, "creates_for_c"),
        16,
        "32 of the 48 pages moved: {}",
        text(&s.1)
    );
    assert_eq!(num(&s, "peer_access"), 3, "read-write for the peer");
}

/// `program move` on two devices with 2 MiB pieces and `env`; its data read back whole and all
/// its memory back on the device at the end, whatever the pool did in between.
fn moved(env: &[(&str, &str)]) -> (HashMap<String, i64>, Output) {
    let mut all = vec![
        ("HIPSIM_DEVICES", "2"),
        ("ROCMGUARD_CONF", "piece_size:2MiB"),
    ];
    all.extend_from_slice(env);
    let s = guarded(&["move"], &all);
    assert_eq!(num(&s, "reads_back"), 1, "{}", text(&s.1));
    assert_eq!(num(&s, "free_after_mib"), num(&s, "free_before_mib"));
    s
}

/// `ROCMGUARD_PEAK_SLACK` reaches the pool of the real library: the request of `move` (96 MiB
/// beside 64 live, a 64 MiB block freed, a peak of 128 MiB live before) needs a trim with the
/// default slack (16 new pages, 32 moved), but with a slack of the whole peak it grows within
/// the limit, keeps the freed block's memory and maps all 48 pages new.
#[test]
fn a_peak_slack_keeps_idle_memory_where_the_default_trims() {
    let s = moved(&[("ROCMGUARD_PEAK_SLACK", "100%")]);
    assert_eq!(
        num(&s, "creates_for_c"),
        48,
        "nothing trimmed, nothing moved: {}",
        text(&s.1)
    );
}

/// `program handles 300` with a soft limit of 96 open files (hard limit above it), as ROCm 7's
/// one descriptor per `hipMemCreate` handle meets a desktop's `ulimit -n`.
fn handles_under_a_low_soft_limit(mut cmd: Command) -> (HashMap<String, i64>, Output) {
    let exe = program();
    let shell = format!("ulimit -Sn 96 && exec '{}' handles 300", exe.display());
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(shell);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    cmd = sh;
    run(cmd, &[], &[])
}

#[test]
fn the_soft_limit_on_open_files_does_not_end_virtual_memory_early() {
    let native = handles_under_a_low_soft_limit(sim_command(&program()));
    assert!(
        num(&native, "created") < 96,
        "the simulator holds a descriptor per handle, as ROCm 7 does: {}",
        text(&native.1)
    );
    assert_eq!(
        num(&native, "code"),
        OUT_OF_MEMORY,
        "ROCm 7's misleading code"
    );
    let guarded = handles_under_a_low_soft_limit(guarded_command(&program()));
    assert_eq!(
        num(&guarded, "created"),
        300,
        "the shim raised the soft limit: {}",
        text(&guarded.1)
    );
}

#[test]
fn a_device_that_returns_memory_only_with_its_range_gets_plain_segments() {
    // The simulator's knob first: natively, released memory comes back with its range.
    let on = [("HIPSIM_VMM_DEFERRED_RELEASE", "1")];
    let mut cmd = sim_command(&program());
    cmd.envs([("HIPSIM_VRAM", "2GiB")]);
    let deferred = run(cmd, &[], &on);
    assert_eq!(
        num(&deferred, "free_released_in_range"),
        GIB / 2,
        "held until the range goes"
    );
    assert_eq!(num(&deferred, "free_after_release"), 2 * GIB);
    assert_eq!(
        num(&native(&[]), "free_released_in_range"),
        2 * GIB,
        "without the knob"
    );

    // The shim's first-use check sees it and keeps to plain segments, said once.
    let s = guarded(&["queries"], &[on[0], ("ROCMGUARD_LOG", "info")]);
    let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
    assert_eq!(num(&s, "data_ok"), 1);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("virtual memory"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("memory came back only with its address range"),
        "one line, from the check at first use:\n{}",
        stderr
    );
    assert!(stderr.contains("plain segments"), "{}", stderr);
}

#[test]
fn a_trim_whose_memory_does_not_come_back_is_said_once() {
    // Released memory held while its range is in use: the first-use check (a range of its own)
    // passes, so the pool keeps virtual segments, and the trim's own check must speak.
    let knob = ("HIPSIM_VMM_DEFERRED_RELEASE", "in-use");
    let s = guarded(&["trim"], &[knob, ("ROCMGUARD_LOG", "info")]);
    let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
    assert!(
        !stderr.contains("memory came back only with its address range"),
        "the first-use check passed:\n{}",
        stderr
    );
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("a trim gave"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("ROCMGUARD_VMM=0"),
        "one line saying the trim gave nothing back, and what to do:\n{}",
        stderr
    );

    // A runtime that gives memory back: nothing said.
    let s = guarded(&["trim"], &[("ROCMGUARD_LOG", "info")]);
    let stderr = String::from_utf8_lossy(&s.1.stderr).into_owned();
    assert!(!stderr.contains("a trim gave"), "{}", stderr);
}
