//! The doctor's checks, in the order they are printed: the guard and the ROCm libraries, the
//! driver and each GPU, memory, module parameters, the environment, PyTorch, the self-test.

use std::ffi::OsStr;
use std::process::Command;
use std::time::Duration;

use rocmguard_core::config::UmaMode;
use rocmguard_core::topology::{GfxVersion, Gpu, TTM_PAGE_SIZE};
use rocmguard_core::{format_size, Config, Limit};

use super::alloc_conf;
use super::libs::Via;
use super::probe::{self, Report, PROBE_BYTES};
use super::{run_with_timeout, Check, Context, Status};
use crate::run::{other_preloads, preload_value, LIB_NAME};

/// Time for `import torch`, which reads a few hundred MiB of libraries on a cold cache.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(20);
/// Time for the self-test; the first HIP call initializes every GPU.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Targets the official ROCm and PyTorch builds carry no kernels for, the override the field
/// uses for each, and the profile that sets it.
const FIELD_OVERRIDES: &[(&str, &str, &str)] = &[
    ("gfx1010", "10.3.0", "rdna1"),
    ("gfx1011", "10.3.0", "rdna1"),
    ("gfx1012", "10.3.0", "rdna1"),
    ("gfx1031", "10.3.0", "rdna2"),
    ("gfx1032", "10.3.0", "rdna2"),
    ("gfx1034", "10.3.0", "rdna2"),
    ("gfx1035", "10.3.0", "rdna2"),
    ("gfx1036", "10.3.0", "rdna2"),
    ("gfx1103", "11.0.0", ""),
];

/// The checks that need nothing but the context (PyTorch and the self-test run processes and
/// are added by the caller).
pub fn all(ctx: &Context) -> Vec<Check> {
    let mut out = vec![shim(ctx)];
    out.extend(libraries(ctx));
    out.push(driver(ctx));
    out.extend(gpus(ctx));
    out.push(params(ctx));
    out.push(ram(ctx));
    out.push(gfx_override(ctx));
    out.push(pytorch_alloc_conf(ctx));
    out.push(no_caching(ctx));
    out.push(caps(ctx));
    out.push(rocmguard_env(ctx));
    out.push(xnack(ctx));
    out
}

/// The guard's configuration as the environment sets it.
pub fn config(ctx: &Context) -> Config {
    Config::from_vars(ctx.env.iter()).0
}

