//! Variables from memory recipes that PyTorch never reads (`PYTORCH_MAX_SPLIT_SIZE_MB=512`, as
//! one ROCm troubleshooting recipe has it), each with the `PYTORCH_HIP_ALLOC_CONF` key that does
//! what it meant; and a `garbage_collection_threshold` that cannot act. PyTorch 2.11 reads its
//! allocator settings from PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF and
//! PYTORCH_HIP_ALLOC_CONF only (c10/core/AllocatorConfig.cpp), and collects garbage only
//! under a memory fraction below 1 (`allowed_memory_maximum` in CUDACachingAllocator.cpp).

use std::collections::BTreeMap;

use super::super::{alloc_conf, Check, Context, Status};

/// Memory variables PyTorch does read: never reported.
const READ: [&str; 5] = [
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTORCH_NO_HIP_MEMORY_CACHING",
];

/// A word in a variable's name and the setting that does what it meant (`{}`: its value).
const MEANT: [(&str, &str); 7] = [
    ("SPLIT", "PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:{}"),
    (
        "GARBAGE",
        "PYTORCH_HIP_ALLOC_CONF=garbage_collection_threshold:{}",
    ),
    (
        "GC_THRESHOLD",
        "PYTORCH_HIP_ALLOC_CONF=garbage_collection_threshold:{}",
    ),
    (
        "EXPANDABLE",
        "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True",
    ),
    (
        "ROUNDUP",
        "PYTORCH_HIP_ALLOC_CONF=roundup_power2_divisions:{}",
    ),
    ("CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING=1"),
    ("ALLOC", "PYTORCH_HIP_ALLOC_CONF={}"),
];

/// What the check finds: (what is wrong, what to set instead), one per variable.
pub fn findings(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in env {
        let upper = name.to_ascii_uppercase();
        let memory = upper.starts_with("PYTORCH_") || upper.starts_with("HIP_ALLOC");
        if !memory || READ.contains(&name.as_str()) {
            continue;
        }
        if let Some((_, meant)) = MEANT.iter().find(|(word, _)| upper.contains(word)) {
            out.push((
                format!("{}={}: PyTorch never reads {}", name, value, name),
                meant.replace("{}", value.trim()),
            ));
        }
    }
    if let Some(f) = idle_garbage_collection(env) {
        out.push(f);
    }
    out
}

/// A `garbage_collection_threshold` in the line PyTorch reads, with no fraction below 1 there.
fn idle_garbage_collection(env: &BTreeMap<String, String>) -> Option<(String, String)> {
    let (var, line) = alloc_conf::VARS
        .iter()
        .find_map(|v| env.get(*v).map(|line| (*v, line)))?;
    let conf = alloc_conf::parse(line).ok()?;
    let has = |key: &str| conf.options.iter().any(|(k, _)| k == key);
    let fraction = conf.per_process_memory_fraction.unwrap_or(1.0);
    (has("garbage_collection_threshold") && fraction >= 1.0).then(|| {
        (
            format!(
                "{}: garbage_collection_threshold acts only under a memory fraction below 1; \
                 without one PyTorch never collects",
                var
            ),
            format!(
                "add per_process_memory_fraction:0.95 to {} (or call \
                 torch.cuda.set_per_process_memory_fraction in the program)",
                var
            ),
        )
    })
}

pub(super) fn recipe_vars(ctx: &Context) -> Check {
    let found = findings(&ctx.env);
    let (id, title) = ("recipe-vars", "Memory recipe variables");
    match found.as_slice() {
        [] => Check::new(
            id,
            title,
            Status::Ok,
            "no allocator variables PyTorch ignores",
        ),
        _ => Check::new(
            id,
            title,
            Status::Warn,
            found
                .iter()
                .map(|f| f.0.clone())
                .collect::<Vec<_>>()
                .join("; "),
        )
        .fix(format!(
            "instead: {}",
            found
                .iter()
                .map(|f| f.1.clone())
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn recipe_variables_name_the_setting_they_meant() {
        let f = findings(&env(&[
            ("PYTORCH_MAX_SPLIT_SIZE_MB", "512"),
            ("PYTORCH_EXPANDABLE_SEGMENTS", "1"),
            ("PYTORCH_ROCM_ALLOC_CONF", "expandable_segments:True"),
            ("PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:128"),
            ("PYTORCH_NO_HIP_MEMORY_CACHING", "1"),
            ("PYTORCH_TUNABLEOP_ENABLED", "1"),
            ("HOME", "/root"),
        ]));
        let text = format!("{:?}", f);
        assert_eq!(f.len(), 3, "{}", text);
        assert!(text.contains("PyTorch never reads PYTORCH_MAX_SPLIT_SIZE_MB"));
        assert!(text.contains("PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:512"));
        assert!(text.contains("PYTORCH_HIP_ALLOC_CONF=expandable_segments:True"));
        assert!(
            !text.contains("TUNABLEOP")
                && !text.contains("PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:128")
        );
    }

    #[test]
    fn a_garbage_collection_threshold_alone_is_reported() {
        let alone = env(&[("PYTORCH_HIP_ALLOC_CONF", "garbage_collection_threshold:0.6")]);
        assert!(format!("{:?}", findings(&alone)).contains("never collects"));
        let with = env(&[(
            "PYTORCH_HIP_ALLOC_CONF",
            "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
        )]);
        assert!(findings(&with).is_empty());
    }
}
