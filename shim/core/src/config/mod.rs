//! The one configuration table. Every knob is a row of [`KEYS`]: its name, default and help, read
//! from `ROCMGUARD_<NAME>` variables or from one `ROCMGUARD_CONF=name:value,name:value` line (the
//! way `PYTORCH_HIP_ALLOC_CONF` works). Bad values warn and keep the default, except a bad cap:
//! a user who asked for a cap must never run without one unknowingly, so an unreadable
//! `vram_limit` is an error and the cap becomes 0 (no device memory) until it is fixed.

use crate::size::{format_size, parse_size, Limit};

/// The variables that turn PyTorch's cache off, so that its every allocation and free reaches
/// `hipMalloc`/`hipFree`: PyTorch checks only that one is set (`forceUncachedAllocator` in
/// c10/cuda/CUDACachingAllocator.cpp); the HIP name is the one the README's recipe sets.
pub const PYTORCH_CACHE_OFF: [&str; 2] = [
    "PYTORCH_NO_HIP_MEMORY_CACHING",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
];

/// What reuse out of one stream's order cost with PyTorch's cache off, against PyTorch's cache
/// (docs/benchmarks.md, sessions 20 and 33): told by the guard when a program makes its first
/// stream, and by `rocmguard tune` where a trace shows several.
pub const STREAMS_STEP_COST: &str = "DDP 37% slower on one H100, FSDP2 6.4% on one H200";

/// How the shim treats unified memory (integrated GPUs whose memory queries misreport).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UmaMode {
    /// Unified-memory view on integrated devices only.
    Auto,
    On,
    Off,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Most device memory the program may hold; `None` = all of it, `0` or `0%` = none of it.
    pub vram_limit: Option<Limit>,
    /// Why the cap given could not be read: then `vram_limit` is 0 (fail safe), and this error
    /// is said once even with the log off (`rocmguard run` stops before the program starts).
    pub invalid_cap: Option<String>,
    /// Bytes that must stay free on the device after any growth.
    pub headroom: u64,
    /// Cached segments are released once reserved passes `trim_threshold x cap`.
    pub trim_threshold: f64,
    /// Blocks at least this large are never split (`max_split_size_mb`).
    pub max_split: Option<u64>,
    /// Attempts after the first failed growth, each after trimming and synchronizing.
    pub retries: u32,
    /// Bytes reserved in 256 MiB segments at first use.
    pub warmup: u64,
    /// Build segments from the device's virtual memory where it has it.
    pub vmm: bool,
    /// Largest piece of device memory mapped at once in a virtual segment (a multiple of 2 MiB).
    pub piece_size: u64,
    /// Share of the peak live memory the pool may hold past it before it gives idle memory back.
    pub peak_slack: f64,
    /// Log level: error, warn, info, debug or trace.
    pub log: String,
    /// Write the log here as well as to stderr.
    pub log_file: Option<String>,
    /// Print the per-device stats table at exit.
    pub stats: bool,
    /// Pass every call straight through.
    pub disable: bool,
    /// A background thread makes freed blocks reusable by synchronizing the device.
    pub reclaim: bool,
    /// Reuse freed blocks at once while all the program's work is in one stream's order.
    pub ordered_reuse: bool,
    /// Record every hooked call to this file (`%p` = pid).
    pub trace: Option<String>,
    pub uma: UmaMode,
    /// Host memory kept out of the unified-memory ceiling.
    pub host_reserve: Limit,
    /// Processes of this user naming the same group share one cap per device.
    pub group: Option<String>,
}

/// One row of the configuration table.
pub struct Key {
    pub name: &'static str,
    /// A valid value, for error messages.
    pub example: &'static str,
    pub default: &'static str,
    pub help: &'static str,
    set: fn(&mut Config, &str) -> Result<(), String>,
}

/// Options whose name is not the key's: `--cap` is what people say for a VRAM limit.
const ALIASES: &[(&str, &str)] = &[("vram_limit", "cap")];

impl Key {
    /// The environment variable that sets this key.
    pub fn var(&self) -> String {
        format!("ROCMGUARD_{}", self.name.to_ascii_uppercase())
    }

