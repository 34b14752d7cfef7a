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

/// A member driven line by line (`guard_group ctl`), so a test decides who allocates when.
struct Ctl {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Ctl {
    fn start(runtime: &Path, group: &str) -> Ctl {
        let mut child = member(exe(), runtime, group, &["ctl".into()]);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        read_until(&mut out, "ready");
        Ctl { child, out }
    }

    /// Sends one command; its answer's number.
    fn ask(&mut self, command: &str) -> u64 {
        writeln!(self.child.stdin.as_mut().unwrap(), "{}", command).unwrap();
        let verb = command.split(' ').next().unwrap();
        value(&read_until(&mut self.out, verb), verb)
    }

    /// Ends input, checks the exit, returns stderr.
    fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        let mut err = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(self.child.wait().unwrap().success(), "{}", err);
        err
    }
}

/// What the members' files say the group holds on device 0, read under the group's lock as the
/// members read them. Every file must be whole.
fn group_total(dir: &Path) -> u64 {
    let Ok(lock) = std::fs::File::open(dir.join("lock")) else {
        return 0;
    };
    lock.lock().unwrap();
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_name() == "lock" {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let held = rocmguard_core::group::parse(&text)
            .unwrap_or_else(|e| panic!("{}: {}: {:?}", entry.path().display(), e, text));
        total += rocmguard_core::group::on(&held, 0);
    }
    total
}

#[test]
fn eight_members_at_random_never_pass_the_group_cap_and_end_exact() {
    const MIB: u64 = 1 << 20;
    let runtime = tempfile::tempdir().unwrap();
    let group = "eight";
    let dir = private_group_dir(runtime.path(), group);
    let members: Vec<Ctl> = (0..8).map(|_| Ctl::start(runtime.path(), group)).collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (done, dir) = (done.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let total = group_total(&dir);
                assert!(total <= 2 * GIB, "the group holds {} MiB", total / MIB);
                most = most.max(total);
            }
            most
        })
    };
    let workers: Vec<_> = members
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            std::thread::spawn(move || {
                let mut seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let (mut live, mut refused) = (Vec::new(), 0);
                for _ in 0..60 {
                    if live.is_empty() || next() % 3 != 0 {
                        let bytes = (next() % 384 + 32) * MIB;
                        match m.ask(&format!("alloc {}", bytes)) {
                            0 => live.push(bytes),
                            2 => refused += 1,
                            code => panic!("hipMalloc gave {}", code),
                        }
                    } else {
                        let i = (next() % live.len() as u64) as usize;
                        assert_eq!(m.ask(&format!("free {}", i)), 0);
                        live.swap_remove(i);
                    }
                    if next() % 8 == 0 {
                        assert_eq!(m.ask("trim"), 0);
                    }
                }
                (m, live, refused)
            })
        })
        .collect();
    let mut members = Vec::new();
    let mut refusals = 0;
    for w in workers {
        let (m, live, refused) = w.join().unwrap();
        refusals += refused;
        members.push((m, live));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.join().unwrap();
    assert!(
        refusals > 0,
        "the cap was never reached: the test proves nothing"
    );
    assert!(
        most > GIB,
        "the group never held more than {} MiB",
        most / MIB
    );

    // Idle: the files cover what the members hold, and never more than the cap.
    let live: u64 = members.iter().map(|(_, l)| l.iter().sum::<u64>()).sum();
    let total = group_total(&dir);
    assert!(
        live <= total && total <= 2 * GIB,
        "live {} total {}",
        live,
        total
    );
    // Everything freed and trimmed: the group holds exactly nothing, and one member can
    // have the whole cap.
    for (m, l) in &mut members {
        for _ in 0..l.len() {
            assert_eq!(m.ask("free 0"), 0);
        }
        assert_eq!(m.ask("trim"), 0);
    }
    assert_eq!(group_total(&dir), 0);
    assert_eq!(members[0].0.ask(&format!("alloc {}", 2 * GIB)), 0);
    for (m, _) in members {
        let err = m.finish();
        assert!(!err.contains("group file"), "{}", err);
    }
}

