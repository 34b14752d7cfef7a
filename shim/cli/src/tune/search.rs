//! The settings `rocmguard tune` tries and how it scores them: every combination of the
//! `PYTORCH_HIP_ALLOC_CONF` keys the recipes tell users to turn, and rocmguard's pool, each
//! replayed over every trace (peak reserved, out-of-memory errors at `--capacity`, the smallest
//! device that completes the trace, driver calls and time).

use std::cmp::Ordering;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;

use serde::Serialize;

use crate::replay::load::Trace;
use crate::replay::policy::{self, Policy, UNLIMITED};
use crate::replay::progress::Progress;

/// `max_split_size_mb` values the recipes name (512, then 256, then 128), and one below.
const MAX_SPLIT_MB: [Option<u64>; 5] = [None, Some(512), Some(256), Some(128), Some(64)];
const DIVISIONS: [Option<u64>; 3] = [None, Some(4), Some(8)];
/// `garbage_collection_threshold` values the recipes name.
const GC_THRESHOLDS: [Option<f64>; 3] = [None, Some(0.6), Some(0.8)];
/// The memory fraction tried with a garbage-collection threshold: PyTorch collects only under a
/// fraction below 1 (`allowed_memory_maximum`), so the threshold alone does nothing.
pub const GC_FRACTION: f64 = 0.99;

/// The pool's piece sizes tried, coarsest (fewest driver calls) first; `None` is the default.
/// Finer pieces need less memory and cost driver calls in every step whose shapes change, so
/// they are picked only where a capacity asks for them.
const PIECE_SIZES: [Option<u64>; 4] = [None, Some(8 << 20), Some(4 << 20), Some(2 << 20)];

/// The pool's slack over the peak live tried beside its default (1/64): a program whose layout
/// changes at its peak then maps and gives back nothing in its later steps, for up to that much
/// more memory (seg_infer on an H200: +2.1% -> +0.2% step time, 1.049 -> 1.244). Shown, never
/// picked: tune ranks by memory.
pub const SPEED_SLACK: &str = "25%";

/// A piece size as `rocmguard run --piece-size` takes it, one word (whole MiB).
pub(crate) fn mib(bytes: u64) -> String {
    format!("{}MiB", bytes >> 20)
}

/// One setting tried.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The `PYTORCH_HIP_ALLOC_CONF` value; empty for PyTorch's defaults. `None` for the pool.
    pub conf: Option<String>,
    /// For the pool: its `piece_size`, `None` for the default.
    pub piece_size: Option<u64>,
    /// For the pool: its `peak_slack` ([`SPEED_SLACK`]), `None` for the default.
    pub peak_slack: Option<&'static str>,
    pub policy: Policy,
}

impl Candidate {
    /// The pool with these settings (`None`: its default), its policy named by the same keys.
    fn pool(piece_size: Option<u64>, peak_slack: Option<&'static str>) -> Candidate {
        let keys: Vec<String> = piece_size
            .map(|p| format!("piece_size={}", mib(p)))
            .into_iter()
            .chain(peak_slack.map(|s| format!("peak_slack={}", s)))
            .collect();
        let policy = if keys.is_empty() {
            "rocmguard".to_string()
        } else {
            format!("rocmguard:{}", keys.join(","))
        };
        Candidate {
            conf: None,
            piece_size,
            peak_slack,
            policy: Policy::parse(&policy).expect("the pool's settings parse"),
        }
    }

    pub fn label(&self) -> String {
        match &self.conf {
            None => match self.run_options() {
                options if options.is_empty() => {
                    "rocmguard's pool (PyTorch's cache off)".to_string()
                }
                options => format!("rocmguard's pool,{}", options),
            },
            Some(c) if c.is_empty() => "(unset: PyTorch's defaults)".to_string(),
            Some(c) => c.clone(),
        }
    }

    /// For the pool, the options to give `rocmguard run`: "" for the defaults.
    pub fn run_options(&self) -> String {
        let pieces = self
            .piece_size
            .map_or(String::new(), |p| format!(" --piece-size {}", mib(p)));
        let slack = self
            .peak_slack
            .map_or(String::new(), |s| format!(" --peak-slack {}", s));
        pieces + &slack
    }

    /// How many keys it sets: of equal figures, the shorter line wins.
    fn keys(&self) -> usize {
        self.conf
            .as_deref()
            .map_or(0, |c| c.split(',').filter(|k| !k.is_empty()).count())
    }
}