fn shim(ctx: &Context) -> Check {
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

fn libraries(ctx: &Context) -> Vec<Check> {
    let has_gpu = !ctx.machine.gpus.is_empty();
    let rows: [(&str, &str, &[&str], &str); 4] = [
        (
            "hip-runtime",
            "HIP runtime",
            probe::RUNTIME_NAMES,
            "install ROCm (https://rocm.docs.amd.com) or a PyTorch ROCm wheel, which bundles its own in torch/lib; without AMD hardware, LD_LIBRARY_PATH=target/release/hipsim-lib uses rocmguard's simulator",
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

fn driver(ctx: &Context) -> Check {
    let m = &ctx.machine;
    let title = "amdgpu driver";
    if m.kfd {
        Check::new(
            "driver",
            title,
            Status::Ok,
            format!(
                "loaded; the KFD topology lists {} GPU{}",
                m.gpus.len(),
                if m.gpus.len() == 1 { "" } else { "s" }
            ),
        )
    } else if m.amdgpu_loaded {
        Check::new(
            "driver",
            title,
            Status::Fail,
            "amdgpu is loaded but there is no KFD topology (sys/class/kfd): ROCm cannot use the GPU",
        )
        .fix("use a kernel built with CONFIG_HSA_AMD (every distribution kernel is), or install amdgpu-dkms")
    } else {
        Check::new(
            "driver",
            title,
            Status::Skip,
            "no amdgpu driver and no KFD topology: no AMD GPU to check here (GPU, memory and parameter lines skipped)",
        )
    }
}

fn gpus(ctx: &Context) -> Vec<Check> {
    let cfg = config(ctx);
    let mut out = Vec::new();
    for (i, g) in ctx.machine.gpus.iter().enumerate() {
        let kind = if g.integrated() {
            "integrated (APU)"
        } else {
            "discrete"
        };
        let card = g
            .drm
            .as_ref()
            .map(|d| format!(", {}", d.card))
            .unwrap_or_default();
        out.push(Check::new(
            &format!("gpu{}", i),
            &format!("GPU {}", i),
            Status::Ok,
            format!(
                "{}, {}, device 0x{:04x} at {} (KFD node {}{})",
                g.gfx().name(),
                kind,
                g.device_id,
                g.pci_address(),
                g.node,
                card
            ),
        ));
        out.push(gpu_memory(ctx, i, g, &cfg));
    }
    out
}

fn gpu_memory(ctx: &Context, i: usize, g: &Gpu, cfg: &Config) -> Check {
    let id = format!("gpu{}-memory", i);
    let title = format!("GPU {} memory", i);
    let size = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), format_size);
    if !g.integrated() {
        let vram = g.vram();
        let vis = g.drm.as_ref().and_then(|d| d.vis_vram_total);
        let mut detail = format!("VRAM {}", size(vram));
        if let (Some(v), Some(s)) = (vram, vis) {
            detail.push_str(&format!(", CPU-visible {}", format_size(s)));
            if s < v {
                detail.push_str(" (no resizable BAR)");
            }
        }
        detail.push_str(&format!(", GTT {}", size(g.gtt())));
        return Check::new(&id, &title, Status::Ok, detail);
    }
    let m = &ctx.machine;
    let ceiling = match m.uma_ceiling(g, cfg.host_reserve) {
        Ok(c) => c,
        Err(e) => return Check::new(&id, &title, Status::Warn, format!("unified memory: {}", e)),
    };
    let ram = m.mem_total.unwrap_or(0);
    let host_left = ram.saturating_sub(cfg.host_reserve.resolve(ram));
    let ttm = m.ttm_pages_limit.map(|p| p * TTM_PAGE_SIZE);
    let bound = if Some(ceiling) == ttm && ttm < g.gtt() {
        "ttm.pages_limit"
    } else if Some(ceiling) == g.gtt() {
        "the GTT size"
    } else {
        "RAM less the host reserve"
    };
    let detail = format!(
        "unified: carve-out {}, GTT {}, TTM limit {}, RAM {} less {} reserve -> the GPU can use {} (bound: {})",
        size(g.vram()),
        size(g.gtt()),
        size(ttm),
        format_size(ram),
        cfg.host_reserve,
        format_size(ceiling),
        bound
    );
    let carve_out = g.vram().unwrap_or(0);
    if cfg.uma == UmaMode::Off {
        Check::new(&id, &title, Status::Warn, detail).fix(
            "ROCMGUARD_UMA=0: programs see only the carve-out; unset it (auto) or use --profile strix-halo",
        )
    } else if carve_out >= ceiling {
        Check::new(&id, &title, Status::Warn, detail).fix(format!(
            "the BIOS carve-out ({}) is at least the unified ceiling: set ROCMGUARD_UMA=0 on this machine, or shrink the carve-out (UMA frame buffer size) and raise the GTT",
            format_size(carve_out)
        ))
    } else if bound != "RAM less the host reserve" && (ceiling as f64) < 0.9 * host_left as f64 {
        Check::new(&id, &title, Status::Warn, detail).fix(format!(
            "the GPU could use {} of RAM: add amdgpu.gttsize={} ttm.pages_limit={} to the kernel command line",
            format_size(host_left),
            host_left >> 20,
            host_left / TTM_PAGE_SIZE
        ))
    } else {
        Check::new(&id, &title, Status::Ok, detail)
    }
}

fn params(ctx: &Context) -> Check {
    let m = &ctx.machine;
    let title = "Module parameters";
    if !m.amdgpu_loaded {
        return Check::new("amdgpu-params", title, Status::Skip, "amdgpu is not loaded");
    }
    let mut parts: Vec<String> = m
        .amdgpu_params
        .iter()
        .map(|(k, v)| format!("amdgpu.{}={}", k, v))
        .collect();
    if let Some(p) = m.ttm_pages_limit {
        parts.push(format!(
            "ttm.pages_limit={} ({})",
            p,
            format_size(p * TTM_PAGE_SIZE)
        ));
    }
    let detail = parts.join(", ");
    let gttsize_mib = m
        .amdgpu_param("gttsize")
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|&v| v > 0)
        .map(|v| v as u64);
    match (gttsize_mib, m.ttm_pages_limit) {
        (Some(mib), Some(pages)) if (mib << 20) > pages * TTM_PAGE_SIZE => {
            Check::new("amdgpu-params", title, Status::Warn, detail).fix(format!(
                "amdgpu.gttsize ({}) is above ttm.pages_limit ({}): TTM refuses GPU pages past its limit, so the rest of the GTT is unusable; add ttm.pages_limit={} to the kernel command line",
                format_size(mib << 20),
                format_size(pages * TTM_PAGE_SIZE),
                (mib << 20) / TTM_PAGE_SIZE
            ))
        }
        _ => Check::new("amdgpu-params", title, Status::Ok, detail),
    }
}

fn ram(ctx: &Context) -> Check {
    let m = &ctx.machine;
    match m.mem_total {
        Some(total) => Check::new(
            "ram",
            "System memory",
            Status::Ok,
            format!(
                "{}{}",
                format_size(total),
                m.mem_available
                    .map(|a| format!(", {} available", format_size(a)))
                    .unwrap_or_default()
            ),
        ),
        None => Check::new(
            "ram",
            "System memory",
            Status::Skip,
            "no MemTotal in proc/meminfo",
        ),
    }
}

fn gfx_override(ctx: &Context) -> Check {
    let id = "gfx-override";
    let title = "gfx targets";
    let gpus = &ctx.machine.gpus;
    let value = ctx.var("HSA_OVERRIDE_GFX_VERSION");
    let over = match value.map(GfxVersion::parse_override) {
        Some(Err(e)) => {
            return Check::new(
                id,
                title,
                Status::Fail,
                format!(
                    "HSA_OVERRIDE_GFX_VERSION {}: the runtime refuses to start",
                    e
                ),
            )
            .fix("write it as major.minor.stepping (10.3.0), or unset it")
        }
        Some(Ok(v)) => Some(v),
        None => None,
    };
    if gpus.is_empty() {
        let detail = match value {
            Some(v) => format!(
                "HSA_OVERRIDE_GFX_VERSION={} is set, but there is no GPU to compare",
                v
            ),
            None => "no GPU".to_string(),
        };
        return Check::new(id, title, Status::Skip, detail);
    }
    let mut status = Status::Ok;
    let mut notes = Vec::new();
    let mut fixes = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let native = g.gfx();
        let name = native.name();
        match over {
            None => match FIELD_OVERRIDES.iter().find(|(t, _, _)| *t == name) {
                Some((_, with, profile)) => {
                    status = status.max(Status::Warn);
                    notes.push(format!(
                        "GPU {} {}: the official ROCm and PyTorch builds carry no kernels for it",
                        i, name
                    ));
                    let via = if profile.is_empty() {
                        String::new()
                    } else {
                        format!(" (rocmguard run --profile {})", profile)
                    };
                    fixes.push(format!(
                        "the field runs it with HSA_OVERRIDE_GFX_VERSION={}{}",
                        with, via
                    ));
                }
                None => notes.push(format!("GPU {} {}: native", i, name)),
            },
            Some(o) if o == native => notes.push(format!(
                "GPU {} {}: the override is its own target",
                i, name
            )),
            Some(o) if o.major == native.major && o.minor == native.minor => notes.push(format!(
                "GPU {} {} runs {} kernels (same family: the usual workaround)",
                i,
                name,
                o.name()
            )),
            Some(o) if o.major == native.major => {
                status = status.max(Status::Warn);
                notes.push(format!(
                    "GPU {} {} runs {} kernels: another chip of its generation, some kernels fault",
                    i,
                    name,
                    o.name()
                ));
                fixes.push(format!("a PyTorch built for {} is the real fix", name));
            }
            Some(o) => {
                status = Status::Fail;
                notes.push(format!(
                    "GPU {} {} is told it is {}: another generation's kernels do not run on it",
                    i,
                    name,
                    o.name()
                ));
                fixes.push(format!(
                    "unset HSA_OVERRIDE_GFX_VERSION, or hide GPU {} with HIP_VISIBLE_DEVICES (the override applies to every GPU)",
                    i
                ));
            }
        }
    }
    let prefix = match value {
        Some(v) => format!("HSA_OVERRIDE_GFX_VERSION={}: ", v),
        None => String::new(),
    };
    let check = Check::new(id, title, status, format!("{}{}", prefix, notes.join("; ")));
    if fixes.is_empty() {
        check
    } else {
        check.fix(fixes.join("; "))
    }
}

