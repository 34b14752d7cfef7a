//! Live stats: each guarded process publishes its per-device [`Stats`] to a small text file about
//! once a second, and `rocmguard stats` reads them. Files, not a socket, so a reader needs no
//! cooperation from the process and a crashed process leaves only a file that readers delete.
//!
//! Where: `$ROCMGUARD_STATS_DIR`, else `$XDG_RUNTIME_DIR/rocmguard` (per user, in RAM, cleaned at
//! logout), else `/dev/shm/rocmguard-<uid>` (the uid read from the owner of `/proc/self`, since
//! the core has no libc), else `<temp dir>/rocmguard`. The directory is created mode 0700, and a
//! directory that is a symlink or belongs to another user is refused, so nobody can plant one in
//! the shared `/dev/shm`.
//!
//! One file per process, `<pid>.stats`, written to `.<pid>.tmp` and renamed over it, so a reader
//! sees the old or the new content, never half of one:
//!
//! ```text
//! rocmguard-live 1
//! pid 4242
//! start 1234567
//! updated_ms 1732251234123
//! command python train.py --epochs 3
//! dev 0 live=1073741824 peak_live=... reserved=... cap=... allocs=... ooms=0 ...
//! ```
//!
//! `start` is the process's start time in clock ticks after boot (field 22 of `/proc/<pid>/stat`),
//! so a file left by a dead process is not shown for a new process that got the same pid.
//! Readers ignore `key=value` pairs they do not know, so fields can be added.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::stats::Stats;

/// The variable that moves the directory (tests, containers, several users sharing one view).
pub const DIR_VAR: &str = "ROCMGUARD_STATS_DIR";

const MAGIC: &str = "rocmguard-live 1";
const SUFFIX: &str = ".stats";

/// Every [`Stats`] field by name, for writing and reading `dev` lines.
type Field = (&'static str, fn(&Stats) -> u64, fn(&mut Stats, u64));
const FIELDS: &[Field] = &[
    ("live", |s| s.live, |s, v| s.live = v),
    ("peak_live", |s| s.peak_live, |s, v| s.peak_live = v),
    ("reserved", |s| s.reserved, |s, v| s.reserved = v),
    (
        "peak_reserved",
        |s| s.peak_reserved,
        |s, v| s.peak_reserved = v,
    ),
    ("external", |s| s.external, |s, v| s.external = v),
    ("quarantined", |s| s.quarantined, |s, v| s.quarantined = v),
    ("cap", |s| s.cap, |s, v| s.cap = v),
    ("allocs", |s| s.allocs, |s, v| s.allocs = v),
    ("frees", |s| s.frees, |s, v| s.frees = v),
    ("pool_hits", |s| s.pool_hits, |s, v| s.pool_hits = v),
    (
        "source_allocs",
        |s| s.source_allocs,
        |s, v| s.source_allocs = v,
    ),
    (
        "source_frees",
        |s| s.source_frees,
        |s, v| s.source_frees = v,
    ),
    ("syncs", |s| s.syncs, |s, v| s.syncs = v),
    ("device_us", |s| s.device_us, |s, v| s.device_us = v),
    ("sync_us", |s| s.sync_us, |s, v| s.sync_us = v),
    ("waits", |s| s.waits, |s, v| s.waits = v),
    ("wait_us", |s| s.wait_us, |s, v| s.wait_us = v),
    ("trims", |s| s.trims, |s, v| s.trims = v),
    ("retries", |s| s.retries, |s, v| s.retries = v),
    ("ooms", |s| s.ooms, |s, v| s.ooms = v),
    (
        "largest_free",
        |s| s.largest_free,
        |s, v| s.largest_free = v,
    ),
];

/// One guarded process as its file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub pid: u32,
    /// Start time in clock ticks after boot; 0 where unknown.
    pub start: u64,
    /// Milliseconds since the Unix epoch of the last publish.
    pub updated_ms: u64,
    pub command: String,
    pub devices: Vec<(i32, Stats)>,
}

impl Record {
    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{}\npid {}\nstart {}\nupdated_ms {}\ncommand {}\n",
            MAGIC,
            self.pid,
            self.start,
            self.updated_ms,
            one_line(&self.command)
        );
        for (device, stats) in &self.devices {
            let _ = write!(out, "dev {}", device);
            for (name, get, _) in FIELDS {
                let _ = write!(out, " {}={}", name, get(stats));
            }
            out.push('\n');
        }
        out
    }

    /// Reads a file's text; unknown lines and fields are skipped.
    pub fn parse(text: &str) -> Result<Record, String> {
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!(
                "not a rocmguard live-stats file (no `{}` line)",
                MAGIC
            ));
        }
        let mut record = Record {
            pid: 0,
            start: 0,
            updated_ms: 0,
            command: String::new(),
            devices: Vec::new(),
        };
        for line in lines {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            let number = || {
                rest.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("`{}` is not a number in `{}`", rest, line))
            };
            match key {
                "pid" => record.pid = number()? as u32,
                "start" => record.start = number()?,
                "updated_ms" => record.updated_ms = number()?,
                "command" => record.command = rest.to_string(),
                "dev" => record.devices.push(parse_device(rest)?),
                _ => {}
            }
        }
        if record.pid == 0 {
            return Err("no pid line".to_string());
        }
        Ok(record)
    }

    /// Seconds since the last publish (0 if the clock went backwards).
    pub fn age_secs(&self, now: SystemTime) -> f64 {
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        now_ms.saturating_sub(self.updated_ms) as f64 / 1000.0
    }
}