/// Every combination; garbage collection only where a capacity makes it act.
pub fn candidates(with_capacity: bool) -> Vec<Candidate> {
    let gcs: &[Option<f64>] = if with_capacity {
        &GC_THRESHOLDS
    } else {
        &GC_THRESHOLDS[..1]
    };
    let mut out = Vec::new();
    for expandable in [false, true] {
        for split in MAX_SPLIT_MB {
            for divisions in DIVISIONS {
                for gc in gcs {
                    let mut keys = Vec::new();
                    if expandable {
                        keys.push("expandable_segments:True".to_string());
                    }
                    if let Some(mb) = split {
                        keys.push(format!("max_split_size_mb:{}", mb));
                    }
                    if let Some(d) = divisions {
                        keys.push(format!("roundup_power2_divisions:{}", d));
                    }
                    if let Some(t) = gc {
                        keys.push(format!("garbage_collection_threshold:{}", t));
                        keys.push(format!("per_process_memory_fraction:{}", GC_FRACTION));
                    }
                    let conf = keys.join(",");
                    let policy =
                        Policy::parse(&format!("pytorch:{}", conf)).expect("tune's settings parse");
                    out.push(Candidate {
                        conf: Some(conf),
                        piece_size: None,
                        peak_slack: None,
                        policy,
                    });
                }
            }
        }
    }
    let pools = PIECE_SIZES.iter().map(|&p| (p, None));
    out.extend(
        pools
            .chain([(None, Some(SPEED_SLACK))])
            .map(|(p, s)| Candidate::pool(p, s)),
    );
    out
}

/// One setting on one trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    pub peak_live: u64,
    pub peak_reserved: u64,
    pub ratio: f64,
    pub ooms: u64,
    /// `null` when no device completes the trace.
    pub min_capacity: Option<u64>,
    pub driver_calls: u64,
    pub driver_ms: f64,
}

/// One setting over all traces.
#[derive(Clone, Debug)]
pub struct Scored {
    pub candidate: Candidate,
    /// In the order of the traces.
    pub runs: Vec<Run>,
}

impl Scored {
    /// Whether every trace completes at the capacity.
    pub fn completes(&self) -> bool {
        self.runs.iter().all(|r| r.ooms == 0)
    }

    pub fn mean_ratio(&self) -> f64 {
        self.runs.iter().map(|r| r.ratio).sum::<f64>() / self.runs.len().max(1) as f64
    }

    /// Smallest device over peak live, averaged (infinite when a trace never completes).
    pub fn mean_min_capacity(&self) -> f64 {
        self.runs
            .iter()
            .map(|r| {
                r.min_capacity
                    .map_or(f64::INFINITY, |c| c as f64 / r.peak_live.max(1) as f64)
            })
            .sum::<f64>()
            / self.runs.len().max(1) as f64
    }

    pub fn driver_calls(&self) -> u64 {
        self.runs.iter().map(|r| r.driver_calls).sum()
    }

    /// Modelled driver time over all traces.
    pub fn driver_ms(&self) -> f64 {
        self.runs.iter().map(|r| r.driver_ms).sum()
    }

    /// Issue 23's order: completing at the capacity, then peak reserved, then the smallest
    /// device that completes, then driver calls; of equals, the shorter line. Ratios to peak
    /// live count as equal within 0.001 (the table's precision, below the model's): a 2 MiB
    /// difference must not outweigh four times the driver calls.
    pub fn rank(&self, other: &Scored) -> Ordering {
        let milli = |x: f64| (x * 1000.0).round();
        other
            .completes()
            .cmp(&self.completes())
            .then(milli(self.mean_ratio()).total_cmp(&milli(other.mean_ratio())))
            .then(milli(self.mean_min_capacity()).total_cmp(&milli(other.mean_min_capacity())))
            .then(self.driver_calls().cmp(&other.driver_calls()))
            .then(self.candidate.keys().cmp(&other.candidate.keys()))
    }
}

/// Replays every candidate over every trace on `threads` threads, a step of `progress` per
/// replay set; the results in the candidates' order.
pub fn score(
    candidates: &[Candidate],
    traces: &[Trace],
    capacity: u64,
    threads: usize,
    progress: &Progress,
) -> Vec<Scored> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Scored>>> = Mutex::new(vec![None; candidates.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                let Some(c) = candidates.get(i) else { break };
                let runs = traces
                    .iter()
                    .map(|t| {
                        let r = evaluate(t, &c.policy, capacity);
                        progress.step();
                        r
                    })
                    .collect();
                let scored = Scored {
                    candidate: c.clone(),
                    runs,
                };
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(scored);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

/// One replay at the capacity and the search for the smallest device.
fn evaluate(trace: &Trace, policy: &Policy, capacity: u64) -> Run {
    let o = policy::replay(trace, policy, capacity, false, None);
    let free = if capacity == UNLIMITED {
        o.peak_reserved
    } else {
        policy::replay(trace, policy, UNLIMITED, false, None).peak_reserved
    };
    let search = policy::min_capacity(trace, policy, free);
    Run {
        peak_live: trace.peak_live,
        peak_reserved: o.peak_reserved,
        ratio: if trace.peak_live == 0 {
            0.0
        } else {
            o.peak_reserved as f64 / trace.peak_live as f64
        },
        ooms: o.ooms,
        min_capacity: search.capacity,
        driver_calls: o.source_allocs + o.source_frees,
        driver_ms: o.driver_us / 1e3,
    }
}
