//! Which PyTorch the user's Python imports, asked in a child process with a time limit.

use std::ffi::OsStr;
use std::process::Command;
use std::time::Duration;

use crate::doctor::{run_with_timeout, Check, Context, Status};

/// Time for `import torch`, which reads a few hundred MiB of libraries on a cold cache.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(20);

/// Asks `python` which PyTorch it has: its version, its HIP version (None for CUDA and CPU
/// builds) and where its libraries are.
pub fn pytorch(ctx: &Context, python: &OsStr) -> Check {
    let id = "pytorch";
    let title = "PyTorch";
    let script = "import os, torch\nprint(torch.__version__)\nprint(torch.version.hip)\nprint(os.path.join(os.path.dirname(torch.__file__), 'lib'))";
    let shown = python.to_string_lossy();
    let outcome = match run_with_timeout(Command::new(python).arg("-c").arg(script), PYTHON_TIMEOUT)
    {
        Ok(o) => o,
        Err(e) => {
            return Check::new(
                id,
                title,
                Status::Skip,
                format!("cannot run {}: {}", shown, e),
            )
            .fix("pass --python /path/to/your/venv/bin/python")
        }
    };
    let status = match outcome.status {
        Some(s) => s,
        None => {
            return Check::new(
                id,
                title,
                Status::Warn,
                format!(
                    "`import torch` in {} took over {} s",
                    shown,
                    PYTHON_TIMEOUT.as_secs()
                ),
            )
            .fix("a slow disk or a network file system? try again, or check with --python")
        }
    };
    if !status.success() {
        let last = outcome.stderr.lines().last().unwrap_or("").to_string();
        if last.contains("No module named 'torch'") {
            return Check::new(
                id,
                title,
                Status::Skip,
                format!("not installed for {}", shown),
            )
            .fix(
                "activate the environment you train in, or pass --python /path/to/venv/bin/python",
            );
        }
        return Check::new(
            id,
            title,
            Status::Warn,
            format!("`import torch` failed in {}: {}", shown, last),
        );
    }
    let lines: Vec<&str> = outcome.stdout.lines().collect();
    let version = lines.first().copied().unwrap_or("?");
    let hip = lines.get(1).copied().unwrap_or("None");
    let lib_dir = lines.get(2).copied().unwrap_or("");
    if hip == "None" {
        let kind = if version.contains("+cu") {
            "a CUDA build"
        } else {
            "a CPU-only build"
        };
        let status = if ctx.machine.gpus.is_empty() {
            Status::Warn
        } else {
            Status::Fail
        };
        return Check::new(
            id,
            title,
            status,
            format!("{} in {} is {}: it cannot use AMD GPUs", version, shown, kind),
        )
        .fix("install a ROCm build: pip install torch --index-url https://download.pytorch.org/whl/rocm6.4 (match your ROCm)");
    }
    let bundled = std::path::Path::new(lib_dir).join("libamdhip64.so");
    let mut detail = format!("{} (HIP {}) in {}", version, hip, shown);
    if bundled.exists() {
        detail.push_str(&format!(
            "; it loads its own HIP runtime, {}, not the system's",
            bundled.display()
        ));
    }
    Check::new(id, title, Status::Ok, detail)
}
