//! Whether the kernels the runtime loads fit each GPU: HSA_OVERRIDE_GFX_VERSION and HSA_XNACK.

use rocmguard_core::topology::GfxVersion;

use crate::doctor::{Check, Context, Status};

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

pub(super) fn gfx_override(ctx: &Context) -> Check {
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

pub(super) fn xnack(ctx: &Context) -> Check {
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