    /// Its command-line option (without the dashes): `cap` for `vram_limit`, `trim-threshold`
    /// for `trim_threshold`.
    pub fn option_name(&self) -> String {
        ALIASES
            .iter()
            .find(|(name, _)| *name == self.name)
            .map_or_else(
                || self.name.replace('_', "-"),
                |(_, alias)| alias.to_string(),
            )
    }

    /// Checks `value` with the setter the guard uses; the error says why.
    pub fn check(&self, value: &str) -> Result<(), String> {
        (self.set)(&mut Config::default(), value)
    }

    /// A key that reads `yes` and `no` as two different settings and refuses other words is a
    /// switch: `--stats` alone means `--stats=1`.
    pub fn is_switch(&self) -> bool {
        let setting = |value: &str| {
            let mut config = Config::default();
            let ok = (self.set)(&mut config, value).is_ok();
            (config, ok)
        };
        let (yes, yes_ok) = setting("yes");
        let (no, no_ok) = setting("no");
        let (_, other_ok) = setting("sometimes");
        yes_ok && no_ok && !other_ok && yes != no
    }
}

/// Finds a key as people may write it: `trim_threshold`, `trim-threshold`, `TRIM_THRESHOLD`,
/// `ROCMGUARD_TRIM_THRESHOLD`, or an option alias such as `cap`.
pub fn find_key(name: &str) -> Result<&'static Key, String> {
    let lower = name.trim().to_ascii_lowercase().replace('-', "_");
    let bare = lower.strip_prefix("rocmguard_").unwrap_or(&lower);
    let bare = ALIASES
        .iter()
        .find(|(_, alias)| *alias == bare)
        .map_or(bare, |(key, _)| key);
    KEYS.iter().find(|k| k.name == bare).ok_or_else(|| {
        format!(
            "unknown key `{}`; the keys are: {}",
            name,
            KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
        )
    })
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(format!("`{}` is not a boolean (use 1 or 0)", v)),
    }
}

fn parse_optional_size(v: &str) -> Result<Option<u64>, String> {
    match v.trim() {
        "" | "none" | "unlimited" => Ok(None),
        t => parse_size(t).map(Some),
    }
}

/// A share written `25%`, `0.25` or `1/64`, from 0 to 4.
fn parse_share(v: &str) -> Result<f64, String> {
    let t = v.trim();
    let share = if let Some(p) = t.strip_suffix('%') {
        p.trim().parse::<f64>().map(|p| p / 100.0)
    } else if let Some((n, d)) = t.split_once('/') {
        n.trim()
            .parse::<f64>()
            .and_then(|n| d.trim().parse::<f64>().map(|d| n / d))
    } else {
        t.parse::<f64>()
    };
    match share {
        Ok(s) if (0.0..=4.0).contains(&s) => Ok(s),
        Ok(_) => Err(format!("`{}` is not a share from 0 to 4 (400%)", v)),
        Err(_) => Err(format!("`{}` is not a share (try 25%, 0.25 or 1/64)", v)),
    }
}

