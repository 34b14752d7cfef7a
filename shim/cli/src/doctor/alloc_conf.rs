//! PyTorch's caching-allocator line (`PYTORCH_HIP_ALLOC_CONF=garbage_collection_threshold:0.8,
//! max_split_size_mb:64`), checked the way c10's `CUDAAllocatorConfig` parses it, so a line
//! PyTorch would refuse at its first allocation is caught before the job starts.

/// The variables PyTorch reads, in its order: the first one set wins and the others are
/// ignored. PyTorch 2.9+ reads PYTORCH_ALLOC_CONF first, then the CUDA name, then the HIP one
/// (`AcceleratorAllocatorConfig::instance` in c10/core/AllocatorConfig.cpp).
pub const VARS: &[&str] = &[
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
];

/// What a valid line says, as far as rocmguard cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocConf {
    /// (option, value) in order.
    pub options: Vec<(String, String)>,
    /// Options this PyTorch-version-independent parser does not know: newer PyTorch may accept
    /// them, older ones stop with "Unrecognized CachingAllocator option".
    pub unknown: Vec<String>,
    pub per_process_memory_fraction: Option<f64>,
}

/// PyTorch's minimum for the `_mb` sizes: blocks up to 20 MiB are "small" and never split.
const LARGE_BUFFER_MB: u64 = 20;

/// Parses a line; the error names the option and what PyTorch requires of it.
pub fn parse(line: &str) -> Result<AllocConf, String> {
    let mut conf = AllocConf::default();
    for item in split_items(line) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (key, value) = item
            .split_once(':')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| format!("`{}` has no value (write option:value)", item))?;
        check_option(key, value, &mut conf)?;
        conf.options.push((key.to_string(), value.to_string()));
    }
    Ok(conf)
}

/// Splits on commas outside `[...]` (`roundup_power2_divisions:[256:1,512:2]`).
fn split_items(line: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in line.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&line[start..]);
    items
}

fn check_option(key: &str, value: &str, conf: &mut AllocConf) -> Result<(), String> {
    let int = |what: &str| -> Result<u64, String> {
        value
            .parse::<u64>()
            .map_err(|_| format!("{}:{}: {} must be a whole number", key, value, what))
    };
    let boolean = || -> Result<(), String> {
        match value {
            "True" | "False" => Ok(()),
            _ => Err(format!(
                "{}:{}: must be True or False (capitalized)",
                key, value
            )),
        }
    };
    match key {
        "max_split_size_mb" | "max_non_split_rounding_mb" => {
            let mb = int("the size in MiB")?;
            // PyTorch 2.11 (AcceleratorAllocatorConfig.cpp): `val >= kLargeBuffer / kMB`.
            if mb < LARGE_BUFFER_MB {
                return Err(format!(
                    "{}:{}: too small, PyTorch requires at least {}",
                    key, value, LARGE_BUFFER_MB
                ));
            }
        }
        "garbage_collection_threshold" => {
            let t: f64 = value
                .parse()
                .map_err(|_| format!("{}:{}: must be a number", key, value))?;
            if !(t > 0.0 && t < 1.0) {
                return Err(format!(
                    "{}:{}: must be above 0 and below 1 (0.8 is usual)",
                    key, value
                ));
            }
        }
        "per_process_memory_fraction" => {
            let f: f64 = value
                .parse()
                .map_err(|_| format!("{}:{}: must be a number", key, value))?;
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!("{}:{}: must be above 0 and at most 1", key, value));
            }
            conf.per_process_memory_fraction = Some(f);
        }
        "roundup_power2_divisions" => {
            let ok = if value.starts_with('[') {
                value.ends_with(']')
                    && value[1..value.len() - 1].split(',').all(|pair| {
                        pair.split_once(':').is_some_and(|(size, div)| {
                            (size.trim() == ">" || size.trim().parse::<u64>().is_ok())
                                && div.trim().parse::<u64>().is_ok()
                        })
                    })
            } else {
                value.parse::<u64>().is_ok()
            };
            if !ok {
                return Err(format!(
                    "{}:{}: a number, or a list like [256:1,512:2,>:4]",
                    key, value
                ));
            }
        }
        "pinned_num_register_threads" => {
            let n = int("the thread count")?;
            if !n.is_power_of_two() || n > 128 {
                return Err(format!("{}:{}: a power of two up to 128", key, value));
            }
        }
        "pinned_reserve_segment_size_mb" | "large_segment_size_mb" => {
            int("the size in MiB")?;
        }
        "backend" => {
            if !matches!(value, "native" | "cudaMallocAsync" | "hipMallocAsync") {
                return Err(format!(
                    "{}:{}: native or cudaMallocAsync (hipMallocAsync on ROCm)",
                    key, value
                ));
            }
        }
        "expandable_segments"
        | "release_lock_on_cudamalloc"
        | "release_lock_on_hipmalloc"
        | "pinned_use_cuda_host_register"
        | "pinned_use_hip_host_register"
        | "pinned_use_background_threads"
        | "graph_capture_record_stream_reuse"
        | "pinned_free_catch_all"
        | "throw_on_cudamalloc_oom" => boolean()?,
        other => conf.unknown.push(other.to_string()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_lines_parse() {
        let c = parse("garbage_collection_threshold:0.8,max_split_size_mb:64").unwrap();
        assert_eq!(c.options.len(), 2);
        assert!(c.unknown.is_empty());
        let c =
            parse("expandable_segments:True, roundup_power2_divisions:[256:1,512:2,>:4]").unwrap();
        assert_eq!(c.options[1].1, "[256:1,512:2,>:4]");
        let c = parse("per_process_memory_fraction:0.9,future_knob:3").unwrap();
        assert_eq!(c.per_process_memory_fraction, Some(0.9));
        assert_eq!(c.unknown, ["future_knob"]);
        assert_eq!(parse("").unwrap(), AllocConf::default());
        assert!(
            parse("max_split_size_mb:20").is_ok(),
            "20 is PyTorch's least"
        );
    }

    #[test]
    fn lines_pytorch_refuses() {
        for (line, says) in [
            ("max_split_size_mb:16", "at least 20"),
            ("max_non_split_rounding_mb:19", "at least 20"),
            ("max_split_size_mb:64MB", "whole number"),
            ("garbage_collection_threshold:1.0", "below 1"),
            ("garbage_collection_threshold", "no value"),
            ("expandable_segments:true", "capitalized"),
            ("backend:magic", "native"),
            ("per_process_memory_fraction:1.5", "at most 1"),
            ("roundup_power2_divisions:[256]", "list"),
        ] {
            let err = parse(line).unwrap_err();
            assert!(err.contains(says), "{}: {}", line, err);
        }
    }
}