fn parse_device(rest: &str) -> Result<(i32, Stats), String> {
    let mut parts = rest.split_whitespace();
    let device = parts
        .next()
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| format!("`dev {}` has no device number", rest))?;
    let mut stats = Stats::default();
    for pair in parts {
        let (name, value) = match pair.split_once('=') {
            Some(p) => p,
            None => continue,
        };
        if let Some((_, _, set)) = FIELDS.iter().find(|(n, _, _)| *n == name) {
            let v = value
                .parse()
                .map_err(|_| format!("`{}` is not a number", pair))?;
            set(&mut stats, v);
        }
    }
    Ok((device, stats))
}

fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The directory for this environment (see the module docs for the order).
pub fn dir() -> PathBuf {
    dir_from(
        std::env::var_os(DIR_VAR),
        std::env::var_os("XDG_RUNTIME_DIR"),
        current_uid(),
    )
}

/// [`dir`] from its inputs, for tests and for readers that want to say where they looked.
pub fn dir_from(
    stats_dir: Option<OsString>,
    xdg_runtime_dir: Option<OsString>,
    uid: Option<u32>,
) -> PathBuf {
    if let Some(d) = stats_dir.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = xdg_runtime_dir.filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("rocmguard");
    }
    let shm = Path::new("/dev/shm");
    match uid {
        Some(uid) if shm.is_dir() => shm.join(format!("rocmguard-{}", uid)),
        _ => std::env::temp_dir().join("rocmguard"),
    }
}

/// The file for `pid` in `dir`.
pub fn path_in(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{}{}", pid, SUFFIX))
}

/// Writes `pid`'s stats to [`dir`], creating it if needed.
pub fn publish(pid: u32, command: &str, devices: &[(i32, Stats)]) -> io::Result<()> {
    publish_in(&dir(), pid, command, devices)
}

/// Writes `pid`'s stats to `dir`, atomically (temporary file, then rename).
pub fn publish_in(dir: &Path, pid: u32, command: &str, devices: &[(i32, Stats)]) -> io::Result<()> {
    ensure_dir(dir)?;
    let record = Record {
        pid,
        start: start_time(pid).unwrap_or(0),
        updated_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        command: command.to_string(),
        devices: devices.to_vec(),
    };
    let tmp = dir.join(format!(".{}.tmp", pid));
    fs::write(&tmp, record.render())?;
    fs::rename(&tmp, path_in(dir, pid))
}

/// Deletes `pid`'s file from [`dir`] (at exit); a missing file is fine.
pub fn remove(pid: u32) -> io::Result<()> {
    remove_in(&dir(), pid)
}

pub fn remove_in(dir: &Path, pid: u32) -> io::Result<()> {
    match fs::remove_file(path_in(dir, pid)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The living guarded processes in [`dir`], by pid.
pub fn list() -> Vec<Record> {
    list_in(&dir())
}

/// The living guarded processes in `dir`, by pid. Files of dead processes (or of an earlier
/// process with the same pid) are deleted; unreadable ones are skipped.
pub fn list_in(dir: &Path) -> Vec<Record> {
    let mut records: Vec<Record> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let pid = name.strip_suffix(SUFFIX)?.parse().ok()?;
                    read_in(dir, pid)
                })
                .collect()
        })
        .unwrap_or_default();
    records.sort_by_key(|r| r.pid);
    records
}

/// `pid`'s record in `dir` if that process is alive; a stale file is deleted.
pub fn read_in(dir: &Path, pid: u32) -> Option<Record> {
    let path = path_in(dir, pid);
    let record = Record::parse(&fs::read_to_string(&path).ok()?).ok()?;
    if record.pid == pid && is_same_process(pid, record.start) {
        Some(record)
    } else {
        // Best effort: another reader may have deleted it first.
        let _ = fs::remove_file(&path);
        None
    }
}