/// The table. Defaults are strings run through the same setters as user values.
pub const KEYS: &[Key] = &[
    Key {
        name: "vram_limit",
        example: "20GiB",
        default: "none",
        help: "Cap on device memory the program may hold: bytes (20GiB, 20G) or a share of the device (85%). none = the whole device; 0 or 0% = no device memory (every allocation refused, to test out-of-memory handling). An invalid or empty value is an error and refuses every allocation.",
        set: |c, v| {
            c.vram_limit = match v.trim() {
                // `--cap "$CAP"` with CAP unset: a cap was asked for, so never read as none.
                "" => return Err("the value is empty (an unset variable?)".to_string()),
                "none" | "unlimited" | "100%" => None,
                t => Some(Limit::parse(t)?),
            };
            Ok(())
        },
    },
    Key {
        name: "headroom",
        example: "512MiB",
        default: "0",
        help: "Bytes that must stay free on the device after the pool grows (room for runtime and library workspaces).",
        set: |c, v| parse_size(v).map(|b| c.headroom = b),
    },
    Key {
        name: "trim_threshold",
        example: "0.7",
        default: "1",
        help: "Release cached segments, oldest first, once reserved memory passes this share of the cap (garbage_collection_threshold); 1 = only when a request needs the room.",
        set: |c, v| {
            let t: f64 = v.trim().parse().map_err(|_| format!("`{}` is not a number", v))?;
            if !(t > 0.0 && t <= 1.0) {
                return Err(format!("`{}` must be above 0 and at most 1", v));
            }
            c.trim_threshold = t;
            Ok(())
        },
    },
    Key {
        name: "max_split",
        example: "64MiB",
        default: "none",
        help: "Blocks this large or larger are never split (max_split_size_mb); none = split any block.",
        set: |c, v| parse_optional_size(v).map(|s| c.max_split = s),
    },
    Key {
        name: "retries",
        example: "3",
        default: "3",
        help: "Attempts after an out-of-memory from the device, each after trimming the cache and synchronizing.",
        set: |c, v| {
            let r: u32 = v.trim().parse().map_err(|_| format!("`{}` is not a count", v))?;
            if r > 100 {
                return Err(format!("`{}` is more than 100 attempts", v));
            }
            c.retries = r;
            Ok(())
        },
    },
    Key {
        name: "warmup",
        example: "4GiB",
        default: "0",
        help: "Bytes to reserve in 256 MiB segments at first use, before the model loads.",
        set: |c, v| parse_size(v).map(|b| c.warmup = b),
    },
    Key {
        name: "vmm",
        example: "0",
        default: "1",
        help: "Use the device's virtual memory where it offers it: segments are reserved address ranges backed only under live blocks, so free memory between them goes back to the device (1 or 0; 0 = segments from the plain allocator).",
        set: |c, v| parse_bool(v).map(|b| c.vmm = b),
    },
    Key {
        name: "piece_size",
        example: "8MiB",
        default: "16MiB",
        help: "Largest piece of device memory a virtual segment maps at once, and so the most that one long-lived block can keep from going back: smaller pieces bring peak memory closer to what the program holds, at the cost of more driver calls (a multiple of 2 MiB).",
        set: |c, v| {
            let b = parse_size(v)?;
            if b == 0 || b % (2 << 20) != 0 {
                return Err(format!("`{}` is not a multiple of 2 MiB (the device's page)", v));
            }
            c.piece_size = b;
            Ok(())
        },
    },
    Key {
        name: "peak_slack",
        example: "25%",
        default: "1/64",
        help: "Memory the pool may hold past the program's peak live memory before it gives idle memory back, as a share of that peak (1/64, 2%, 0.25; at most 4): more means fewer driver calls where the program's layout changes between steps, at up to that much more peak memory.",
        set: |c, v| parse_share(v).map(|s| c.peak_slack = s),
    },
    Key {
        name: "log",
        example: "info",
        default: "warn",
        help: "Log level on stderr: error, warn, info, debug or trace.",
        set: |c, v| {
            let l = v.trim().to_ascii_lowercase();
            match l.as_str() {
                "error" | "warn" | "info" | "debug" | "trace" | "off" => {
                    c.log = l;
                    Ok(())
                }
                _ => Err(format!("`{}` is not a level (error, warn, info, debug, trace, off)", v)),
            }
        },
    },
    Key {
        name: "log_file",
        example: "/tmp/rocmguard.log",
        default: "none",
        help: "Also append the log to this file (for programs without a console).",
        set: |c, v| {
            c.log_file = optional_text(v);
            Ok(())
        },
    },
    Key {
        name: "stats",
        example: "1",
        default: "0",
        help: "Print the per-device stats table at exit (1 or 0).",
        set: |c, v| parse_bool(v).map(|b| c.stats = b),
    },
    Key {
        name: "disable",
        example: "1",
        default: "0",
        help: "Pass every call straight to the runtime, untouched (1 or 0).",
        set: |c, v| parse_bool(v).map(|b| c.disable = b),
    },
    Key {
        name: "reclaim",
        example: "0",
        default: "1",
        help: "Release freed blocks in the background: a thread synchronizes the device while freed blocks wait, so allocations rarely wait for the GPU (1 or 0).",
        set: |c, v| parse_bool(v).map(|b| c.reclaim = b),
    },
    Key {
        name: "ordered_reuse",
        example: "0",
        default: "1",
        help: "Reuse a freed block at once while the program queues all its work on one device's default stream, which runs it in order (as PyTorch's own cache reuses within a stream); from the first stream it creates, a freed block waits for a device synchronize (1 or 0; 0 = always wait).",
        set: |c, v| parse_bool(v).map(|b| c.ordered_reuse = b),
    },
    Key {
        name: "trace",
        example: "/tmp/trace-%p.csv.gz",
        default: "none",
        help: "Record every hooked call to this file, RMM CSV (.gz to compress); %p becomes the process id.",
        set: |c, v| {
            c.trace = optional_text(v);
            Ok(())
        },
    },
    Key {
        name: "uma",
        example: "1",
        default: "auto",
        help: "Unified-memory view for integrated GPUs: auto (integrated devices only), 1 or 0.",
        set: |c, v| {
            c.uma = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => UmaMode::Auto,
                other => {
                    if parse_bool(other)? {
                        UmaMode::On
                    } else {
                        UmaMode::Off
                    }
                }
            };
            Ok(())
        },
    },
    Key {
        name: "host_reserve",
        example: "8GiB",
        default: "10%",
        help: "Host memory kept for the system in unified-memory mode: bytes or a share of RAM.",
        set: |c, v| Limit::parse(v).map(|l| c.host_reserve = l),
    },
    Key {
        name: "group",
        default: "none",
        example: "desktop",
        help: "Share the cap with every process of this user naming the same group (letters, digits, - and _): vram_limit is then the group's total per device.",
        set: |c, v| {
            let group = optional_text(v);
            let valid = |g: &String| {
                g.len() <= 64
                    && g
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
            };
            match group {
                Some(g) if !valid(&g) => Err(format!(
                    "{:?} is not a group name: use letters, digits, - and _ (up to 64), e.g. desktop",
                    g
                )),
                group => {
                    c.group = group;
                    Ok(())
                }
            }
        },
    },
];