/// The allocator line PyTorch would read, and what it is: (variable, value, others ignored).
fn effective_alloc_conf(ctx: &Context) -> Option<(&'static str, &str, Vec<&'static str>)> {
    let set: Vec<&'static str> = alloc_conf::VARS
        .iter()
        .copied()
        .filter(|v| ctx.var(v).is_some())
        .collect();
    let first = *set.first()?;
    Some((first, ctx.var(first)?, set[1..].to_vec()))
}

fn pytorch_alloc_conf(ctx: &Context) -> Check {
    let id = "alloc-conf";
    let title = "PyTorch allocator";
    let (var, value, ignored) = match effective_alloc_conf(ctx) {
        Some(e) => e,
        None => {
            return Check::new(
                id,
                title,
                Status::Ok,
                "PYTORCH_HIP_ALLOC_CONF not set: PyTorch's defaults",
            )
        }
    };
    let shown = format!("{}={}", var, value);
    match alloc_conf::parse(value) {
        Err(e) => Check::new(id, title, Status::Fail, format!("{}: {}", shown, e))
            .fix("PyTorch stops at its first GPU allocation with this line: fix it or unset it"),
        Ok(_) if !ignored.is_empty() => Check::new(
            id,
            title,
            Status::Warn,
            format!("{}; PyTorch reads it first and ignores {}", shown, ignored.join(", ")),
        )
        .fix("keep one variable (PyTorch's order: PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF)"),
        Ok(conf) if !conf.unknown.is_empty() => Check::new(
            id,
            title,
            Status::Warn,
            format!("{}: unknown option {}", shown, conf.unknown.join(", ")),
        )
        .fix("a typo? PyTorch versions that do not know an option stop with 'Unrecognized CachingAllocator option'"),
        Ok(_) => Check::new(id, title, Status::Ok, format!("{}: valid", shown)),
    }
}

