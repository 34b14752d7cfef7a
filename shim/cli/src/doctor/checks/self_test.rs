//! The self-test: the probe (`rocmguard doctor-probe`) run under the shim, judged, and rerun
//! without it when it fails so the report can say whose fault it is.

use std::ffi::OsStr;
use std::process::Command;
use std::time::Duration;

use rocmguard_core::format_size;

use super::config;
use crate::doctor::probe::{self, Report, PROBE_BYTES};
use crate::doctor::{run_with_timeout, Check, Context, Status};
use crate::run::{other_preloads, preload_value, LIB_NAME};

/// Time for the self-test; the first HIP call initializes every GPU.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the probe under the shim and judges what it saw.
pub fn self_test(ctx: &Context) -> Check {
    let id = "self-test";
    let title = "Self-test";
    let lib = match &ctx.lib {
        Ok(lib) => lib,
        Err(_) => return Check::new(id, title, Status::Skip, format!("no {} to test", LIB_NAME)),
    };
    let preload = preload_value(lib, std::env::var_os("LD_PRELOAD").as_deref());
    let guarded = run_probe(Some(&preload));
    let (status, detail, fix) = judge(ctx, &guarded);
    let mut detail = detail;
    if status == Status::Fail {
        // Would it work without the guard? Then the guard is at fault, else the machine.
        let plain = other_preloads(std::env::var_os("LD_PRELOAD").as_deref()).join(":");
        match run_probe(Some(OsStr::new(&plain))) {
            Ok(r) if r.malloc == Some(0) => detail.push_str(
                " -- without rocmguard the same probe passes: a rocmguard problem, please report it with the ROCMGUARD_LOG=debug output",
            ),
            _ => detail.push_str(" -- it fails without rocmguard too: the runtime or the driver is at fault"),
        }
    }
    let check = Check::new(id, title, status, detail);
    match fix {
        Some(f) => check.fix(f),
        None => check,
    }
}

fn run_probe(preload: Option<&OsStr>) -> Result<Report, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {}", e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("doctor-probe");
    match preload {
        Some(p) if !p.is_empty() => cmd.env("LD_PRELOAD", p),
        _ => cmd.env_remove("LD_PRELOAD"),
    };
    let outcome = run_with_timeout(&mut cmd, PROBE_TIMEOUT)
        .map_err(|e| format!("cannot run the probe: {}", e))?;
    let tail = || outcome.stderr.lines().last().unwrap_or("").to_string();
    match outcome.status {
        None => Err(format!("the probe hung for {} s", PROBE_TIMEOUT.as_secs())),
        Some(s) if !s.success() => {
            use std::os::unix::process::ExitStatusExt;
            let how = match s.signal() {
                Some(sig) => format!("died of signal {}", sig),
                None => format!("exited with {}", s.code().unwrap_or(-1)),
            };
            Err(format!("the probe {}: {}", how, tail()))
        }
        Some(_) => outcome
            .stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| format!("the probe printed no report: {}", tail())),
    }
}