fn optional_text(v: &str) -> Option<String> {
    match v.trim() {
        "" | "none" => None,
        t => Some(t.to_string()),
    }
}

impl Default for Config {
    fn default() -> Config {
        let mut c = Config {
            vram_limit: None,
            invalid_cap: None,
            headroom: 0,
            trim_threshold: 1.0,
            max_split: None,
            retries: 0,
            warmup: 0,
            vmm: true,
            piece_size: 0,
            peak_slack: 0.0,
            log: String::new(),
            log_file: None,
            stats: false,
            disable: false,
            reclaim: true,
            ordered_reuse: true,
            trace: None,
            uma: UmaMode::Auto,
            host_reserve: Limit::Percent(10.0),
            group: None,
        };
        for key in KEYS {
            (key.set)(&mut c, key.default).expect("every default in KEYS parses");
        }
        c
    }
}

impl Config {
    /// Reads the configuration from `(name, value)` pairs such as `std::env::vars()`. Returns it
    /// with one warning per bad value or unknown `ROCMGUARD_` name; bad values keep the default.
    /// `ROCMGUARD_CONF` is applied first, so a variable of its own wins over the line.
    pub fn from_vars<I, K, V>(vars: I) -> (Config, Vec<String>)
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        let mut singles = Vec::new();
        for (k, v) in vars {
            let (k, v) = (k.as_ref(), v.as_ref());
            if k == "ROCMGUARD_CONF" {
                for item in v.split(',').filter(|s| !s.trim().is_empty()) {
                    let mut parts = item.splitn(2, [':', '=']);
                    let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
                    match parts.next() {
                        Some(value) => config.apply(&name, value, "ROCMGUARD_CONF", &mut warnings),
                        None => warnings.push(format!(
                            "rocmguard: ROCMGUARD_CONF item `{}` has no value (write name:value); ignored",
                            item.trim()
                        )),
                    }
                }
            } else if let Some(name) = k.strip_prefix("ROCMGUARD_") {
                singles.push((name.to_ascii_lowercase(), v.to_string(), k.to_string()));
            }
        }
        for (name, value, var) in singles {
            config.apply(&name, &value, &var, &mut warnings);
        }
        let zero = matches!(config.vram_limit, Some(Limit::Bytes(0)))
            || matches!(config.vram_limit, Some(Limit::Percent(p)) if p == 0.0);
        if zero && config.invalid_cap.is_none() {
            warnings.push(format!(
                "rocmguard: the cap is {}: every device allocation will be refused (a test of \
                 out-of-memory handling); ROCMGUARD_VRAM_LIMIT=none (or no --cap) means no cap",
                config
                    .vram_limit
                    .map_or_else(String::new, |l| l.to_string())
            ));
        }
        (config, warnings)
    }

    /// Reads the configuration from this process's environment, as [`Config::from_vars`] does
    /// (variables whose name or value is not Unicode cannot be ours and are skipped).
    pub fn from_env() -> (Config, Vec<String>) {
        Config::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// Sets one key by name; a bad name or value adds a warning and changes nothing.
    pub fn apply(&mut self, name: &str, value: &str, origin: &str, warnings: &mut Vec<String>) {
        match KEYS.iter().find(|k| k.name == name) {
            Some(key) => match (key.set)(self, value) {
                Ok(()) if key.name == "vram_limit" => self.invalid_cap = None,
                Ok(()) => {}
                Err(why) if key.name == "vram_limit" => {
                    self.vram_limit = Some(Limit::Bytes(0));
                    self.invalid_cap = Some(format!(
                        "{} is not a cap: {}; write for example {}={} (or 85%, or none for no cap). \
                         Until it is fixed no device memory is handed out: every allocation is refused",
                        said(origin, key, value),
                        why,
                        key.var(),
                        key.example
                    ));
                }
                Err(why) => warnings.push(format!(
                    "rocmguard: {}: {}; using the default {} (for example {}={})",
                    said(origin, key, value),
                    why,
                    key.default,
                    key.var(),
                    key.example
                )),
            },
            None if is_foreign(name) => {}
            None => warnings.push(format!(
                "rocmguard: {} names unknown key `{}`; known keys: {}",
                origin,
                name,
                KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// The cap in bytes for a device of `total` bytes.
    pub fn cap_for(&self, total: u64) -> u64 {
        self.vram_limit
            .map_or(total, |l| l.resolve(total).min(total))
    }

    /// When a cap in bytes is above a device of `total` bytes (the cap is then the device), a
    /// line naming both, to say once.
    pub fn cap_above_device(&self, total: u64) -> Option<String> {
        match self.vram_limit {
            Some(Limit::Bytes(cap)) if cap > total => Some(format!(
                "the cap {} is above the device's {}: the cap is the whole device",
                format_size(cap),
                format_size(total)
            )),
            _ => None,
        }
    }

    /// One line for the log at first use.
    pub fn summary(&self) -> String {
        let cap = match (&self.invalid_cap, self.vram_limit) {
            (Some(_), _) => "0 B (the value given is invalid)".to_string(),
            (None, None) => "none".to_string(),
            (None, Some(l)) => l.to_string(),
        };
        format!(
            "cap {} | headroom {} | trim at {:.0}% | max split {} | retries {}",
            cap,
            format_size(self.headroom),
            self.trim_threshold * 100.0,
            self.max_split
                .map_or_else(|| "none".to_string(), format_size),
            self.retries
        )
    }
}

/// A setting as the user wrote it: `ROCMGUARD_VRAM_LIMIT=banana`, `ROCMGUARD_CONF vram_limit:banana`.
fn said(origin: &str, key: &Key, value: &str) -> String {
    if origin == key.var() {
        format!("{}={}", origin, value)
    } else {
        format!("{} {}:{}", origin, key.name, value)
    }
}

/// `ROCMGUARD_` variables that are not pool settings: read by the launcher, the preload's
/// bookkeeping or the simulator, so they must not be reported as typos.
fn is_foreign(name: &str) -> bool {
    matches!(
        name,
        "conf" | "lib" | "active" | "profile" | "sysroot" | "stats_dir"
    )
}

#[cfg(test)]
mod tests;
