//! The simulator's knobs, read once from `HIPSIM_*` environment variables on first use.
//! A value that does not parse earns one warning on stderr and leaves the default in place, so a
//! typo never changes what a test measures without saying so.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;
use std::time::Duration;

use crate::cost::{self, Costs};

const GIB: u64 = 1 << 30;

/// The ROCm release whose known faults are on by default (`HIPSIM_ROCM`). Each fault keeps its
/// own knob, which wins over the release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// What ROCm's current `clr` sources do (the default).
    Current,
    /// ROCm 7.2 (`7.2`): `hipRuntimeGetVersion` says HIP 7.2.26015 (the build named in
    /// torch_memory_saver#84), released virtual memory stays charged until its address range is
    /// freed, and `hipMemSetAccess` checks sizes from the reservation's first mapping; both
    /// unfixed in every 7.2.x so far (see `DeferredRelease::UntilRangeFreed` and
    /// `Config::vmm_set_access_from_first`).
    Rocm72,
}

/// When the memory of a released virtual memory handle goes back to its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferredRelease {
    /// At release, as ROCm's clr intends (`hipMemRelease` frees the handle's memory).
    Never,
    /// Only when the address range it was last mapped in is freed with `hipMemAddressFree`
    /// (`1`; on by default with `HIPSIM_ROCM=7.2`). ROCm 7.2 on Linux: `hipMemUnmap` +
    /// `hipMemRelease` leave `hipMemGetInfo`'s free unchanged while the range stays reserved
    /// (fzyzcjy/torch_memory_saver#83, a regression from 7.0; ROCm/ROCm#6021, 7.2 and
    /// 7.11-preview), and freeing the range gives it back: torch_memory_saver#84 frees and
    /// re-reserves the range, as vllm-project/vllm#37533 does. The cause is ROCr's
    /// `~MappedHandleAllowedAgent` keeping the imported dma-buf of the CPU agent; its fix
    /// (ROCm/rocm-systems#4363) is on develop only, in no 7.2.x through 7.2.4
    /// (radixark/miles#1680).
    UntilRangeFreed,
    /// As `1`, but only while other handles stay mapped in that range (`in-use`): the same
    /// fault seen from a range still in use, as a pool's is, which a check on a range of its
    /// own cannot see. A fault knob.
    WhileRangeInUse,
}

/// What a device looks like and which allocation calls fail on purpose.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Bytes each device can hand out (`HIPSIM_VRAM`, default 16 GiB).
    pub vram: u64,
    /// Number of devices (`HIPSIM_DEVICES`, default 1; 0 simulates a machine without a GPU).
    pub devices: i32,
    /// Busy-wait added to every allocation call and every free (`HIPSIM_LATENCY_US`).
    pub latency: Duration,
    /// An APU (`HIPSIM_INTEGRATED=1`): attribute `Integrated` is 1 and memory queries report
    /// `reported_vram` as the total, while allocations up to `vram` still succeed.
    pub integrated: bool,
    /// Total that memory queries report (`HIPSIM_REPORTED_VRAM`; only read when integrated;
    /// default the smaller of 15.49 GiB, what Strix Halo reports, and half of `vram`).
    pub reported_vram: u64,
    /// 1-based numbers of allocation calls that fail (`HIPSIM_FAIL_NTH=3,7`), counted over
    /// every allocating call that gets past its argument checks and asks for at least one byte.
    pub fail_nth: Vec<u64>,
    /// Probability that an allocation call fails (`HIPSIM_FAIL_PROB`, 0..=1).
    pub fail_prob: f64,
    /// Seed of the generator behind `fail_prob` (`HIPSIM_SEED`, default 0).
    pub seed: u64,
    /// Allocations larger than this fail (`HIPSIM_FAIL_ABOVE`).
    pub fail_above: Option<u64>,
    /// Virtual memory management (`HIPSIM_VMM`, default on; Linux only): off, `hipMemCreate`,
    /// `hipMemMap` and the rest answer `hipErrorNotSupported` and the attribute
    /// `VirtualMemoryManagementSupported` reads 0, as on a runtime or device without it.
    pub vmm: bool,
    /// `hipMemSetAccess` answers `hipErrorInvalidValue` while the device claims virtual memory
    /// support (`HIPSIM_VMM_SETACCESS_FAILS=1`), as reported for RDNA4 and gfx1151 parts.
    pub vmm_set_access_fails: bool,
    /// When memory of a released handle goes back to the device (`HIPSIM_VMM_DEFERRED_RELEASE`;
    /// default `Never`, `UntilRangeFreed` under `HIPSIM_ROCM=7.2`).
    pub vmm_deferred_release: DeferredRelease,
    /// `hipMemSetAccess` as ROCm 7.2's clr checks it (`HIPSIM_VMM_SETACCESS_FROM_FIRST=1`; on by
    /// default under `HIPSIM_ROCM=7.2`): besides covering whole mappings from `ptr`, `size` must
    /// equal the summed sizes of the first mappings of the reservation holding `ptr`, counted in
    /// the order they were mapped (clr walked `parent()->subBuffers()`, not from `ptr`'s own
    /// mapping), else `hipErrorInvalidValue`. So a legal call on a mapping that is not its
    /// reservation's first fails unless the sizes happen to add up: SWDEV-568260,
    /// ROCm/rocm-systems#2516 (a pool of mappings of 4, 8 and 8 MiB in one reservation), fixed
    /// on develop by ROCm/rocm-systems#2451 (and #6977, which saw it on gfx942 with ROCm 7.2).
    pub vmm_set_access_from_first: bool,
    /// The ROCm release whose faults are on by default (`HIPSIM_ROCM`).
    pub release: Release,
    /// The runtime calls some of its own exports through the dynamic linker, as one linked
    /// without `-Bsymbolic` does (`HIPSIM_SELF_CALLS=1`; `selfcall`).
    pub self_calls: bool,
    /// What each driver call costs by size (`HIPSIM_COSTS=h100` for the H100's, then
    /// `HIPSIM_COST_<CALL>` per call; `cost`); default nothing.
    pub costs: Costs,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            vram: 16 * GIB,
            devices: 1,
            latency: Duration::ZERO,
            integrated: false,
            reported_vram: 16 * GIB,
            fail_nth: Vec::new(),
            fail_prob: 0.0,
            seed: 0,
            fail_above: None,
            vmm: true,
            vmm_set_access_fails: false,
            vmm_deferred_release: DeferredRelease::Never,
            vmm_set_access_from_first: false,
            release: Release::Current,
            self_calls: false,
            costs: Costs::default(),
        }
    }
}