fn guard_preloaded(ctx: &Context) -> bool {
    ctx.var("LD_PRELOAD").is_some_and(|p| p.contains(LIB_NAME))
}

fn no_caching(ctx: &Context) -> Check {
    let id = "no-caching";
    let title = "PyTorch caching";
    let set: Vec<String> = [
        "PYTORCH_NO_HIP_MEMORY_CACHING",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
    ]
    .iter()
    .filter_map(|v| ctx.var(v).map(|value| format!("{}={}", v, value)))
    .collect();
    if set.is_empty() {
        return Check::new(
            id,
            title,
            Status::Ok,
            "PyTorch caches device memory (PYTORCH_NO_HIP_MEMORY_CACHING not set)",
        );
    }
    let shown = set.join(", ");
    if guard_preloaded(ctx) {
        Check::new(
            id,
            title,
            Status::Ok,
            format!("{}: every tensor allocation reaches hipMalloc, and rocmguard (in LD_PRELOAD) pools it", shown),
        )
    } else {
        Check::new(
            id,
            title,
            Status::Warn,
            format!("{} without rocmguard: every tensor allocation calls hipMalloc and hipFree directly", shown),
        )
        .fix("that is slow, fragments memory and makes rocblas_create_handle fail when memory runs short: run under `rocmguard run` (its pool replaces PyTorch's cache), or unset it (older PyTorch turns caching off even for =0)")
    }
}