/// A file a live member would hold (this test holds its lock) claiming 1.5 GiB, which the
/// group must not believe: the member still gets 1.5 GiB under its own share of the cap and
/// says once why the file was refused.
fn refused_once(name: &str, text: &str, mode: u32, owner: Option<u32>, why: &str) {
    let runtime = tempfile::tempdir().unwrap();
    let dir = private_group_dir(runtime.path(), name);
    let path = dir.join("999997");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some(uid) = owner {
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
    let held = std::fs::File::open(&path).unwrap();
    held.lock().unwrap();

    let mut m = Ctl::start(runtime.path(), name);
    assert_eq!(
        m.ask(&format!("alloc {}", 3 * GIB / 2)),
        0,
        "{}: the file was believed",
        name
    );
    assert_eq!(
        m.ask(&format!("alloc {}", GIB)),
        2,
        "{}: the cap still holds",
        name
    );
    let err = m.finish();
    let said: Vec<&str> = err.lines().filter(|l| l.contains("group file")).collect();
    assert_eq!(said.len(), 1, "{}: said once: {}", name, err);
    assert!(
        said[0].contains(why),
        "{}: `{}` does not say `{}`",
        name,
        said[0],
        why
    );
    assert!(path.exists(), "a live member's file is left alone");
}

#[test]
fn truncated_changed_or_foreign_files_are_refused_not_trusted() {
    let good = rocmguard_core::group::render(&[3 * GIB / 2]);
    refused_once(
        "truncated",
        &good[..good.len() - 3],
        0o600,
        None,
        "truncated",
    );
    refused_once(
        "cut-at-line",
        &good[..good.find("end").unwrap()],
        0o600,
        None,
        "truncated",
    );
    let changed = good.replacen("1610612736", "1610612737", 1);
    refused_once("changed", &changed, 0o600, None, "total does not match");
    refused_once(
        "garbage",
        "\u{0}\u{1}binary\n",
        0o600,
        None,
        "not in rocmguard's group format",
    );
    refused_once("readable", &good, 0o644, None, "mode 644");
    // Another user's file: only root can make one, as CI's machine is.
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if uid.ok() == Some(0) {
        refused_once("foreign", &good, 0o600, Some(65534), "owner 65534");
    } else {
        eprintln!("not root: another user's file is not tried here");
    }
}

#[test]
fn rocmguard_stats_shows_who_holds_the_group_cap() {
    let runtime = tempfile::tempdir().unwrap();
    let group = "shown";
    private_group_dir(runtime.path(), group);
    let mut holder = member(
        exe(),
        runtime.path(),
        group,
        &["hold".into(), GIB.to_string()],
    );
    read_until(&mut BufReader::new(holder.stdout.take().unwrap()), "held");
    let mut idle = Ctl::start(runtime.path(), group);
    assert_eq!(
        idle.ask("info"),
        GIB,
        "the idle member sees the group's 1 GiB left"
    );

    let out = rocmguard_tests::output(
        rocmguard_tests::cli_command()
            .arg("stats")
            .env("XDG_RUNTIME_DIR", runtime.path()),
    );
    let text = rocmguard_tests::text(&out);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let idle_pid = idle.child.id();
    idle.finish();
    assert!(text.contains("group shown: 2 live members"), "{}", text);
    let line = |pid: u32| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", pid)))
            .unwrap_or_else(|| panic!("no line for pid {}: {}", pid, text))
            .to_string()
    };
    assert!(line(holder.id()).contains("dev0 1.00 GiB"), "{}", text);
    assert!(line(idle_pid).contains("no device memory"), "{}", text);
    assert!(text.contains("together  dev0 1.00 GiB"), "{}", text);
}
