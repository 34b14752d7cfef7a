//! The `PYTORCH_HIP_ALLOC_CONF` line of a `pytorch:CONF` policy, read the way PyTorch 2.11 reads
//! it: c10's `ConfigTokenizer` (AllocatorConfig.h) splits it at `,` `:` `[` `]` and drops
//! whitespace; `AcceleratorAllocatorConfig::parseArgs` (AllocatorConfig.cpp) takes the keys the
//! caching allocator uses, `CUDAAllocatorConfig::parseArgs` (CUDAAllocatorConfig.cpp) the rest.
//! A value PyTorch refuses is refused here with PyTorch's own words.

/// MiB, the unit of the `_mb` keys.
const MB: u64 = 1 << 20;
/// `kLargeBuffer`: the least `max_split_size_mb` and `max_non_split_rounding_mb` PyTorch takes.
const LARGE_BUFFER_MB: u64 = 20;
/// `kRoundUpPowerOfTwoIntervals`: one division count per power of two from 1 MiB to 64 GiB.
pub const INTERVALS: usize = 16;

/// The settings of PyTorch's caching allocator that change where memory goes.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchConf {
    /// Blocks this large are never split; `u64::MAX` (the default) splits every block.
    pub max_split_size: u64,
    /// How much larger than a request an unsplittable block may be and still serve it.
    pub max_non_split_rounding: u64,
    /// Divisions per power of two, by size interval (0 or 1: round to 512 bytes only).
    pub roundup_power2_divisions: [u64; INTERVALS],
    /// 0: off. Only acts under a memory fraction below 1 (`allowed_memory_maximum`).
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// `per_process_memory_fraction`: 1.0 (the default) sets no limit.
    pub memory_fraction: f64,
}

impl Default for TorchConf {
    fn default() -> TorchConf {
        TorchConf {
            max_split_size: u64::MAX,
            max_non_split_rounding: LARGE_BUFFER_MB * MB,
            roundup_power2_divisions: [0; INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            memory_fraction: 1.0,
        }
    }
}

/// Keys PyTorch accepts that change nothing a replay sees (host memory, locking, graphs).
const IGNORED: [&str; 8] = [
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
];

impl TorchConf {
    /// Reads a line as PyTorch would; the error is PyTorch's message where it has one.
    pub fn parse(line: &str) -> Result<TorchConf, String> {
        let tokens = tokenize(line);
        let mut conf = TorchConf::default();
        let mut i = 0;
        while i < tokens.len() {
            let key = tokens[i].as_str();
            // PyTorch checks the `:` without acting on a mismatch; the value is two on.
            let value = |at: usize| -> Result<&str, String> {
                tokens
                    .get(at)
                    .map(|s| s.as_str())
                    .ok_or_else(|| format!("{}: Index out of bounds in ConfigTokenizer", key))
            };
            i = match key {
                "max_split_size_mb" | "max_non_split_rounding_mb" => {
                    let mb = to_size(key, value(i + 2)?)?;
                    if mb < LARGE_BUFFER_MB {
                        return Err(format!(
                            "CachingAllocator option {} too small, must be >= {}",
                            key, LARGE_BUFFER_MB
                        ));
                    }
                    let bytes = mb.min(u64::MAX / MB) * MB;
                    if key == "max_split_size_mb" {
                        conf.max_split_size = bytes;
                    } else {
                        conf.max_non_split_rounding = bytes;
                    }
                    i + 2
                }
                "garbage_collection_threshold" => {
                    let t = to_double(key, value(i + 2)?)?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(
                            "garbage_collect_threshold is invalid, set it in (0.0, 1.0)".into()
                        );
                    }
                    conf.garbage_collection_threshold = t;
                    i + 2
                }
                "per_process_memory_fraction" => {
                    let f = to_double(key, value(i + 2)?)?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(
                            "per_process_memory_fraction is invalid, set it in [0.0, 1.0]".into(),
                        );
                    }
                    conf.memory_fraction = f;
                    i + 2
                }
                "roundup_power2_divisions" => parse_divisions(&tokens, i, &mut conf)?,
                "expandable_segments" => {
                    conf.expandable_segments = to_bool(i + 2, value(i + 2)?)?;
                    i + 2
                }
                "backend" => match value(i + 2)? {
                    "native" => i + 2,
                    "cudaMallocAsync" | "hipMallocAsync" => {
                        return Err(format!(
                            "backend:{} hands every request to the driver's own pool; this \
                             model covers PyTorch's native caching allocator only",
                            tokens[i + 2]
                        ))
                    }
                    _ => {
                        return Err("Unknown allocator backend, options are native, \
                                    cudaMallocAsync, and hipMallocAsync"
                            .into())
                    }
                },
                k if IGNORED.contains(&k) => skip_value(&tokens, i)?,
                _ => {
                    return Err(format!(
                        "Unrecognized key '{}' in CUDA allocator config. Keys: {}",
                        key,
                        KEYS.join(", ")
                    ))
                }
            };
            // Then a `,` (checked, not enforced) before the next key.
            i += 2;
        }
        Ok(conf)
    }

    /// Whether the allocator has a limit below the device (`allowed_memory_maximum`).
    pub fn limit(&self, device: u64) -> Option<u64> {
        (self.memory_fraction < 1.0).then_some((self.memory_fraction * device as f64) as u64)
    }
}

/// The keys a replay takes, for the error on an unknown one.
pub const KEYS: [&str; 7] = [
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "per_process_memory_fraction",
    "backend",
];

