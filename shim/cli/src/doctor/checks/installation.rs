//! Is the guard built, and can programs find ROCm's libraries: the first lines of the report.

use crate::doctor::libs::Via;
use crate::doctor::probe;
use crate::doctor::{Check, Context, Status};
use crate::run::LIB_NAME;

pub(super) fn shim(ctx: &Context) -> Check {
    match &ctx.lib {
        Ok(path) => Check::new(
            "rocmguard",
            LIB_NAME,
            Status::Ok,
            path.display().to_string(),
        ),
        Err(e) => Check::new("rocmguard", LIB_NAME, Status::Fail, e.clone()).fix(
            "build it with `cargo build --release`, or set ROCMGUARD_LIB=/path/to/librocmguard.so",
        ),
    }
}

pub(super) fn libraries(ctx: &Context) -> Vec<Check> {
    let has_gpu = !ctx.machine.gpus.is_empty();
    let rows: [(&str, &str, &[&str], &str); 4] = [
        (
            "hip-runtime",
            "HIP runtime",
            probe::RUNTIME_NAMES,
            "install ROCm (https://rocm.docs.amd.com) or a PyTorch ROCm wheel, which bundles its own in torch/lib; without AMD hardware, `rocmguard run --sim -- CMD` runs a program on rocmguard's simulator",
        ),
        (
            "rocblas",
            "rocBLAS",
            &["librocblas.so", "librocblas.so.5", "librocblas.so.4", "librocblas.so.3"],
            "PyTorch's ROCm wheels bundle their own; programs built against ROCm need the rocblas package",
        ),
        (
            "hipblaslt",
            "hipBLASLt",
            &["libhipblaslt.so", "libhipblaslt.so.1", "libhipblaslt.so.0"],
            "PyTorch's ROCm wheels bundle their own; programs built against ROCm need the hipblaslt package",
        ),
        (
            "miopen",
            "MIOpen",
            &["libMIOpen.so", "libMIOpen.so.1"],
            "PyTorch's ROCm wheels bundle their own; programs built against ROCm need the miopen-hip package",
        ),
    ];
    rows.iter()
        .map(|(id, title, names, install)| match ctx.search.find(names) {
            Some(f) => {
                let mut detail = f.path.display().to_string();
                if let Some(t) = &f.target {
                    detail.push_str(&format!(" -> {}", t.display()));
                }
                if let Some(v) = f.version() {
                    detail.push_str(&format!(" (version {})", v));
                }
                detail.push_str(&format!(", {}", f.via.describe()));
                if *id == "hip-runtime" && probe::is_simulator_file(&f.path) {
                    detail.push_str("; this is hipsim, rocmguard's simulator, not a ROCm runtime");
                }
                if f.via == Via::RocmDirOnly {
                    let dir = f.path.parent().map(|d| d.display().to_string()).unwrap_or_default();
                    Check::new(id, title, Status::Warn, detail).fix(format!(
                        "programs will not find it: add {} to /etc/ld.so.conf.d/rocm.conf and run ldconfig, or to LD_LIBRARY_PATH",
                        dir
                    ))
                } else {
                    Check::new(id, title, Status::Ok, detail)
                }
            }
            None => {
                let status = if *id == "hip-runtime" && has_gpu {
                    Status::Fail
                } else {
                    Status::Warn
                };
                Check::new(id, title, status, format!("not found (searched {})", ctx.search.describe()))
                    .fix(*install)
            }
        })
        .collect()
}
