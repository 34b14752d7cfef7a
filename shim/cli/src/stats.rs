//! `rocmguard stats [PID] [--watch]`: the guarded processes of this user and their per-device
//! figures, read from the live-stats files the shim writes about once a second
//! (`rocmguard_core::live`). Files of processes that have died are deleted on the way.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rocmguard_core::group;
use rocmguard_core::live::{self, Record};
use rocmguard_core::{format_size, Stats};

use crate::run::print_stdout;

/// A process that has not published for this long is shown as stale (stopped, or hung in the
/// driver).
const STALE_SECS: f64 = 5.0;

#[derive(clap::Args)]
#[command(
    after_help = "The shim publishes to $ROCMGUARD_STATS_DIR, else $XDG_RUNTIME_DIR/rocmguard, else /dev/shm/rocmguard-<uid>: run this command with the same environment as the program."
)]
pub struct Args {
    /// Show this process's full per-device table instead of the list
    #[arg(value_name = "PID")]
    pid: Option<u32>,

    /// Refresh like top until Ctrl-C
    #[arg(long, short)]
    watch: bool,

    /// Seconds between refreshes with --watch
    #[arg(long, value_name = "SECS", default_value_t = 1.0, value_parser = positive_seconds)]
    interval: f64,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s >= 0.1 && s.is_finite() => Ok(s),
        _ => Err(format!(
            "`{}` is not a number of seconds of at least 0.1",
            text
        )),
    }
}

pub fn exec(args: Args) -> anyhow::Result<u8> {
    let dir = live::dir();
    if !args.watch {
        return Ok(match frame(&dir, args.pid) {
            Ok(text) => {
                print_stdout(&text)?;
                0
            }
            Err(text) => {
                eprintln!("rocmguard: {}", text);
                1
            }
        });
    }
    let mut out = std::io::stdout();
    loop {
        let shown = frame(&dir, args.pid);
        // Clear the screen and go home, then draw: top's way, without a terminal library.
        let text = match &shown {
            Ok(text) => format!("\x1b[2J\x1b[H{}", text),
            Err(text) => format!("\x1b[2J\x1b[H{}\n", text),
        };
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            // The reader is gone (`rocmguard stats --watch | head`): so is the point.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
            other => other?,
        }
        if shown.is_err() {
            // The one process we watched is gone.
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

/// The text for one refresh; `Err` when the process asked for has no live stats.
fn frame(dir: &Path, pid: Option<u32>) -> Result<String, String> {
    let now = SystemTime::now();
    match pid {
        Some(pid) => live::read_in(dir, pid)
            .map(|r| process_view(&r, now, dir))
            .ok_or_else(|| {
                format!(
                    "no live stats for pid {} in {}: it is not running under rocmguard, has exited, or publishes elsewhere (its ROCMGUARD_STATS_DIR or XDG_RUNTIME_DIR differ from yours)",
                    pid,
                    dir.display()
                )
            }),
        None => Ok(list_view(&live::list_in(dir), now, dir) + &groups_view(&group_base())),
    }
}

fn updated(r: &Record, now: SystemTime) -> String {
    let age = r.age_secs(now);
    if age > STALE_SECS {
        format!("{:.0}s (stale)", age)
    } else {
        format!("{:.1}s", age)
    }
}

/// One row per process and device.
fn list_view(records: &[Record], now: SystemTime, dir: &Path) -> String {
    if records.is_empty() {
        return format!("no guarded processes (live stats in {})\n", dir.display());
    }
    let mut out = format!(
        "{} guarded process{} (live stats in {})\n\n{:>7}  {:<6} {:>11} {:>11} {:>11} {:>9} {:>6}  {:>9}  {}\n",
        records.len(),
        if records.len() == 1 { "" } else { "es" },
        dir.display(),
        "PID",
        "DEVICE",
        "LIVE",
        "RESERVED",
        "CAP",
        "RESV/LIVE",
        "OOMS",
        "UPDATED",
        "COMMAND"
    );
    for r in records {
        let none = [(-1, Stats::default())];
        let devices: &[(i32, Stats)] = if r.devices.is_empty() {
            &none
        } else {
            &r.devices
        };
        for (device, s) in devices {
            let name = if *device < 0 {
                "-".to_string()
            } else {
                format!("dev{}", device)
            };
            out.push_str(&format!(
                "{:>7}  {:<6} {:>11} {:>11} {:>11} {:>8.3}x {:>6}  {:>9}  {}\n",
                r.pid,
                name,
                format_size(s.live),
                format_size(s.reserved),
                format_size(s.cap),
                s.reserved_per_live(),
                s.ooms,
                updated(r, now),
                r.command
            ));
        }
    }
    out
}

/// The full table for one process.
fn process_view(r: &Record, now: SystemTime, dir: &Path) -> String {
    let mut out = format!(
        "pid {}: {}\nupdated {} ago ({})\n\n",
        r.pid,
        r.command,
        updated(r, now),
        live::path_in(dir, r.pid).display()
    );
    if r.devices.is_empty() {
        out.push_str("no device memory allocated yet\n");
    } else {
        out.push_str(&Stats::table(&r.devices));
    }
    out
}

/// Where this user's groups live, as the shim finds them (`rocmguard_core::group::base_dir`).
fn group_base() -> std::path::PathBuf {
    let uid = live::current_uid().unwrap_or(0);
    group::base_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid)
}

/// Each `ROCMGUARD_GROUP` of this user with live members: who holds what of the shared cap.
/// Read under the group's lock, as members read each other; a file whose lock nobody holds
/// belongs to a dead member and is left out.
fn groups_view(base: &Path) -> String {
    let mut groups: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = group::name_of(e.file_name().to_str()?)?.to_string();
            Some((name, e.path()))
        })
        .collect();
    groups.sort();
    let mut out = String::new();
    for (name, dir) in groups {
        let lock = std::fs::File::open(dir.join("lock"));
        if let Ok(lock) = &lock {
            let _ = lock.lock_shared();
        }
        let mut members = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(file) = std::fs::File::open(entry.path()) else {
                continue;
            };
            if file.try_lock_shared().is_ok() {
                continue; // nobody holds it: a dead member's
            }
            let text = std::io::read_to_string(&file).unwrap_or_default();
            members.push((pid, group::parse(&text)));
        }
        drop(lock);
        if members.is_empty() {
            continue;
        }
        members.sort_by_key(|(pid, _)| *pid);
        out.push_str(&format!(
            "\ngroup {}: {} live member{} ({})\n",
            name,
            members.len(),
            if members.len() == 1 { "" } else { "s" },
            dir.display()
        ));
        let mut totals = [0u64; group::MAX_DEVICES];
        for (pid, held) in &members {
            let text = match held {
                Ok(held) if held.is_empty() => "no device memory".to_string(),
                Ok(held) => held
                    .iter()
                    .map(|(d, b)| {
                        totals[*d] = totals[*d].saturating_add(*b);
                        format!("dev{} {}", d, format_size(*b))
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(why) => format!("file refused: {}", why),
            };
            out.push_str(&format!("{:>9}  {}\n", pid, text));
        }
        let total = totals
            .iter()
            .enumerate()
            .filter(|(_, b)| **b > 0)
            .map(|(d, b)| format!("dev{} {}", d, format_size(*b)))
            .collect::<Vec<_>>();
        if !total.is_empty() {
            out.push_str(&format!("{:>9}  {}\n", "together", total.join(", ")));
        }
    }
    out
}
