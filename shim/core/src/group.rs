//! The files behind `ROCMGUARD_GROUP`, pure: where a group lives and what a member's file says.
//! The preload library writes and locks them (`preload/src/group.rs`); `rocmguard stats` reads
//! them to show who holds what.
//!
//! A member's file is `rocmguard-group 1`, one `DEVICE BYTES` line per device it holds memory
//! on, then `end TOTAL`: a file cut short, or changed by hand, is told from one written whole.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MAGIC: &str = "rocmguard-group 1";

/// Devices a member's file may name: more is not a file we wrote.
pub const MAX_DEVICES: usize = 64;

/// The directory of group `name`: `$XDG_RUNTIME_DIR/rocmguard/group-NAME`, else
/// `/tmp/rocmguard-UID/group-NAME` (the user's runtime directory is private and on tmpfs).
pub fn dir(xdg_runtime_dir: Option<&OsStr>, uid: u32, name: &str) -> PathBuf {
    base_dir(xdg_runtime_dir, uid).join(format!("{}{}", PREFIX, name))
}

/// Where every group of this user lives.
pub fn base_dir(xdg_runtime_dir: Option<&OsStr>, uid: u32) -> PathBuf {
    match xdg_runtime_dir.filter(|d| !d.is_empty()) {
        Some(d) => Path::new(d).join("rocmguard"),
        None => PathBuf::from(format!("/tmp/rocmguard-{}", uid)),
    }
}

/// The name of the group in `dir_name`, a directory of [`base_dir`].
pub fn name_of(dir_name: &str) -> Option<&str> {
    dir_name.strip_prefix(PREFIX).filter(|n| !n.is_empty())
}

const PREFIX: &str = "group-";

/// A member's file holding `held[device]` bytes per device.
pub fn render(held: &[u64]) -> String {
    let mut text = String::from(MAGIC);
    let mut total = 0u64;
    for (device, bytes) in held.iter().enumerate().filter(|(_, b)| **b > 0) {
        let _ = write!(text, "\n{} {}", device, bytes);
        total = total.saturating_add(*bytes);
    }
    let _ = writeln!(text, "\nend {}", total);
    text
}

/// What a member's file says it holds, as `(device, bytes)`; `Err` says why it is not a file
/// written whole by [`render`].
pub fn parse(text: &str) -> Result<Vec<(usize, u64)>, &'static str> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err("not in rocmguard's group format");
    }
    if !text.ends_with('\n') {
        return Err("truncated");
    }
    let mut held = Vec::new();
    let mut sum = 0u64;
    for line in lines {
        let mut words = line.split(' ');
        let (first, second) = match (words.next(), words.next(), words.next()) {
            (Some(a), Some(b), None) => (a, b),
            _ => return Err("not in rocmguard's group format"),
        };
        let number = second
            .parse::<u64>()
            .map_err(|_| "not in rocmguard's group format")?;
        if first == "end" {
            return if number == sum {
                Ok(held)
            } else {
                Err("its total does not match its lines")
            };
        }
        let device = first
            .parse::<usize>()
            .ok()
            .filter(|d| *d < MAX_DEVICES)
            .ok_or("not in rocmguard's group format")?;
        sum = sum.saturating_add(number);
        held.push((device, number));
    }
    Err("truncated")
}

/// Bytes `held` names on `device`.
pub fn on(held: &[(usize, u64)], device: usize) -> u64 {
    held.iter()
        .filter(|(d, _)| *d == device)
        .fold(0, |t, (_, b)| t.saturating_add(*b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_file_reads_back() {
        let text = render(&[1024, 0, 0, 5]);
        assert_eq!(text, "rocmguard-group 1\n0 1024\n3 5\nend 1029\n");
        assert_eq!(parse(&text), Ok(vec![(0, 1024), (3, 5)]));
        assert_eq!(parse(&render(&[])), Ok(vec![]));
        assert_eq!(on(&[(0, 1), (3, 5), (0, 2)], 0), 3);
    }

    #[test]
    fn only_a_file_written_whole_is_believed() {
        let good = render(&[1 << 31]);
        for cut in 0..good.len() {
            assert!(
                parse(&good[..cut]).is_err(),
                "cut at {}: {:?}",
                cut,
                &good[..cut]
            );
        }
        let changed = good.replacen("2147483648", "2147483649", 1);
        assert_eq!(parse(&changed), Err("its total does not match its lines"));
        assert!(parse("rocmguard-group 2\n0 1\nend 1\n").is_err());
        assert!(parse("rocmguard-group 1\n0 -1\nend 0\n").is_err());
        assert!(parse("rocmguard-group 1\n99 1\nend 1\n").is_err());
        assert!(parse("rocmguard-group 1\n0 1 2\nend 1\n").is_err());
        assert!(parse("\u{0}\u{1}binary").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn the_directory_is_the_users_runtime_dir_else_tmp() {
        let xdg = OsStr::new("/run/user/7");
        assert_eq!(
            dir(Some(xdg), 7, "desk"),
            Path::new("/run/user/7/rocmguard/group-desk")
        );
        assert_eq!(
            dir(Some(OsStr::new("")), 7, "desk"),
            Path::new("/tmp/rocmguard-7/group-desk")
        );
        assert_eq!(
            dir(None, 7, "desk"),
            Path::new("/tmp/rocmguard-7/group-desk")
        );
    }
}
