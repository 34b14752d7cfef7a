//! ROCMGUARD_GROUP: processes naming the same group share one cap per device, and a member that
//! dies, even by SIGKILL, gives its share back at once. Real processes under LD_PRELOAD on the
//! simulated runtime (hipsim, where each process has its own simulated device: only the group
//! ties them together).
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::OnceLock;

use rocmguard_tests::{compile_c, guarded_command};

const GIB: u64 = 1 << 30;

/// Built once: tests run in parallel, and a program being rewritten cannot be started.
fn exe() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile_c("guard_group", &["guard_group.c"], &["-lamdhip64"]))
}

fn member(exe: &Path, runtime: &Path, group: &str, args: &[String]) -> Child {
    guarded_command(exe)
        .args(args)
        .env("ROCMGUARD_GROUP", group)
        .env("ROCMGUARD_VRAM_LIMIT", "2GiB")
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The group's directory as a member makes it (0700 all the way), made first by the test.
fn private_group_dir(runtime: &Path, group: &str) -> PathBuf {
    let base = runtime.join("rocmguard");
    let dir = base.join(format!("group-{}", group));
    std::fs::create_dir_all(&dir).unwrap();
    for d in [&base, &dir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    dir
}

/// Lines of `out` up to and including `until`, as `key value` pairs.
fn read_until(out: &mut BufReader<ChildStdout>, until: &str) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the member ended before {:?}: {:?}",
            until,
            seen
        );
        let line = line.trim().to_string();
        let (k, v) = line.split_once(' ').unwrap_or((&line, ""));
        seen.push((k.to_string(), v.to_string()));
        if line.starts_with(until) {
            return seen;
        }
    }
}

fn value(seen: &[(String, String)], key: &str) -> u64 {
    seen.iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {} in {:?}", key, seen))
        .1
        .split(' ')
        .next()
        .unwrap()
        .parse::<i64>()
        .unwrap() as u64
}

#[test]
fn a_group_shares_one_cap_and_a_killed_member_gives_its_share_back() {
    let exe = exe();
    let runtime = tempfile::tempdir().unwrap();
    let group = format!("t{}", std::process::id());
    let held = (3 * GIB / 2).to_string();

    let mut holder = member(exe, runtime.path(), &group, &["hold".into(), held.clone()]);
    let mut holder_out = BufReader::new(holder.stdout.take().unwrap());
    read_until(&mut holder_out, "held");

    let mut want = member(exe, runtime.path(), &group, &["want".into(), held]);
    let mut want_out = BufReader::new(want.stdout.take().unwrap());
    let seen = read_until(&mut want_out, "waiting");
    assert_eq!(value(&seen, "total"), 2 * GIB, "{:?}", seen);
    assert!(
        value(&seen, "free") <= GIB / 2,
        "the view leaves out what the other member holds: {:?}",
        seen
    );
    assert_eq!(
        value(&seen, "first"),
        2,
        "1.5 GiB more passes the group's 2 GiB: {:?}",
        seen
    );

    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    writeln!(want.stdin.as_mut().unwrap(), "go").unwrap();
    let seen = read_until(&mut want_out, "got");
    let got = &seen.last().unwrap().1;
    let mut parts = got.split(' ');
    assert_eq!(
        parts.next(),
        Some("0"),
        "the killed member's share came back: {:?}",
        seen
    );
    let ms: f64 = parts.nth(1).unwrap().parse().unwrap();
    assert!(ms < 1000.0, "within a second of the kill, not {} ms", ms);
    assert!(want.wait().unwrap().success());
}

#[test]
fn a_group_directory_others_can_write_is_refused_and_the_process_keeps_its_own_cap() {
    let exe = exe();
    let runtime = tempfile::tempdir().unwrap();
    let group = "open";
    let dir = runtime
        .path()
        .join("rocmguard")
        .join(format!("group-{}", group));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A file that claims the whole cap: it must not be trusted.
    std::fs::write(dir.join("1"), "rocmguard-group 1\n0 2147483648\n").unwrap();

    let mut want = member(
        exe,
        runtime.path(),
        group,
        &["want".into(), GIB.to_string()],
    );
    let mut out = BufReader::new(want.stdout.take().unwrap());
    let seen = read_until(&mut out, "waiting");
    assert_eq!(
        value(&seen, "first"),
        0,
        "its own cap still allows 1 GiB: {:?}",
        seen
    );
    writeln!(want.stdin.as_mut().unwrap(), "go").unwrap();
    want.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(want.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("not a private directory"), "said why: {}", err);
    assert_eq!(
        err.matches("ROCMGUARD_GROUP=").count(),
        1,
        "said once: {}",
        err
    );
}

#[test]
fn the_file_of_a_dead_member_is_not_counted_and_is_removed() {
    let exe = exe();
    let runtime = tempfile::tempdir().unwrap();
    let group = "stale";
    let dir = private_group_dir(runtime.path(), group);
    // Left by a process that died: nobody holds its lock.
    let stale = dir.join("999999");
    std::fs::write(&stale, "rocmguard-group 1\n0 2147483648\n").unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o600)).unwrap();

    let mut want = member(
        exe,
        runtime.path(),
        group,
        &["want".into(), GIB.to_string()],
    );
    let mut out = BufReader::new(want.stdout.take().unwrap());
    let seen = read_until(&mut out, "waiting");
    assert_eq!(
        value(&seen, "first"),
        0,
        "a dead member's share is free: {:?}",
        seen
    );
    assert!(!stale.exists(), "the stale file is removed");
    writeln!(want.stdin.as_mut().unwrap(), "go").unwrap();
    want.wait().unwrap();
}

#[test]
fn a_corrupted_file_of_a_live_member_is_refused_not_trusted() {
    let exe = exe();
    let runtime = tempfile::tempdir().unwrap();
    let group = "corrupt";
    let dir = private_group_dir(runtime.path(), group);
    // A live member's file (this test holds its lock) whose bytes are not the format: a
    // truncated header, then garbage that would claim the whole cap if read loosely.
    let path = dir.join("999998");
    std::fs::write(&path, "rocmguard-gr\n0 2147483648\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let held = std::fs::File::open(&path).unwrap();
    held.lock().unwrap();

    let mut want = member(
        exe,
        runtime.path(),
        group,
        &["want".into(), GIB.to_string()],
    );
    let mut out = BufReader::new(want.stdout.take().unwrap());
    let seen = read_until(&mut out, "waiting");
    assert_eq!(
        value(&seen, "first"),
        0,
        "the corrupted file is not counted: {:?}",
        seen
    );
    writeln!(want.stdin.as_mut().unwrap(), "go").unwrap();
    want.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(want.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("refused (not in rocmguard's group format)"),
        "said why: {}",
        err
    );
    assert!(path.exists(), "a live member's file is left alone");
    drop(held);
}