/// Whether `pid` runs and (where both are known) started at `start`. A zombie counts as gone.
/// Without `/proc` (not Linux) every pid counts as alive: there is no std way to ask.
pub fn is_same_process(pid: u32, start: u64) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    match read_stat(pid) {
        None => false,
        Some((state, started)) => state != 'Z' && (start == 0 || started == start),
    }
}

/// The start time of `pid` in clock ticks after boot, from `/proc/<pid>/stat`.
pub fn start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|(_, start)| start)
}

/// State and start time from `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn read_stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{}/stat", pid)).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state); starttime is field 22.
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

fn ensure_dir(dir: &Path) -> io::Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        create_private_dir(dir)?;
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::Other,
            format!("{} is not a directory", dir.display()),
        ));
    }
    check_owner(dir, &meta)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        // Another process of the same user may have created it in the meantime.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

#[cfg(unix)]
fn check_owner(dir: &Path, meta: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match current_uid() {
        Some(uid) if meta.uid() != uid => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to this user (uid {}): set {} to a directory of yours",
                dir.display(),
                meta.uid(),
                uid,
                DIR_VAR
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(not(unix))]
fn check_owner(_dir: &Path, _meta: &fs::Metadata) -> io::Result<()> {
    Ok(())
}

/// This process's effective uid: `/proc/self` belongs to it.
/// This process's user, from `/proc/self` (no FFI in the core).
#[cfg(unix)]
pub fn current_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(not(unix))]
pub fn current_uid() -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rocmguard-live-{}-{}", tag, std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn sample() -> Vec<(i32, Stats)> {
        let mut s = Stats {
            live: 3 << 30,
            peak_live: 4 << 30,
            reserved: 5 << 30,
            cap: 20 << 30,
            allocs: 1234,
            ooms: 1,
            ..Stats::default()
        };
        s.largest_free = 1 << 29;
        vec![(0, s), (1, Stats::default())]
    }

    #[test]
    fn render_and_parse_agree() {
        let r = Record {
            pid: 42,
            start: 99,
            updated_ms: 1_700_000_000_000,
            command: "python train.py\n--evil".to_string(),
            devices: sample(),
        };
        let text = r.render();
        assert!(
            text.contains("command python train.py --evil\n"),
            "{}",
            text
        );
        let back = Record::parse(&text).unwrap();
        assert_eq!(back.devices, r.devices);
        assert_eq!(
            (back.pid, back.start, back.updated_ms),
            (42, 99, 1_700_000_000_000)
        );
        let extended = text.replace("ooms=1", "ooms=1 future_field=7") + "future_line x\n";
        assert_eq!(Record::parse(&extended).unwrap().devices, r.devices);
        assert!(Record::parse("something else\npid 1\n").is_err());
        assert!(Record::parse("rocmguard-live 1\npid x\n").is_err());
    }

    #[test]
    fn directory_order() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            dir_from(os("/x"), os("/run/user/1000"), Some(1000)),
            PathBuf::from("/x")
        );
        assert_eq!(
            dir_from(None, os("/run/user/1000"), Some(1000)),
            PathBuf::from("/run/user/1000/rocmguard")
        );
        let shared = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm/rocmguard-1000")
        } else {
            std::env::temp_dir().join("rocmguard")
        };
        assert_eq!(dir_from(os(""), None, Some(1000)), shared);
        assert_eq!(
            dir_from(None, None, None),
            std::env::temp_dir().join("rocmguard")
        );
    }

    #[test]
    fn publish_list_and_forget() {
        let dir = scratch("publish");
        let me = std::process::id();
        publish_in(&dir, me, "cargo test", &sample()).unwrap();
        publish_in(&dir, me, "cargo test", &sample()).unwrap();
        let all = list_in(&dir);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].pid, me);
        assert_eq!(all[0].devices, sample());
        if Path::new("/proc/self/stat").exists() {
            assert!(all[0].start > 0, "the start time comes from /proc");
        }
        assert!(all[0].age_secs(SystemTime::now()) < 60.0);
        assert!(!dir.join(format!(".{}.tmp", me)).exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }

        // Same pid, another start time: a stale file of an earlier process.
        let mut stale = Record::parse(&fs::read_to_string(path_in(&dir, me)).unwrap()).unwrap();
        stale.start += 1;
        fs::write(path_in(&dir, me), stale.render()).unwrap();
        assert!(list_in(&dir).is_empty());
        assert!(!path_in(&dir, me).exists(), "stale files are deleted");

        publish_in(&dir, me, "cargo test", &sample()).unwrap();
        remove_in(&dir, me).unwrap();
        remove_in(&dir, me).unwrap();
        assert!(list_in(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[cfg(unix)]
    fn refuses_a_symlinked_directory() {
        let dir = scratch("symlink");
        fs::create_dir_all(&dir).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = publish_in(&link, std::process::id(), "x", &[]).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{}", err);
        fs::remove_dir_all(&dir).unwrap();
    }
}
