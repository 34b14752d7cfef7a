//! Which copy of a shared library a program would load, searched the way the dynamic loader
//! does for a program without RPATH: `LD_LIBRARY_PATH`, then the `ldconfig` cache, then the
//! default directories. ROCm installs under `/opt/rocm*/lib` are reported as well, because a
//! library found only there (not in the cache) is the classic half-finished install.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How a library was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    LdLibraryPath,
    LdCache,
    DefaultDir,
    /// In a ROCm install directory that the loader does not search.
    RocmDirOnly,
}

impl Via {
    pub fn describe(self) -> &'static str {
        match self {
            Via::LdLibraryPath => "via LD_LIBRARY_PATH",
            Via::LdCache => "via the ldconfig cache",
            Via::DefaultDir => "in a default directory",
            Via::RocmDirOnly => "only in a ROCm directory the loader does not search",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The path the loader would open (often a symlink).
    pub path: PathBuf,
    /// What it points to, when that differs.
    pub target: Option<PathBuf>,
    pub via: Via,
}

impl Found {
    /// The version in the resolved file name: `libamdhip64.so.6.2.60200` -> `6.2.60200`.
    pub fn version(&self) -> Option<String> {
        let file = self.target.as_ref().unwrap_or(&self.path);
        let name = file.file_name()?.to_string_lossy().into_owned();
        let (_, version) = name.split_once(".so.")?;
        Some(version.to_string())
    }
}

/// The places to search, gathered once per doctor run.
#[derive(Clone, Debug, Default)]
pub struct SearchPath {
    pub ld_library_path: Vec<PathBuf>,
    /// `ldconfig -p` entries for this architecture: (soname, path).
    pub cache: Vec<(String, PathBuf)>,
    /// Whether `ldconfig -p` could be run; without it only directories were searched.
    pub cache_read: bool,
    pub default_dirs: Vec<PathBuf>,
    pub rocm_dirs: Vec<PathBuf>,
}

impl SearchPath {
    /// This machine's search path, from `ld_library_path` (the variable's value).
    pub fn current(ld_library_path: Option<&str>) -> SearchPath {
        let cache_text = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .iter()
            .find_map(|exe| {
                let out = Command::new(exe).arg("-p").output().ok()?;
                if out.status.success() {
                    Some(String::from_utf8_lossy(&out.stdout).into_owned())
                } else {
                    None
                }
            });
        let mut rocm_dirs: Vec<PathBuf> = std::fs::read_dir("/opt")
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rocm"))
                    .map(|e| e.path().join("lib"))
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        // `/opt/rocm` (the current one) first, then the newest versioned install.
        rocm_dirs.sort_by(|a, b| b.cmp(a));
        rocm_dirs.sort_by_key(|d| d != Path::new("/opt/rocm/lib"));
        SearchPath {
            ld_library_path: ld_library_path
                .unwrap_or("")
                .split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect(),
            cache_read: cache_text.is_some(),
            cache: cache_text
                .as_deref()
                .map(parse_ldconfig)
                .unwrap_or_default(),
            default_dirs: ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
                .iter()
                .map(PathBuf::from)
                .collect(),
            rocm_dirs,
        }
    }

    /// The first of `names` (sonames in order of preference) the loader would find, or, failing
    /// that, one in a ROCm directory.
    pub fn find(&self, names: &[&str]) -> Option<Found> {
        let in_dirs = |dirs: &[PathBuf], via: Via| {
            names.iter().find_map(|name| {
                dirs.iter()
                    .map(|d| d.join(name))
                    .find(|p| p.exists())
                    .map(|path| found(path, via))
            })
        };
        in_dirs(&self.ld_library_path, Via::LdLibraryPath)
            .or_else(|| {
                names.iter().find_map(|name| {
                    self.cache
                        .iter()
                        .find(|(soname, _)| soname == name)
                        .map(|(_, path)| found(path.clone(), Via::LdCache))
                })
            })
            .or_else(|| in_dirs(&self.default_dirs, Via::DefaultDir))
            .or_else(|| in_dirs(&self.rocm_dirs, Via::RocmDirOnly))
    }

    /// Where `find` looked, for "not found" messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.ld_library_path.is_empty() {
            parts.push("LD_LIBRARY_PATH".to_string());
        }
        parts.push(if self.cache_read {
            "the ldconfig cache".to_string()
        } else {
            "no ldconfig cache (ldconfig -p failed)".to_string()
        });
        parts.push("/lib64, /usr/lib64, /lib, /usr/lib".to_string());
        if !self.rocm_dirs.is_empty() {
            parts.push(
                self.rocm_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        parts.join(", ")
    }
}

fn found(path: PathBuf, via: Via) -> Found {
    let target = path.canonicalize().ok().filter(|t| *t != path);
    Found { path, target, via }
}

/// `ldconfig -p` lines: `\tlibamdhip64.so.6 (libc6,x86-64) => /opt/rocm/lib/libamdhip64.so.6`.
/// Entries of other architectures (32-bit, foreign) are dropped.
pub fn parse_ldconfig(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let (soname, tags) = left.trim().split_once(" (")?;
            let native = if cfg!(target_arch = "x86_64") {
                tags.contains("x86-64")
            } else if cfg!(target_arch = "aarch64") {
                tags.contains("AArch64")
            } else {
                true
            };
            native.then(|| (soname.to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldconfig_output() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibamdhip64.so.6 (libc6,x86-64) => /opt/rocm/lib/libamdhip64.so.6\n\
            \tlibamdhip64.so.6 (libc6) => /usr/lib32/libamdhip64.so.6\n\
            \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
        let entries = parse_ldconfig(text);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[0].0, "libamdhip64.so.6");
            assert_eq!(
                entries[0].1,
                PathBuf::from("/opt/rocm/lib/libamdhip64.so.6")
            );
        }
        let search = SearchPath {
            cache: entries,
            ..SearchPath::default()
        };
        let f = search
            .find(&["libamdhip64.so.7", "libamdhip64.so.6"])
            .unwrap();
        assert_eq!(f.via, Via::LdCache);
        assert!(search.find(&["librocblas.so.4"]).is_none());
    }

    #[test]
    fn versions_from_file_names() {
        let f = Found {
            path: PathBuf::from("/x/libamdhip64.so.6"),
            target: Some(PathBuf::from("/x/libamdhip64.so.6.2.60200")),
            via: Via::LdCache,
        };
        assert_eq!(f.version().as_deref(), Some("6.2.60200"));
        let bare = Found {
            path: PathBuf::from("/x/libamdhip64.so"),
            target: None,
            via: Via::LdCache,
        };
        assert_eq!(bare.version(), None);
    }
}
