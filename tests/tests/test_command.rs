//! The test command's own output (scripts/test.sh): the GPU check's driver tests print no
//! `FAILED` for the fake runs that fail on purpose, and the last line is one verdict,
//! `N passed, N failed`, counted over every stage by scripts/verdict.sh.

use std::path::Path;
use std::process::Command;

use rocmguard_tests::{output, root, scratch_dir, text};

#[test]
fn the_driver_tests_print_no_failed_for_expected_failures() {
    let out = output(Command::new("python3").arg(root().join("scripts/gpu/test_driver.py")));
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    let failed: Vec<&str> = all.lines().filter(|l| l.contains("FAILED")).collect();
    assert!(failed.is_empty(), "{:#?}", failed);
}

fn stage(dir: &Path, name: &str, log: &str, rc: i32) {
    std::fs::write(dir.join(format!("{}.log", name)), log).unwrap();
    std::fs::write(dir.join(format!("{}.rc", name)), format!("{}\n", rc)).unwrap();
}

fn verdict(dir: &Path) -> (Option<i32>, String) {
    let out = output(Command::new(root().join("scripts/verdict.sh")).arg(dir));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or("").to_string();
    (out.status.code(), last)
}

#[test]
fn the_verdict_counts_every_stage() {
    let dir = scratch_dir("verdict");
    stage(
        &dir,
        "1-cargo",
        "running 3 tests\ntest result: ok. 27 passed; 0 failed; 1 ignored; 0 measured\n\
         test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured\n",
        101,
    );
    stage(
        &dir,
        "2-python",
        "......sss\n----\nRan 22 tests in 1.2s\n\nOK (skipped=3)\n",
        0,
    );
    stage(&dir, "3-msrv", "error[E0658]: let-else is unstable\n", 1);
    stage(&dir, "4-windows", "ok  one\n14 passed, 1 failed\n", 1);
    assert_eq!(verdict(&dir), (Some(1), "65 passed, 4 failed".to_string()));

    let dir = scratch_dir("verdict_ok");
    stage(
        &dir,
        "1-cargo",
        "test result: ok. 9 passed; 0 failed; 0 ignored\n",
        0,
    );
    stage(
        &dir,
        "2-python",
        "Ran 4 tests in 0.1s\n\nFAILED (failures=1, errors=1)\n",
        1,
    );
    stage(&dir, "3-msrv", "core-msrv: rustc 1.63.0\n", 0);
    assert_eq!(verdict(&dir), (Some(1), "12 passed, 2 failed".to_string()));
    std::fs::remove_file(dir.join("2-python.log")).unwrap();
    std::fs::remove_file(dir.join("2-python.rc")).unwrap();
    assert_eq!(verdict(&dir), (Some(0), "10 passed, 0 failed".to_string()));
}

#[test]
fn test_sh_ends_with_the_verdict() {
    let script = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    let last = script.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(last.trim(), "scripts/verdict.sh \"$logs\"");
}

/// scripts/test.sh's stage runner, with stand-in stages: (exit status, what it printed).
fn stages(body: &str) -> (Option<i32>, String) {
    let script = format!(
        ". scripts/stages.sh\nstages_begin\n{}\nstage 5-tidy tidy\nscripts/verdict.sh \"$logs\"",
        body
    );
    let out = output(
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(root()),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The suite prints one line of the verdict's form, the last: a stage's own count is shown
/// with the stage's name.
#[test]
fn one_verdict_line() {
    let (code, out) = stages(
        "stage 1-a sh -c 'echo \"test result: ok. 3 passed; 0 failed\"'\n\
         stage 4-b sh -c 'echo \"5 passed, 1 failed\"; exit 1'",
    );
    let verdicts: Vec<&str> = out
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            w.len() == 4 && w[0].parse::<u64>().is_ok() && w[1] == "passed," && w[3] == "failed"
        })
        .collect();
    assert_eq!(verdicts, ["9 passed, 1 failed"], "{}", out);
    assert!(out.contains("4-b: 5 passed, 1 failed"), "{}", out);
    assert_eq!(code, Some(1), "{}", out);
}

/// A stage that leaves something in the temporary directory fails the tidy stage, which names
/// it; a suite that leaves nothing passes it.
#[test]
fn the_suite_leaves_the_temporary_directory_as_it_found_it() {
    let (code, out) = stages("stage 1-a sh -c 'mkdir \"$TMPDIR/rocmguard-replay-42-x\"'");
    assert_eq!(code, Some(1), "{}", out);
    assert!(
        out.contains("tidy: FAIL") && out.contains("rocmguard-replay-42-x"),
        "{}",
        out
    );
    assert!(out.ends_with("1 passed, 1 failed\n"), "{}", out);
    let (code, out) = stages("stage 1-a sh -c 'd=$(mktemp -d); rm -r \"$d\"'");
    assert_eq!(code, Some(0), "{}", out);
    assert!(out.contains("tidy: ok"), "{}", out);
}