/// The process's configuration, parsed from the environment on the first call.
pub fn get() -> &'static Config {
    static ONCE: Once = Once::new();
    static CONFIG: AtomicPtr<Config> = AtomicPtr::new(ptr::null_mut());
    ONCE.call_once(|| {
        let parsed = Config::from_vars(|name| std::env::var(name).ok(), &mut warn);
        CONFIG.store(Box::into_raw(Box::new(parsed)), Ordering::Release);
    });
    // SAFETY: stored once above from a leaked Box and never freed or written again.
    unsafe { &*CONFIG.load(Ordering::Acquire) }
}

fn warn(message: &str) {
    eprintln!("hipsim (simulated HIP runtime): {}", message);
}

impl Config {
    /// Builds the configuration from a variable lookup; `warn` hears about each bad value.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>, warn: &mut dyn FnMut(&str)) -> Config {
        const SIZE: &str = "a size such as 16GiB, 512MiB or a byte count";
        let d = Config::default();
        let vram = knob(&get, warn, "HIPSIM_VRAM", SIZE, |v| {
            parse_size(v).filter(|&n| n > 0)
        });
        let devices = knob(&get, warn, "HIPSIM_DEVICES", "a count from 0 to 64", |v| {
            v.parse::<i32>().ok().filter(|n| (0..=64).contains(n))
        });
        let latency = knob(&get, warn, "HIPSIM_LATENCY_US", "microseconds", |v| {
            v.parse().ok().map(Duration::from_micros)
        });
        let integrated = knob(&get, warn, "HIPSIM_INTEGRATED", "0 or 1", parse_bool);
        let reported = knob(&get, warn, "HIPSIM_REPORTED_VRAM", SIZE, |v| {
            parse_size(v).filter(|&n| n > 0)
        });
        let fail_nth = knob(
            &get,
            warn,
            "HIPSIM_FAIL_NTH",
            "call numbers like 3,7",
            |v| {
                v.split(',')
                    .map(|n| n.trim().parse::<u64>().ok().filter(|&n| n > 0))
                    .collect::<Option<Vec<u64>>>()
            },
        );
        let fail_prob = knob(&get, warn, "HIPSIM_FAIL_PROB", "a probability", |v| {
            v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p))
        });
        let seed = knob(&get, warn, "HIPSIM_SEED", "an unsigned integer", |v| {
            v.parse::<u64>().ok()
        });
        let fail_above = knob(&get, warn, "HIPSIM_FAIL_ABOVE", SIZE, parse_size);
        let vmm = knob(&get, warn, "HIPSIM_VMM", "0 or 1", parse_bool);
        let set_access_fails = knob(
            &get,
            warn,
            "HIPSIM_VMM_SETACCESS_FAILS",
            "0 or 1",
            parse_bool,
        );
        let deferred_release = knob(
            &get,
            warn,
            "HIPSIM_VMM_DEFERRED_RELEASE",
            "0, 1 or in-use",
            |v| match v.trim() {
                "in-use" => Some(DeferredRelease::WhileRangeInUse),
                v => parse_bool(v).map(|on| {
                    if on {
                        DeferredRelease::UntilRangeFreed
                    } else {
                        DeferredRelease::Never
                    }
                }),
            },
        );
        let from_first = knob(
            &get,
            warn,
            "HIPSIM_VMM_SETACCESS_FROM_FIRST",
            "0 or 1",
            parse_bool,
        );
        let release = knob(&get, warn, "HIPSIM_ROCM", "7.2 or current", |v| {
            match v.to_ascii_lowercase().as_str() {
                "7.2" => Some(Release::Rocm72),
                "current" | "" => Some(Release::Current),
                _ => None,
            }
        })
        .unwrap_or(d.release);
        let self_calls = knob(&get, warn, "HIPSIM_SELF_CALLS", "0 or 1", parse_bool);
        let preset = knob(&get, warn, "HIPSIM_COSTS", "h100 or none", |v| {
            match v.to_ascii_lowercase().as_str() {
                "h100" => Some(cost::H100),
                "none" | "0" | "" => Some(Costs::default()),
                _ => None,
            }
        });
        let costs = cost::from_vars(preset.unwrap_or(d.costs), &mut |name| {
            knob(&get, &mut *warn, name, cost::FORMAT, cost::parse)
        });

        let rocm72 = release == Release::Rocm72;
        let vram = vram.unwrap_or(d.vram);
        let integrated = integrated.unwrap_or(d.integrated);
        Config {
            vram,
            devices: devices.unwrap_or(d.devices),
            latency: latency.unwrap_or(d.latency),
            integrated,
            reported_vram: match (integrated, reported) {
                (false, _) => vram,
                (true, Some(n)) => n,
                (true, None) => ((15.49 * GIB as f64) as u64).min(vram / 2),
            },
            fail_nth: fail_nth.unwrap_or(d.fail_nth),
            fail_prob: fail_prob.unwrap_or(d.fail_prob),
            seed: seed.unwrap_or(d.seed),
            fail_above: fail_above.or(d.fail_above),
            vmm: vmm.unwrap_or(d.vmm),
            vmm_set_access_fails: set_access_fails.unwrap_or(d.vmm_set_access_fails),
            vmm_deferred_release: deferred_release.unwrap_or(match rocm72 {
                true => DeferredRelease::UntilRangeFreed,
                false => d.vmm_deferred_release,
            }),
            vmm_set_access_from_first: from_first.unwrap_or(rocm72),
            release,
            self_calls: self_calls.unwrap_or(d.self_calls),
            costs,
        }
    }
}

