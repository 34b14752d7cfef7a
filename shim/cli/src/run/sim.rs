//! `rocmguard run --sim`: the command runs on hipsim, this project's simulated HIP runtime, laid
//! out as a ROCm install (`ROOT/lib/libamdhip64.so`) so that every way a program finds the
//! runtime reaches it: a link against the soname `libamdhip64.so.6`, `dlopen("libamdhip64.so")`
//! on `LD_LIBRARY_PATH` (hip-python), and `$ROCM_PATH/lib/libamdhip64.so` (rocm-bindings).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The simulator's file name, as the real runtime's.
const RUNTIME: &str = "libamdhip64.so";
/// Where an installed layout keeps the simulator (`PREFIX/lib/rocmguard-hipsim/lib/`).
const INSTALLED: &str = "../lib/rocmguard-hipsim";
/// The ROCm-like folder made beside a cargo build's `libamdhip64.so`.
const BUILT: &str = "hipsim";

/// The simulator's root (`ROOT/lib/libamdhip64.so`) for the CLI at `exe`: the installed one
/// (the wheel's), else a cargo build's `libamdhip64.so` beside the binary, given the ROCm
/// layout through a link it makes once (`target/release/hipsim/lib/libamdhip64.so`).
pub fn root(exe: &Path) -> Result<PathBuf> {
    let dir = exe.parent().unwrap_or_else(|| Path::new("/"));
    let installed = dir.join(INSTALLED);
    if installed.join("lib").join(RUNTIME).is_file() {
        return Ok(installed.canonicalize()?);
    }
    let built = dir.join(RUNTIME);
    if !built.is_file() {
        bail!(
            "--sim: no simulator: looked for {} and {}; build it with `cargo build --release` \
             (the workspace builds hipsim) or install the rocmguard wheel",
            installed.join("lib").join(RUNTIME).display(),
            built.display()
        );
    }
    let lib = dir.join(BUILT).join("lib");
    let link = lib.join(RUNTIME);
    if std::fs::symlink_metadata(&link).is_err() {
        std::fs::create_dir_all(&lib)
            .and_then(|()| std::os::unix::fs::symlink(Path::new("../..").join(RUNTIME), &link))
            // Another `--sim` may have made it at the same moment: the same link.
            .or_else(|e| if link.is_file() { Ok(()) } else { Err(e) })
            .with_context(|| format!("--sim: cannot make {}", link.display()))?;
    }
    Ok(dir.join(BUILT).canonicalize()?)
}

/// The runtime file of the simulator at `root`.
pub fn runtime(root: &Path) -> PathBuf {
    root.join("lib").join(RUNTIME)
}

/// The variables that point a program at the simulator at `root`: its folder first on
/// `LD_LIBRARY_PATH` (the caller's kept after it) and `ROCM_PATH`. The runtime is also
/// preloaded after the guard (see [`runtime`]), so a link against `libamdhip64.so.6` binds to it
/// by soname and every name the program opens it by is one library, one simulated device.
pub fn variables(root: &Path, library_path: Option<OsString>) -> Vec<(String, OsString)> {
    let mut path = root.join("lib").into_os_string();
    if let Some(old) = library_path.filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    vec![
        ("LD_LIBRARY_PATH".to_string(), path),
        ("ROCM_PATH".to_string(), root.as_os_str().to_os_string()),
    ]
}
