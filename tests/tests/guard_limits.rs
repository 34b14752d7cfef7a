//! The cap as users write it, under a bare `LD_PRELOAD` on hipsim (the simulated HIP runtime): an
//! invalid cap hands out nothing and says so once, `0` and `0%` are one thing, a cap above the
//! device is said once, refusals are logged once per situation and summed at exit, and the stats
//! table's overhead column is taken at the peak.

use std::path::PathBuf;
use std::sync::Mutex;

use rocmguard_tests::{compile_c, guarded_command, output, Seen};

/// Each program compiled once: tests run in parallel and must not rewrite a running binary.
fn program(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let exe = compile_c(
        name,
        &[&format!("{}.c", name)],
        &["-lamdhip64", "-ldl", "-pthread"],
    );
    built.push((name.to_string(), exe.clone()));
    exe
}

fn guarded(name: &str, args: &[&str], env: &[(&str, &str)]) -> Seen {
    let exe = program(name);
    Seen::new(output(
        guarded_command(&exe).args(args).envs(env.iter().copied()),
    ))
}

/// The `ooms` count of dev0 in the exit stats table.
fn ooms(stderr: &str) -> u64 {
    rocmguard_tests::exit_table_column(stderr, "ooms")
}

/// A cap the user asked for but wrote wrongly is never "no cap": the error is said once, even
/// with the log off, and no device memory is handed out.
#[test]
fn an_invalid_cap_is_an_error_and_hands_out_nothing() {
    for bad in ["banana", "-5GiB", "200%"] {
        for log in ["warn", "off"] {
            let s = guarded(
                "guard_refusals",
                &["50"],
                &[("ROCMGUARD_VRAM_LIMIT", bad), ("ROCMGUARD_LOG", log)],
            );
            s.succeeded();
            assert_eq!((s.num("granted"), s.num("refused")), (0, 50), "{}", bad);
            let said = format!("ROCMGUARD_VRAM_LIMIT={}", bad);
            let err = s.stderr();
            let errors = err
                .lines()
                .filter(|l| l.contains("is not a cap") && l.to_lowercase().contains("error"))
                .count();
            assert_eq!(errors, 1, "the error is said once:\n{}", err);
            if log == "warn" {
                assert!(
                    err.contains("49 more than logged; ROCMGUARD_VRAM_LIMIT"),
                    "the exit summary repeats it:\n{}",
                    err
                );
            }
            assert!(
                err.contains(&said) && err.contains("ROCMGUARD_VRAM_LIMIT=20GiB"),
                "key, value and a valid example:\n{}",
                err
            );
        }
    }
}

/// The stats table's overhead column is peak reserved / peak live, not the cache left idle at
/// exit: a program that frees everything before it ends still shows the pool's real overhead.
#[test]
fn the_stats_table_shows_reserved_per_live_at_peak() {
    let s = guarded(
        "guard_cap",
        &[],
        &[("ROCMGUARD_VRAM_LIMIT", "1GiB"), ("ROCMGUARD_STATS", "1")],
    );
    s.succeeded();
    let err = s.stderr();
    let header = err
        .lines()
        .find(|l| l.starts_with("device "))
        .expect("a table");
    assert!(!header.contains("frag"), "{}", header);
    let row: Vec<&str> = err
        .lines()
        .find(|l| l.starts_with("dev0 "))
        .expect("a dev0 row")
        .split_whitespace()
        .collect();
    // dev0, five sizes of two words, then the ratio.
    let ratio: f64 = row[11].trim_end_matches('x').parse().unwrap();
    let peak = |i: usize| format!("{} {}", row[i], row[i + 1]);
    assert_eq!(peak(3), "600.0 MiB", "peak live: {}", err);
    assert!(
        (1.0..1.1).contains(&ratio),
        "{} from {}: {}",
        ratio,
        peak(7),
        err
    );
}

/// `0` and `0%` are the same documented thing: a cap of no device memory.
#[test]
fn a_cap_of_zero_refuses_everything_either_way() {
    for zero in ["0", "0%"] {
        let s = guarded("guard_refusals", &["5"], &[("ROCMGUARD_VRAM_LIMIT", zero)]);
        s.succeeded();
        assert_eq!((s.num("granted"), s.num("refused")), (0, 5), "{}", zero);
        assert!(!s.stderr().contains("is not a cap"), "{}", s.stderr());
    }
}

/// A refusal that the program's own memory does not explain says so: a user can lower what
/// the program holds for the one, and should report the other. A small block keeps a page of
/// its own; a 3 MiB block needs two more, past a 4 MiB cap, though 3.25 MiB live would fit.
#[test]
fn a_refusal_says_whether_the_program_or_the_pool_passed_the_cap() {
    for vmm in ["1", "0"] {
        let s = guarded(
            "guard_refusals",
            &["1", "3", "256"],
            &[("ROCMGUARD_VRAM_LIMIT", "4MiB"), ("ROCMGUARD_VMM", vmm)],
        );
        s.succeeded();
        assert_eq!((s.num("granted"), s.num("refused")), (0, 1), "vmm={}", vmm);
        let err = s.stderr();
        assert!(
            err.contains("over the cap: the program holds 256.0 KiB, so this fits, but the pool's free memory under the cap is in pieces too small for it"),
            "vmm={}: {}",
            vmm,
            err
        );
    }
}

/// A cap above the device is lowered to the device, and that is said once naming both.
#[test]
fn a_cap_above_the_device_is_said_once() {
    let s = guarded(
        "guard_refusals",
        &["5"],
        &[("ROCMGUARD_VRAM_LIMIT", "20GiB")],
    );
    s.succeeded();
    assert_eq!(s.num("granted"), 5);
    let err = s.stderr();
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("above the device"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", err);
    assert!(
        lines[0].contains("20.00 GiB") && lines[0].contains("16.00 GiB"),
        "{}",
        err
    );
}

/// Refusals are logged once per situation, then counted: the exit summary says how many.
#[test]
fn refusals_are_logged_once_then_summed_at_exit() {
    let s = guarded(
        "guard_refusals",
        &["300"],
        &[("ROCMGUARD_VRAM_LIMIT", "100MiB"), ("ROCMGUARD_STATS", "1")],
    );
    s.succeeded();
    assert_eq!((s.num("granted"), s.num("refused")), (100, 200));
    let err = s.stderr();
    assert_eq!(err.matches("refused 1.0 MiB").count(), 1, "{}", err);
    assert!(
        err.contains("over the cap: the program holds 100.0 MiB and asks 1.0 MiB more"),
        "{}",
        err
    );
    assert!(
        err.contains("dev0: 200 allocations refused in all (200 over the cap, 0 larger than the whole cap), 199 more than logged"),
        "{}",
        err
    );
    assert_eq!(ooms(&err), 200, "{}", err);
}