fn caps(ctx: &Context) -> Check {
    let id = "caps";
    let title = "Memory caps";
    let cfg = config(ctx);
    let mut problems = Vec::new();
    for (i, g) in ctx.machine.gpus.iter().enumerate() {
        let memory = if g.integrated() && cfg.uma != UmaMode::Off {
            ctx.machine.uma_ceiling(g, cfg.host_reserve).ok()
        } else {
            g.vram()
        };
        let memory = match memory {
            Some(m) => m,
            None => continue,
        };
        if let Some(Limit::Bytes(cap)) = cfg.vram_limit {
            if cap > memory {
                problems.push(format!(
                    "ROCMGUARD_VRAM_LIMIT {} is above GPU {}'s {}: it never binds there",
                    format_size(cap),
                    i,
                    format_size(memory)
                ));
            }
        }
        if cfg.headroom >= memory {
            problems.push(format!(
                "ROCMGUARD_HEADROOM {} is all of GPU {}'s {}: every allocation would fail",
                format_size(cfg.headroom),
                i,
                format_size(memory)
            ));
        }
    }
    let fraction = effective_alloc_conf(ctx)
        .and_then(|(_, value, _)| alloc_conf::parse(value).ok())
        .and_then(|c| c.per_process_memory_fraction)
        .filter(|&f| f < 1.0);
    if let (Some(f), Some(limit)) = (fraction, cfg.vram_limit) {
        problems.push(format!(
            "two caps multiply: PyTorch keeps to {} of the {} that rocmguard reports as the device",
            f, limit
        ));
    }
    let cap = cfg
        .vram_limit
        .map_or_else(|| "none".to_string(), |l| l.to_string());
    let detail = format!(
        "rocmguard cap {}, headroom {}; PyTorch per-process fraction {}",
        cap,
        format_size(cfg.headroom),
        fraction.map_or_else(|| "none".to_string(), |f| f.to_string())
    );
    if problems.is_empty() {
        Check::new(id, title, Status::Ok, detail)
    } else {
        Check::new(
            id,
            title,
            Status::Warn,
            format!("{}: {}", detail, problems.join("; ")),
        )
        .fix("keep one cap, below the device's memory (see `rocmguard run --help`)")
    }
}

fn rocmguard_env(ctx: &Context) -> Check {
    let id = "rocmguard-env";
    let title = "ROCMGUARD_* settings";
    let (config, warnings) = Config::from_vars(ctx.env.iter());
    if let Some(e) = config.invalid_cap {
        return Check::new(id, title, Status::Fail, e).fix(
            "`rocmguard run` refuses to start with it; fix or unset the cap (see `rocmguard run --help`)",
        );
    }
    let set: Vec<&str> = ctx
        .env
        .keys()
        .filter(|k| k.starts_with("ROCMGUARD_"))
        .map(String::as_str)
        .collect();
    if !warnings.is_empty() {
        let text: Vec<&str> = warnings
            .iter()
            .map(|w| w.trim_start_matches("rocmguard: "))
            .collect();
        Check::new(id, title, Status::Warn, text.join("; ")).fix(
            "the shim warns once and uses the default; fix the value (see `rocmguard run --help`)",
        )
    } else if set.is_empty() {
        Check::new(id, title, Status::Ok, "none set: the defaults")
    } else {
        Check::new(id, title, Status::Ok, format!("{} valid", set.join(", ")))
    }
}

fn xnack(ctx: &Context) -> Check {
    let id = "xnack";
    let title = "XNACK";
    let value = match ctx.var("HSA_XNACK") {
        Some(v) => v,
        None => {
            return Check::new(
                id,
                title,
                Status::Ok,
                "HSA_XNACK not set: the runtime's default",
            )
        }
    };
    if value.trim() != "1" {
        return Check::new(id, title, Status::Ok, format!("HSA_XNACK={}: off", value));
    }
    let rdna: Vec<String> = ctx
        .machine
        .gpus
        .iter()
        .filter(|g| g.gfx().major >= 10)
        .map(|g| g.gfx().name())
        .collect();
    let noretry = ctx.machine.amdgpu_param("noretry");
    if !rdna.is_empty() {
        Check::new(
            id,
            title,
            Status::Warn,
            format!("HSA_XNACK=1, but {} (RDNA) has no XNACK", rdna.join(", ")),
        )
        .fix("unset HSA_XNACK or set it to 0: code objects built for xnack+ do not run there")
    } else if noretry.is_some_and(|n| n != "0") {
        Check::new(
            id,
            title,
            Status::Warn,
            format!(
                "HSA_XNACK=1, but amdgpu.noretry={} turns off the GPU page-fault retry XNACK needs",
                noretry.unwrap_or("")
            ),
        )
        .fix("boot with amdgpu.noretry=0 on the kernel command line")
    } else {
        Check::new(
            id,
            title,
            Status::Ok,
            "HSA_XNACK=1 with retry faults enabled",
        )
    }
}

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
                Some("the self-test needs libamdhip64.so on the loader path; without AMD hardware, LD_LIBRARY_PATH=target/release/hipsim-lib runs it on rocmguard's simulator".to_string()),
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
