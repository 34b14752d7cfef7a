//! Shared helpers of the test suite: where the built artifacts are, compiling the C test
//! programs, and running real processes under the preloaded shim and the simulated runtime.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `target/release`, where `cargo build --release` put the libraries and the CLI.
pub fn release_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("release");
    assert!(
        dir.join("librocmguard.so").exists(),
        "{} has no librocmguard.so: run `cargo build --release` first (scripts/test.sh does)",
        dir.display()
    );
    dir
}

pub fn shim_lib() -> PathBuf {
    release_dir().join("librocmguard.so")
}

pub fn cli() -> PathBuf {
    release_dir().join("rocmguard")
}

/// A folder holding the simulated runtime under the sonames programs look for
/// (`libamdhip64.so.6`, `librocblas.so.4`), for `LD_LIBRARY_PATH`.
pub fn sim_lib_dir() -> PathBuf {
    let release = release_dir();
    let dir = release.join("hipsim-lib");
    std::fs::create_dir_all(&dir).unwrap();
    for (file, names) in [
        (
            "libamdhip64.so",
            &["libamdhip64.so", "libamdhip64.so.6"][..],
        ),
        ("librocblas.so", &["librocblas.so", "librocblas.so.4"][..]),
    ] {
        // Without this, a program linked against the link fails to load and a test reads only
        // its exit status.
        assert!(
            release.join(file).exists(),
            "{} has no {} (the simulated runtime): run `cargo build --release` for the whole \
             workspace first (scripts/test.sh does)",
            release.display(),
            file
        );
        for name in names {
            let link = dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                // Another test may create it at the same moment; either link is the same.
                let _ = std::os::unix::fs::symlink(release.join(file), &link);
            }
        }
    }
    dir
}

/// Compiles C sources from `tests/c` into an executable linked against the simulated runtime.
/// `extra` adds compiler arguments (`-lrocblas`, `-ldl`, `-pthread`, ...).
pub fn compile_c(name: &str, sources: &[&str], extra: &[&str]) -> PathBuf {
    let out_dir = release_dir().join("c-tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let c_dir = root().join("tests/c");
    let libs = sim_lib_dir();
    let mut cmd = Command::new("cc");
    cmd.args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(&c_dir);
    for s in sources {
        cmd.arg(c_dir.join(s));
    }
    cmd.arg("-L").arg(&libs).args(extra);
    let out = cmd.output().expect("cc runs");
    assert!(
        out.status.success(),
        "cc {:?} failed:\n{}",
        sources,
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A command for `exe` on the simulated runtime, without the shim, with no `ROCMGUARD_*` or
/// `HIPSIM_*` variable inherited from the caller.
pub fn sim_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("ROCMGUARD_") || k.starts_with("HIPSIM_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd.env("LD_LIBRARY_PATH", sim_lib_dir());
    cmd
}

/// The same with `librocmguard.so` preloaded.
pub fn guarded_command(exe: &Path) -> Command {
    let mut cmd = sim_command(exe);
    cmd.env("LD_PRELOAD", shim_lib());
    cmd
}

/// Runs and returns the output, panicking with both streams if it could not start.
pub fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{:?}: {}", cmd, e))
}

/// Stdout and stderr as text, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh, empty directory for one test under `target/release/test-scratch`.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = release_dir()
        .join("test-scratch")
        .join(format!("{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fake machine for `rocmguard doctor --sysroot` (`tests/fixtures/sysroot/<name>`).
pub fn sysroot(name: &str) -> PathBuf {
    root().join("tests/fixtures/sysroot").join(name)
}

/// The `rocmguard` CLI with none of the caller's variables that change what it does or finds
/// (`ROCMGUARD_*`, `HSA_*`, `HIP_*`, `PYTORCH_*`, `HIPSIM_*`, `LD_PRELOAD`, `LD_LIBRARY_PATH`).
pub fn cli_command() -> Command {
    let mut cmd = Command::new(cli());
    for (k, _) in std::env::vars() {
        let cleared = ["ROCMGUARD_", "HSA_", "HIP_", "PYTORCH_", "HIPSIM_", "AMD_"]
            .iter()
            .any(|p| k.starts_with(p));
        if cleared || k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH" || k == "XDG_CONFIG_HOME" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `rocmguard doctor --json` on a fake machine (`tests/fixtures/sysroot/TREE`), with the
/// simulated runtime on the loader path (so the libraries line does not depend on this machine)
/// and extra variables.
pub fn doctor_cmd(tree: &str, vars: &[(&str, &str)]) -> Command {
    let mut cmd = cli_command();
    cmd.args([
        "doctor",
        "--json",
        "--no-python",
        "--no-self-test",
        "--sysroot",
    ])
    .arg(sysroot(tree))
    .env("LD_LIBRARY_PATH", sim_lib_dir());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

/// A finished run's output with its stdout's `key value` lines, for test programs that print
/// what they saw that way.
pub struct Seen {
    pub out: Output,
    pub values: std::collections::HashMap<String, String>,
}

impl Seen {
    pub fn new(out: Output) -> Seen {
        let values = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        Seen { out, values }
    }

    pub fn num(&self, key: &str) -> i64 {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("no `{}` in the output:\n{}", key, text(&self.out)))
            .parse()
            .unwrap()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    pub fn succeeded(&self) -> &Self {
        assert!(self.out.status.success(), "{}", text(&self.out));
        self
    }
}

/// The trace corpus of `dir` (`data/traces` or another copy): each trace's name and half (TUNE:
/// the pool's constants may be chosen on it; REPORT: it only reports), from its `corpus.tsv`.
pub fn corpus_in(dir: &Path) -> Vec<(String, String)> {
    let list = std::fs::read_to_string(dir.join("corpus.tsv"))
        .unwrap_or_else(|e| panic!("{}: {}", dir.join("corpus.tsv").display(), e));
    list.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cols = l.split('\t');
            let name = cols.next().expect("a trace name").to_string();
            let half = cols.next().unwrap_or_else(|| panic!("{}: no half", name));
            (name, half.to_string())
        })
        .collect()
}

/// Column `column` of dev0's row in the exit stats table (`ROCMGUARD_STATS=1`) in `stderr`,
/// found by its header, so a column added to the table moves no reader.
pub fn exit_table_column(stderr: &str, column: &str) -> u64 {
    let mut lines = stderr.lines().skip_while(|l| !l.starts_with("device "));
    let header: Vec<&str> = lines
        .next()
        .expect("a stats table at exit")
        .split_whitespace()
        .collect();
    let row = lines.next().expect("a dev0 row");
    let i = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no column `{}` in {:?}", column, header));
    // Sizes take two words ("1.00 GiB"); counts one. Counts sit at the end of the row.
    let words: Vec<&str> = row.split_whitespace().collect();
    words[words.len() - (header.len() - i)].parse().unwrap()
}

/// The median of `sorted` (ascending, not empty): the corpus summaries' figure per half.
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}