/// Reads and parses one variable; `None` when unset or (after a warning) unparsable.
fn knob<T>(
    get: &dyn Fn(&str) -> Option<String>,
    warn: &mut dyn FnMut(&str),
    name: &str,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let value = get(name)?;
    let parsed = parse(value.trim());
    if parsed.is_none() {
        warn(&format!(
            "ignoring {}={:?}: expected {}; keeping the default",
            name, value, what
        ));
    }
    parsed
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Parses `16GiB`, `512 MiB`, `1.5g`, `4096`: a number with an optional binary unit
/// (K/M/G/T, with or without `B`/`iB`; all powers of 1024).
pub fn parse_size(v: &str) -> Option<u64> {
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    if number.contains('.') {
        let x = number.parse::<f64>().ok()? * (1u64 << shift) as f64;
        (x.is_finite() && x < u64::MAX as f64).then_some(x as u64)
    } else {
        number.parse::<u64>().ok()?.checked_mul(1 << shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Call;

    fn parse(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        let mut warnings = Vec::new();
        let c = Config::from_vars(
            |name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            },
            &mut |w| warnings.push(w.to_string()),
        );
        (c, warnings)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16GiB"), Some(16 << 30));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("512 mb"), Some(512 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("2x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn defaults_without_variables() {
        let (c, w) = parse(&[]);
        assert_eq!(c, Config::default());
        assert!(w.is_empty());
    }

    #[test]
    fn every_knob() {
        let (c, w) = parse(&[
            ("HIPSIM_VRAM", "128GiB"),
            ("HIPSIM_DEVICES", "2"),
            ("HIPSIM_LATENCY_US", "50"),
            ("HIPSIM_INTEGRATED", "1"),
            ("HIPSIM_FAIL_NTH", "3, 7"),
            ("HIPSIM_FAIL_PROB", "0.25"),
            ("HIPSIM_SEED", "42"),
            ("HIPSIM_FAIL_ABOVE", "1GiB"),
            ("HIPSIM_VMM", "0"),
            ("HIPSIM_VMM_SETACCESS_FAILS", "1"),
            ("HIPSIM_VMM_DEFERRED_RELEASE", "1"),
        ]);
        assert!(w.is_empty(), "{:?}", w);
        assert_eq!(c.vram, 128 << 30);
        assert_eq!(c.devices, 2);
        assert_eq!(c.latency, Duration::from_micros(50));
        assert!(c.integrated);
        assert_eq!(c.reported_vram, (15.49 * GIB as f64) as u64);
        assert_eq!(c.fail_nth, vec![3, 7]);
        assert_eq!(c.fail_prob, 0.25);
        assert_eq!(c.seed, 42);
        assert_eq!(c.fail_above, Some(1 << 30));
        assert!(!c.vmm);
        assert!(c.vmm_set_access_fails);
        assert_eq!(c.vmm_deferred_release, DeferredRelease::UntilRangeFreed);
        let (c, w) = parse(&[("HIPSIM_VMM_DEFERRED_RELEASE", "in-use")]);
        assert!(w.is_empty(), "{:?}", w);
        assert_eq!(c.vmm_deferred_release, DeferredRelease::WhileRangeInUse);
        let (c, w) = parse(&[
            ("HIPSIM_VMM_SETACCESS_FROM_FIRST", "1"),
            ("HIPSIM_COST_MALLOC", "45+12/GiB"),
            ("HIPSIM_SELF_CALLS", "1"),
        ]);
        assert!(w.is_empty(), "{:?}", w);
        assert!(c.vmm_set_access_from_first);
        assert!(c.self_calls);
        assert_eq!(c.costs.get(Call::Malloc).per_gib_us, 12.0);
        assert_eq!(c.release, Release::Current);
        let (c, w) = parse(&[("HIPSIM_COSTS", "h100"), ("HIPSIM_COST_MAP", "5")]);
        assert!(w.is_empty(), "{:?}", w);
        assert_eq!(c.costs.get(Call::Malloc), cost::H100.get(Call::Malloc));
        assert_eq!(c.costs.get(Call::Map).fixed_us, 5.0);
    }

    #[test]
    fn rocm_7_2_turns_on_its_faults_unless_a_knob_says_otherwise() {
        let (c, w) = parse(&[("HIPSIM_ROCM", "7.2")]);
        assert!(w.is_empty(), "{:?}", w);
        assert_eq!(c.release, Release::Rocm72);
        assert_eq!(c.vmm_deferred_release, DeferredRelease::UntilRangeFreed);
        assert!(c.vmm_set_access_from_first);
        let (c, _) = parse(&[
            ("HIPSIM_ROCM", "7.2"),
            ("HIPSIM_VMM_DEFERRED_RELEASE", "0"),
            ("HIPSIM_VMM_SETACCESS_FROM_FIRST", "0"),
        ]);
        assert_eq!(c.vmm_deferred_release, DeferredRelease::Never);
        assert!(!c.vmm_set_access_from_first);
        let (c, w) = parse(&[("HIPSIM_ROCM", "6.9")]);
        assert_eq!((c.release, w.len()), (Release::Current, 1));
    }

    #[test]
    fn reported_total_follows_the_integrated_switch() {
        let (c, _) = parse(&[("HIPSIM_VRAM", "8GiB"), ("HIPSIM_REPORTED_VRAM", "1GiB")]);
        assert_eq!(c.reported_vram, 8 << 30);
        let (c, _) = parse(&[("HIPSIM_VRAM", "8GiB"), ("HIPSIM_INTEGRATED", "1")]);
        assert_eq!(c.reported_vram, 4 << 30);
        let (c, _) = parse(&[("HIPSIM_INTEGRATED", "1"), ("HIPSIM_REPORTED_VRAM", "1GiB")]);
        assert_eq!(c.reported_vram, 1 << 30);
    }

    #[test]
    fn bad_values_warn_once_each_and_keep_defaults() {
        let (c, w) = parse(&[
            ("HIPSIM_VRAM", "lots"),
            ("HIPSIM_DEVICES", "-1"),
            ("HIPSIM_FAIL_NTH", "3,x"),
            ("HIPSIM_FAIL_PROB", "1.5"),
            ("HIPSIM_COST_UNMAP", "12+3/MiB"),
        ]);
        assert_eq!(c, Config::default());
        assert_eq!(w.len(), 5, "{:?}", w);
        assert!(w[0].contains("HIPSIM_VRAM"));
    }
}
