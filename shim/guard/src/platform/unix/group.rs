//! `ROCMGUARD_GROUP`: processes of one user that name the same group share one cap per device.
//!
//! The group is a directory private to the user (`rocmguard_core::group::dir`; 0700, owned by
//! the user, never through a link) holding one file per process, named by its pid, with the
//! device memory it holds (`rocmguard_core::group::render`). Each process holds an exclusive `flock` on its
//! own file for its whole life. The kernel drops that lock when the process dies, however it
//! dies (SIGKILL included), so a file whose lock another process can take belongs to a dead
//! process: its share is not counted, and the file is removed. Reserving takes the directory's
//! `lock` file for the few microseconds of summing the others and rewriting our own file. No
//! lock lives in shared memory, so a process killed while holding one cannot deadlock the
//! others (HAMi-core's failure), no counter is shared, so none can underflow, and nothing is
//! trusted from a file that is not a regular 0600 file of this user in the expected format.
//!
//! The group is consulted only when the pool asks the device for memory (a new segment or a
//! mapped piece), never on a pooled allocation.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use once_cell::sync::OnceCell;

use crate::log;

use rocmguard_core::group::{self as files, MAX_DEVICES};

/// This process's membership: its locked file and what it holds per device.
struct Member {
    /// The process that joined: a child forked without exec is not a member (it would write
    /// its parent's file); after an exec it joins on its own.
    pid: i32,
    dir: PathBuf,
    lock: File,
    mine: File,
    held: Mutex<Vec<u64>>,
}

static MEMBER: OnceCell<Option<Member>> = OnceCell::new();

/// The group this process belongs to, joined at first use; `None` without `ROCMGUARD_GROUP` or
/// when the group's directory cannot be trusted (said once: the process then has its own cap).
fn member() -> Option<&'static Member> {
    MEMBER
        .get_or_init(|| {
            let name = crate::config()?.group.clone()?;
            match join(&name) {
                Ok(m) => {
                    log::info(format_args!("group {}: sharing the cap through {}", name, m.dir.display()));
                    Some(m)
                }
                Err(e) => {
                    log::error(format_args!(
                        "ROCMGUARD_GROUP={}: {}; this process keeps its own cap instead of the group's",
                        name, e
                    ));
                    None
                }
            }
        })
        .as_ref()
        // SAFETY: getpid has no preconditions.
        .filter(|m| m.pid == unsafe { libc::getpid() })
}

fn join(name: &str) -> Result<Member, String> {
    // SAFETY: getuid and getpid have no preconditions.
    let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
    let dir = files::dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid, name);
    let base = dir.parent().unwrap_or(&dir).to_path_buf();
    for d in [&base, &dir] {
        private_dir_made(d)?;
    }
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| format!("cannot open {}: {}", path.display(), e))
    };
    let lock = open(&dir.join("lock"))?;
    private_file(&lock, uid).map_err(|e| format!("{}: {}", dir.join("lock").display(), e))?;
    // Our file is made, locked and first written under the group's lock: a member counting
    // the others in between would find it empty (and refuse it) or unlocked (and remove it as
    // a dead member's).
    // An error below returns and closes the lock file, which lets go of the group's lock (a
    // flock goes with the open file).
    let locked = flock(&lock, libc::LOCK_EX);
    let mine_path = dir.join(pid.to_string());
    let mine = open(&mine_path)?;
    private_file(&mine, uid).map_err(|e| format!("{}: {}", mine_path.display(), e))?;
    if !flock(&mine, libc::LOCK_EX | libc::LOCK_NB) {
        return Err(format!(
            "{} is locked by another process",
            mine_path.display()
        ));
    }
    let member = Member {
        pid,
        dir,
        lock,
        mine,
        held: Mutex::new(vec![0; MAX_DEVICES]),
    };
    member.write_mine(&[]);
    if locked {
        flock(&member.lock, libc::LOCK_UN);
    }
    Ok(member)
}

