//! `rocmguard stats` reading live-stats files published through `rocmguard_core::live`, for a
//! real child process that the test starts and stops.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rocmguard_core::live;
use rocmguard_core::Stats;
use rocmguard_tests::{cli_command, output, scratch_dir, text};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stats(dir: &Path, args: &[&str]) -> Output {
    output(
        cli_command()
            .env("ROCMGUARD_STATS_DIR", dir)
            .arg("stats")
            .args(args),
    )
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

fn figures() -> Vec<(i32, Stats)> {
    let gpu0 = Stats {
        live: 3 << 30,
        peak_live: 5 << 30,
        reserved: 4 << 30,
        peak_reserved: 6 << 30,
        cap: 20 << 30,
        allocs: 12345,
        pool_hits: 12000,
        source_allocs: 345,
        trims: 2,
        ooms: 1,
        ..Stats::default()
    };
    let gpu1 = Stats {
        live: 512 << 20,
        reserved: 1 << 30,
        cap: 20 << 30,
        ..Stats::default()
    };
    vec![(0, gpu0), (1, gpu1)]
}

#[test]
fn shows_a_live_process_and_forgets_it_once_it_exits() {
    let dir = scratch_dir("cli-stats-live");
    let mut child = sleeper();
    let pid = child.id();
    live::publish_in(&dir, pid, "python train.py --epochs 3", &figures()).unwrap();

    let out = stats(&dir, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let list = stdout(&out);
    assert!(list.starts_with("1 guarded process "), "{}", list);
    let rows: Vec<&str> = list
        .lines()
        .filter(|l| l.contains("python train.py --epochs 3"))
        .collect();
    assert_eq!(rows.len(), 2, "one row per device:\n{}", list);
    assert!(
        rows[0].trim_start().starts_with(&format!("{}  dev0", pid)),
        "{}",
        rows[0]
    );
    // 4 GiB reserved for 3 GiB live: 1.333 bytes held per byte used.
    for figure in ["3.00 GiB", "4.00 GiB", "20.00 GiB", "1.333x"] {
        assert!(rows[0].contains(figure), "{} not in {}", figure, rows[0]);
    }
    assert!(
        rows[1].contains("dev1") && rows[1].contains("512.0 MiB"),
        "{}",
        rows[1]
    );

    let out = stats(&dir, &[&pid.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let one = stdout(&out);
    assert!(
        one.starts_with(&format!("pid {}: python train.py --epochs 3\n", pid)),
        "{}",
        one
    );
    assert!(
        one.contains(&Stats::table(&figures())),
        "the core's table:\n{}",
        one
    );

    child.kill().unwrap();
    child.wait().unwrap();
    let out = stats(&dir, &[]);
    assert!(out.status.success());
    assert!(
        stdout(&out).starts_with("no guarded processes"),
        "{}",
        text(&out)
    );
    assert!(
        !live::path_in(&dir, pid).exists(),
        "the dead process's file is deleted"
    );

    live::publish_in(&dir, pid, "python train.py", &figures()).unwrap();
    let out = stats(&dir, &[&pid.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("no live stats for pid {}", pid))
            && said.contains("ROCMGUARD_STATS_DIR"),
        "{}",
        said
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_process_that_has_not_allocated_yet_is_listed() {
    let dir = scratch_dir("cli-stats-empty");
    let mut child = sleeper();
    live::publish_in(&dir, child.id(), "python idle.py", &[]).unwrap();
    let list = stdout(&stats(&dir, &[]));
    assert!(
        list.contains(&format!("{}  -", child.id())) && list.contains("python idle.py"),
        "{}",
        list
    );
    let one = stdout(&stats(&dir, &[&child.id().to_string()]));
    assert!(one.contains("no device memory allocated yet"), "{}", one);
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_directory_is_the_cores() {
    let runtime = scratch_dir("cli-stats-xdg");
    let mut child = sleeper();
    let expected = live::dir_from(None, Some(runtime.clone().into_os_string()), None);
    live::publish_in(&expected, child.id(), "python xdg.py", &figures()).unwrap();
    let out = output(
        cli_command()
            .env_remove("ROCMGUARD_STATS_DIR")
            .env("XDG_RUNTIME_DIR", &runtime)
            .arg("stats"),
    );
    let list = stdout(&out);
    assert!(
        list.contains("python xdg.py") && list.contains(&expected.display().to_string()),
        "{}",
        text(&out)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&runtime).unwrap();
}

/// Reads what a `--watch` child wrote until `limit`, then kills it.
fn watch_for(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut shown = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    (code, shown)
}

#[test]
fn watch_refreshes_until_stopped_and_ends_with_its_process() {
    let dir = scratch_dir("cli-stats-watch");
    let mut child = sleeper();
    let pid = child.id();
    live::publish_in(&dir, pid, "python watched.py", &figures()).unwrap();

    let watcher = cli_command()
        .env("ROCMGUARD_STATS_DIR", &dir)
        .args(["stats", "--watch", "--interval", "0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, shown) = watch_for(watcher, Duration::from_millis(1500));
    assert_eq!(code, None, "the list view runs until stopped:\n{}", shown);
    let frames = shown.matches("\x1b[2J\x1b[H").count();
    assert!(frames >= 3, "{} frames:\n{}", frames, shown);
    assert!(shown.contains("python watched.py"), "{}", shown);

    // Watching one process ends when it does.
    let watcher = cli_command()
        .env("ROCMGUARD_STATS_DIR", &dir)
        .args(["stats", &pid.to_string(), "--watch", "--interval", "0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, shown) = watch_for(watcher, Duration::from_secs(5));
    assert_eq!(code, Some(0), "{}", shown);
    assert!(
        shown.contains("peak live") && shown.contains(&format!("no live stats for pid {}", pid)),
        "{}",
        shown
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_are_refused() {
    let out = output(cli_command().args(["stats", "--interval", "0"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 0.1"),
        "{}",
        text(&out)
    );
    let out = output(cli_command().args(["stats", "twelve"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