/// `ConfigTokenizer`: `,` `:` `[` `]` are tokens of their own, whitespace is dropped.
fn tokenize(line: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in line.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            tokens.push(c.to_string());
        } else if !c.is_whitespace() {
            word.push(c);
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// `std::stoull`: the leading digits (`64MB` is 64); none is an error.
fn to_size(key: &str, text: &str) -> Result<u64, String> {
    let digits: String = text.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits
        .parse()
        .map_err(|_| format!("{}:{}: stoull: no conversion (a whole number)", key, text))
}

/// `std::stod`: the longest leading number.
fn to_double(key: &str, text: &str) -> Result<f64, String> {
    (1..=text.len())
        .rev()
        .filter(|&n| text.is_char_boundary(n))
        .find_map(|n| text[..n].parse::<f64>().ok())
        .ok_or_else(|| format!("{}:{}: stod: no conversion (a number)", key, text))
}

/// `ConfigTokenizer::toBool`.
fn to_bool(at: usize, text: &str) -> Result<bool, String> {
    match text {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(format!(
            "Expected 'True' or 'False' at index {} in ConfigTokenizer but got '{}'",
            at, text
        )),
    }
}

/// `ConfigTokenizer::skipKey`: the index of the value, or of the `]` closing a list.
fn skip_value(tokens: &[String], i: usize) -> Result<usize, String> {
    let mut at = i + 2;
    match tokens.get(at).map(|s| s.as_str()) {
        None => Err(format!(
            "{}: Index out of bounds in ConfigTokenizer",
            tokens[i]
        )),
        Some("[") => {
            while at < tokens.len() && tokens[at] != "]" {
                at += 1;
            }
            if at == tokens.len() {
                return Err(
                    "Expected closing bracket ']' in ConfigTokenizer but reached end of config"
                        .into(),
                );
            }
            Ok(at)
        }
        Some(_) => Ok(at),
    }
}

/// `parseRoundUpPower2Divisions`: `N` for every size, or `[MB:N,...,>:N]` by interval.
fn parse_divisions(tokens: &[String], i: usize, conf: &mut TorchConf) -> Result<usize, String> {
    let key = "roundup_power2_divisions";
    let mut at = i + 2;
    let first = tokens
        .get(at)
        .ok_or_else(|| format!("{}: Index out of bounds in ConfigTokenizer", key))?;
    let divisions = &mut conf.roundup_power2_divisions;
    if first != "[" {
        let n = to_size(key, first)?;
        if !n.is_power_of_two() {
            return Err("For roundups, the divisions has to be power of 2 ".into());
        }
        *divisions = [n; INTERVALS];
        return Ok(at);
    }
    let (mut first_value, mut last) = (true, 0usize);
    at += 1;
    while at < tokens.len() && tokens[at] != "]" {
        let boundary = tokens[at].as_str();
        let n = to_size(
            key,
            tokens
                .get(at + 2)
                .ok_or("Error parsing roundup_power2_divisions value")?,
        )?;
        if n != 0 && !n.is_power_of_two() {
            return Err(
                "For roundups, the divisions has to be power of 2 or 0 to disable roundup ".into(),
            );
        }
        if boundary == ">" {
            for d in divisions.iter_mut().skip(last + 1) {
                *d = n;
            }
        } else {
            let mb = to_size(key, boundary)?;
            if !mb.is_power_of_two() {
                return Err("For roundups, the intervals have to be power of 2 ".into());
            }
            let index = (mb.ilog2() as usize).min(INTERVALS - 1);
            if first_value {
                for d in divisions.iter_mut().take(index) {
                    *d = n;
                }
                first_value = false;
            }
            divisions[index] = n;
            last = index;
        }
        at += 3;
        if tokens.get(at).is_some_and(|t| t == ",") {
            at += 1;
        }
    }
    if at >= tokens.len() {
        return Err(
            "Expected closing bracket ']' in ConfigTokenizer but reached end of config".into(),
        );
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipes_lines_read_as_pytorch_reads_them() {
        let c = TorchConf::parse("expandable_segments:True,max_split_size_mb:128").unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, 128 << 20);
        let c = TorchConf::parse(" garbage_collection_threshold : 0.6 , max_split_size_mb:64MB")
            .unwrap();
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(c.max_split_size, 64 << 20, "stoull stops at the unit");
        let c = TorchConf::parse("roundup_power2_divisions:[256:1,512:2,>:4]").unwrap();
        assert_eq!(c.roundup_power2_divisions[..8], [1; 8]);
        assert_eq!(c.roundup_power2_divisions[8], 1);
        assert_eq!(c.roundup_power2_divisions[9], 2);
        assert_eq!(c.roundup_power2_divisions[10..], [4; 6]);
        let c =
            TorchConf::parse("roundup_power2_divisions:4,pinned_num_register_threads:8").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; INTERVALS]);
        assert_eq!(TorchConf::parse("").unwrap(), TorchConf::default());
    }

    #[test]
    fn lines_pytorch_refuses_say_what_pytorch_says() {
        for (line, says) in [
            ("max_split_size_mb:16", "too small, must be >= 20"),
            ("garbage_collection_threshold:1.0", "set it in (0.0, 1.0)"),
            ("expandable_segments:true", "Expected 'True' or 'False'"),
            ("max_split_size", "Unrecognized key 'max_split_size'"),
            ("roundup_power2_divisions:3", "power of 2"),
            ("per_process_memory_fraction:1.5", "[0.0, 1.0]"),
            ("backend:magic", "Unknown allocator backend"),
            ("max_split_size_mb", "Index out of bounds"),
        ] {
            let err = TorchConf::parse(line).unwrap_err();
            assert!(err.contains(says), "{}: {}", line, err);
        }
    }
}