/// Makes `d` (mode 0700) if it is not there and checks that it is ours alone.
pub fn private_dir_made(d: &Path) -> Result<(), String> {
    let _ = std::fs::DirBuilder::new().mode(0o700).create(d);
    // SAFETY: getuid has no preconditions.
    private_dir(d, unsafe { libc::getuid() })
}

/// A directory of ours alone: not a link, owned by `uid`, no access for anyone else.
fn private_dir(d: &Path, uid: u32) -> Result<(), String> {
    let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {}", d.display(), e))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a private directory of this user (a link, another owner, or mode {:o}); remove it",
            d.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// A regular file of `uid` that no one else may read or write.
fn private_file(f: &File, uid: u32) -> Result<(), String> {
    let m = f.metadata().map_err(|e| e.to_string())?;
    if !m.is_file() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(format!(
            "not a private file of this user (owner {}, mode {:o})",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

fn flock(f: &File, op: i32) -> bool {
    // SAFETY: a valid open descriptor.
    unsafe { libc::flock(f.as_raw_fd(), op) == 0 }
}

/// Why a file was refused, said once per process.
static REFUSED_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Member {
    fn write_mine(&self, held: &[u64]) {
        let text = files::render(held);
        // Written under the group's lock only, so no reader sees it half written.
        let mut f = &self.mine;
        let _ = f.set_len(0);
        // SAFETY: a valid descriptor; back to the start after the truncate above.
        let _ = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_SET) };
        let _ = f.write_all(text.as_bytes());
    }

    /// What the other live members hold on `device`. Files of dead members are removed; files
    /// that are not ours to trust are refused (said once) and not counted.
    fn others(&self, device: usize) -> u64 {
        // SAFETY: getuid and getpid have no preconditions.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut total = 0u64;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(other) = std::str::from_utf8(name.as_bytes())
                .ok()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if other == pid {
                continue;
            }
            let path = entry.path();
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(&path);
            let Ok(mut file) = file else { continue };
            if let Err(e) = private_file(&file, uid) {
                self.refuse(&path, &e);
                continue;
            }
            if flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
                // Nobody holds it: its process is gone, and so is its share.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let mut text = String::new();
            if file.read_to_string(&mut text).is_err() {
                continue;
            }
            match files::parse(&text) {
                Ok(held) => total = total.saturating_add(files::on(&held, device)),
                Err(why) => self.refuse(&path, why),
            }
        }
        total
    }

    fn refuse(&self, path: &Path, why: &str) {
        if !REFUSED_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            log::error(format_args!(
                "group file {} refused ({}): its share is not counted; remove it",
                path.display(),
                why
            ));
        }
    }

    /// Runs `f` on what we hold with the group's lock taken, then rewrites our file.
    fn locked<T>(&self, f: impl FnOnce(&mut Vec<u64>) -> T) -> T {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let locked = flock(&self.lock, libc::LOCK_EX);
        let result = f(&mut held);
        self.write_mine(&held);
        if locked {
            flock(&self.lock, libc::LOCK_UN);
        }
        result
    }
}

/// Takes `bytes` of the group's `cap` on `device` for this process; `false` when the group's
/// members together would pass it. Always `true` outside a group.
pub fn reserve(device: i32, bytes: u64, cap: u64) -> bool {
    let Some(m) = member() else { return true };
    let d = (device as usize).min(MAX_DEVICES - 1);
    m.locked(|held| {
        let others = m.others(d);
        let fits = others.saturating_add(held[d]).saturating_add(bytes) <= cap;
        if fits {
            held[d] += bytes;
        }
        fits
    })
}

/// Gives back `bytes` this process held on `device`.
pub fn release(device: i32, bytes: u64) {
    if let Some(m) = member() {
        let d = (device as usize).min(MAX_DEVICES - 1);
        m.locked(|held| held[d] = held[d].saturating_sub(bytes));
    }
}

/// What the group's other live members hold on `device` (0 outside a group).
pub fn others_use(device: i32) -> u64 {
    match member() {
        Some(m) => m.locked(|_| m.others((device as usize).min(MAX_DEVICES - 1))),
        None => 0,
    }
}
