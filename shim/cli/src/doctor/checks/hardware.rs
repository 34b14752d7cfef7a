//! The machine as sysfs and procfs show it: the amdgpu driver, each GPU and its memory, the
//! module parameters that bound that memory, and system RAM.

use rocmguard_core::config::UmaMode;
use rocmguard_core::topology::{Gpu, TTM_PAGE_SIZE};
use rocmguard_core::{format_size, Config};

use super::config;
use crate::doctor::{Check, Context, Status};

pub(super) fn driver(ctx: &Context) -> Check {
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

pub(super) fn gpus(ctx: &Context) -> Vec<Check> {
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

pub(super) fn params(ctx: &Context) -> Check {
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

pub(super) fn ram(ctx: &Context) -> Check {
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
