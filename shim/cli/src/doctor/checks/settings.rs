//! The memory settings in the environment: PyTorch's allocator variables, the caps rocmguard
//! and PyTorch would apply together, and the ROCMGUARD_* values.

use rocmguard_core::config::{UmaMode, PYTORCH_CACHE_OFF};
use rocmguard_core::{format_size, Config, Limit};

use super::config;
use crate::doctor::alloc_conf;
use crate::doctor::{Check, Context, Status};
use crate::run::LIB_NAME;

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

pub(super) fn pytorch_alloc_conf(ctx: &Context) -> Check {
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
        .fix("keep one variable (PyTorch 2.9+'s order: PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF)"),
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

pub(super) fn no_caching(ctx: &Context) -> Check {
    let id = "no-caching";
    let title = "PyTorch caching";
    let set: Vec<String> = PYTORCH_CACHE_OFF
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

pub(super) fn caps(ctx: &Context) -> Check {
    let id = "caps";
    let title = "Memory caps";
    let cfg = config(ctx);
    // Its stand-in cap of 0 B is no finding of its own: the settings line says what is wrong.
    if cfg.invalid_cap.is_some() {
        return Check::new(
            id,
            title,
            Status::Skip,
            "the rocmguard cap given cannot be read (see ROCMGUARD_* settings below)",
        );
    }
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
    if cfg.vram_limit.is_some_and(|l| l.resolve(u64::MAX) == 0) {
        problems.push("a cap of 0 refuses every allocation (none = no cap)".to_string());
    }
    if problems.is_empty() {
        Check::new(id, title, Status::Ok, detail)
    } else {
        Check::new(
            id,
            title,
            Status::Warn,
            format!("{}: {}", detail, problems.join("; ")),
        )
        .fix("keep one cap, above 0 and below the device's memory; none is the whole device (see `rocmguard run --help`)")
    }
}

pub(super) fn rocmguard_env(ctx: &Context) -> Check {
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