fn judge(ctx: &Context, report: &Result<Report, String>) -> (Status, String, Option<String>) {
    let r = match report {
        Ok(r) => r,
        Err(e) => {
            return (
                Status::Fail,
                format!("{} with {} preloaded", e, LIB_NAME),
                None,
            )
        }
    };
    let runtime = match (&r.runtime, &r.runtime_path) {
        (Some(_), Some(path)) => path.clone(),
        (Some(name), None) => name.clone(),
        (None, _) => {
            return (
                Status::Skip,
                format!(
                    "no HIP runtime found ({})",
                    r.load_errors.first().map(String::as_str).unwrap_or("nothing loaded")
                ),
                Some("the self-test needs libamdhip64.so on the loader path; without AMD hardware, `rocmguard run --sim -- rocmguard doctor` runs it on rocmguard's simulator".to_string()),
            )
        }
    };
    let version = r
        .runtime_version
        .map(|v| format!(" (HIP {})", probe::format_hip_version(v)))
        .unwrap_or_default();
    let simulator = if r.simulator {
        " [hipsim, rocmguard's simulator: no GPU was tested]"
    } else {
        ""
    };
    let runtime = format!("{}{}{}", runtime, version, simulator);
    let guard = match (r.guard_active, &r.guard_version) {
        (None, _) => {
            return (
                Status::Fail,
                format!("{} did not load into a program using {}", LIB_NAME, runtime),
                Some("is LD_PRELOAD ignored (setuid program, or a wrong-architecture library)? run with LD_DEBUG=libs to see".to_string()),
            )
        }
        (Some(0), _) => {
            return (
                Status::Warn,
                format!("{} is loaded but passes every call through, over {}", LIB_NAME, runtime),
                Some("ROCMGUARD_DISABLE=1 is set, or the shim could not resolve the runtime: ROCMGUARD_LOG=debug says which".to_string()),
            )
        }
        (Some(_), v) => format!("rocmguard {} active", v.as_deref().unwrap_or("?")),
    };
    let gpus_in_sysfs = ctx.machine.gpus.len();
    if let Some((err, n)) = r.device_count {
        if err != 0 || n == 0 {
            let found = if err != 0 {
                format!(
                    "hipGetDeviceCount: error {} ({})",
                    err,
                    probe::error_name(err)
                )
            } else {
                "hipGetDeviceCount: 0".to_string()
            };
            let detail = format!(
                "{} over {}, but the runtime sees no GPU ({})",
                guard, runtime, found
            );
            return if gpus_in_sysfs > 0 {
                (
                    Status::Fail,
                    detail,
                    Some("sysfs lists GPUs: can this user open /dev/kfd and /dev/dri/renderD*? (groups render and video)".to_string()),
                )
            } else {
                (Status::Skip, detail, None)
            };
        }
    }
    let code =
        |what: &str, err: i32| format!("{}: error {} ({})", what, err, probe::error_name(err));
    if let Some((err, _, _)) = r.mem_info.filter(|m| m.0 != 0) {
        return (
            Status::Fail,
            format!("{} over {}; {}", guard, runtime, code("hipMemGetInfo", err)),
            None,
        );
    }
    match (r.malloc, r.free) {
        (Some(0), Some(0)) => {}
        (Some(0), Some(err)) => {
            return (
                Status::Fail,
                format!("{} over {}; {}", guard, runtime, code("hipFree", err)),
                None,
            )
        }
        (Some(err), _) => {
            return (
                Status::Fail,
                format!(
                    "{} over {}; {}",
                    guard,
                    runtime,
                    code(
                        &format!("hipMalloc({})", format_size(PROBE_BYTES as u64)),
                        err
                    )
                ),
                None,
            )
        }
        (None, _) => {
            return (
                Status::Fail,
                format!("{} over {}, which has no hipMalloc/hipFree", guard, runtime),
                None,
            )
        }
    }
    let memory = r
        .mem_info
        .map(|(_, free, total)| {
            format!(
                "hipMemGetInfo {} free of {}; ",
                format_size(free),
                format_size(total)
            )
        })
        .unwrap_or_default();
    let segments = if !config(ctx).vmm {
        "plain segments (ROCMGUARD_VMM=0)"
    } else if r.runtime_version.unwrap_or(0) < probe::FIRST_VIRTUAL_MEMORY_VERSION {
        "plain segments (virtual memory needs HIP 6.0 or later)"
    } else if r.virtual_memory.unwrap_or(0) == 0 {
        "plain segments (the device offers no virtual memory)"
    } else {
        "virtual segments (the device offers virtual memory)"
    };
    let detail = format!(
        "{} over {}: {}hipMalloc/hipFree of {} passed; {}",
        guard,
        runtime,
        memory,
        format_size(PROBE_BYTES as u64),
        segments
    );
    match &r.malloc_from {
        Some(file) if !file.contains(LIB_NAME) => (
            Status::Warn,
            format!("{}, but hipMalloc resolves to {}", detail, file),
            Some("allocations bypass the pool: is the runtime linked with -Bsymbolic, or loaded before the shim?".to_string()),
        ),
        _ => (Status::Ok, detail, None),
    }
}
