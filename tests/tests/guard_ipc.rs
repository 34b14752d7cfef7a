//! Pooled blocks shared between processes: `tests/c/guard_ipc.c` exports blocks of 4 KiB to
//! 300 MiB (small ones packed side by side in the pool's virtual segments, handles asked for at
//! and past a block's start) under `LD_PRELOAD` on hipsim, the simulated HIP runtime, and a
//! second process opens them. Under the shim the opener must see exactly each block's bytes
//! and its writes must reach the exporter; without the shim the handle must fail cleanly. With
//! plain segments (`ROCMGUARD_VMM=0`) the runtime's own handles travel, carrying the block's
//! offset as ROCm's do, so any opener sees the block (hipsim shares its `hipMalloc` memory
//! between processes for this, after clr).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use rocmguard_tests::{compile_c, guarded_command, output, sim_command, text};

const BLOCKS: i64 = 8;

fn program() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile_c("guard_ipc", &["guard_ipc.c"], &["-lamdhip64"]))
}

/// Starts `cmd` in `mode` (`export`, `open`) with `runtime` as its runtime directory, its
/// standard streams piped.
fn start(mut cmd: Command, mode: &str, runtime: &Path) -> Child {
    cmd.arg(mode)
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `opener` on the `handle` lines; its output.
fn open(opener: Command, runtime: &Path, handles: &str) -> Output {
    let mut child = start(opener, "open", runtime);
    let mut input = child.stdin.take().unwrap();
    input.write_all(handles.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Exports under the shim, opens with `opener`; the opener's `key value` lines and the blocks
/// the exporter saw written.
fn share(
    runtime: &Path,
    exporter: Command,
    opener: Command,
) -> (HashMap<String, i64>, i64, String) {
    let mut exporter = start(exporter, "export", runtime);
    let mut out = BufReader::new(exporter.stdout.take().unwrap());
    let mut handles = String::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the exporter ended: {}",
            handles
        );
        if line.trim() == "ready" {
            break;
        }
        handles.push_str(&line);
    }
    assert_eq!(handles.lines().count() as i64, BLOCKS, "{}", handles);

    let opened = open(opener, runtime, &handles);
    assert!(opened.status.success(), "{}", text(&opened));
    let values = String::from_utf8_lossy(&opened.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect();

    writeln!(exporter.stdin.as_mut().unwrap(), "check").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let status = exporter.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(exporter.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "exporter: {}", err);
    let written = line
        .trim()
        .strip_prefix("written ")
        .unwrap_or_else(|| panic!("{:?} {}", line, err))
        .parse()
        .unwrap();
    (
        values,
        written,
        String::from_utf8_lossy(&opened.stderr).into_owned() + &err,
    )
}

#[test]
fn an_opener_under_the_shim_sees_exactly_each_block_and_writes_back() {
    let runtime = tempfile::tempdir().unwrap();
    let (seen, written, logs) = share(
        runtime.path(),
        guarded_command(program()),
        guarded_command(program()),
    );
    assert_eq!(seen["failed"], 0, "code {}: {}", seen["code"], logs);
    assert_eq!(seen["opened"], BLOCKS, "{}", logs);
    assert_eq!(seen["wrong"], 0, "another block's bytes arrived: {}", logs);
    assert_eq!(seen["intact"], BLOCKS);
    assert_eq!(
        written, BLOCKS,
        "the opener's writes reach the exporter: {}",
        logs
    );
}

#[test]
fn an_opener_without_the_shim_gets_a_clean_error() {
    let runtime = tempfile::tempdir().unwrap();
    let (seen, written, logs) = share(
        runtime.path(),
        guarded_command(program()),
        sim_command(program()),
    );
    assert_eq!(seen["opened"], 0, "{}", logs);
    assert_eq!(seen["failed"], BLOCKS);
    assert_eq!(
        seen["code"], 1,
        "hipErrorInvalidValue, as clr answers a handle of size 0"
    );
    assert_eq!(written, 0);
}

#[test]
fn a_handle_of_a_process_that_exited_fails_cleanly() {
    let runtime = tempfile::tempdir().unwrap();
    let out = output(
        guarded_command(program())
            .arg("export")
            .env("XDG_RUNTIME_DIR", runtime.path())
            .stdin(Stdio::null()),
    );
    // The exporter stops at "check" (stdin closed): its handles outlive it.
    let handles: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("handle "))
        .map(|l| format!("{}\n", l))
        .collect();
    let done = open(guarded_command(program()), runtime.path(), &handles);
    let said = text(&done);
    assert!(done.status.success(), "{}", said);
    assert!(said.contains(&format!("failed {}", BLOCKS)), "{}", said);
    assert!(said.contains("opened 0"), "{}", said);
    assert_eq!(said.matches("IPC handle").count(), 1, "said once: {}", said);
    let left: Vec<_> = std::fs::read_dir(runtime.path().join("rocmguard"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("ipc-"))
        .collect();
    assert!(
        left.is_empty(),
        "the exporter's socket went with it: {:?}",
        left
    );
}

/// Plain segments: the runtime's handles, with the block's offset in its segment.
fn plain() -> Command {
    let mut c = guarded_command(program());
    c.env("ROCMGUARD_VMM", "0");
    c
}

#[test]
fn with_plain_segments_any_opener_sees_exactly_each_block() {
    for (who, opener) in [
        ("under the shim", plain()),
        ("without it", sim_command(program())),
    ] {
        let runtime = tempfile::tempdir().unwrap();
        let (seen, written, logs) = share(runtime.path(), plain(), opener);
        assert_eq!(
            seen["failed"], 0,
            "{}: code {}: {}",
            who, seen["code"], logs
        );
        assert_eq!(
            seen["wrong"], 0,
            "{}: another block's bytes arrived: {}",
            who, logs
        );
        assert_eq!(seen["intact"], BLOCKS, "{}", who);
        assert_eq!(written, BLOCKS, "{}: writes reach the exporter", who);
    }
}

#[test]
fn the_simulated_runtime_shares_its_own_allocations_like_rocm() {
    let runtime = tempfile::tempdir().unwrap();
    let (seen, written, logs) = share(
        runtime.path(),
        sim_command(program()),
        sim_command(program()),
    );
    assert_eq!(seen["intact"], BLOCKS, "{}", logs);
    assert_eq!(written, BLOCKS);
}
