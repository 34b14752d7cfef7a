//! The allocator policies a trace is replayed through, each over a simulated device of a given
//! capacity, and the search for the smallest capacity a policy completes a trace with.

use std::time::{Duration, Instant};

use rocmguard_core::pool::{SEGMENT, SMALL_REQUEST};
use rocmguard_core::{Config, CountingSource, Pool, PoolOptions, KEYS};

use super::cost::{Call, Clock, TimedSource, MEASURED};
use super::load::{Op, Trace};
use super::torch::{self, TorchConf};

/// The capacity of a device without limit: far above any trace (sizes stop at 4 PiB), far enough
/// below `u64::MAX` that the pool's sums cannot wrap.
pub const UNLIMITED: u64 = 1 << 60;

/// Min-capacity searches resolve to this.
pub const RESOLUTION: u64 = SEGMENT;

/// The policies and what they mean, for help and error messages.
pub const POLICIES: [(&str, &str); 4] = [
    (
        "rocmguard[:KEY=VALUE,...]",
        "rocmguard's pool, default options or the given config keys",
    ),
    (
        "pytorch[:CONF]",
        "PyTorch's caching allocator; CONF as in PYTORCH_HIP_ALLOC_CONF",
    ),
    (
        "passthrough",
        "every request straight to the driver: one call per alloc and per free",
    ),
    (
        "recorded",
        "what the recording program's allocator reserved (traces with segment rows)",
    ),
];

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Pool(Box<Config>),
    Torch(Box<TorchConf>),
    Passthrough,
    Recorded,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// As the user wrote it: the name in tables, JSON and plots.
    pub name: String,
    pub kind: Kind,
}

impl Policy {
    /// The comparison run when none is named.
    pub fn defaults() -> Vec<Policy> {
        ["rocmguard", "passthrough", "recorded"]
            .iter()
            .map(|s| Policy::parse(s).expect("default policies parse"))
            .collect()
    }

    /// `rocmguard`, `rocmguard:max_split=64MiB,trim_threshold=0.7`, `passthrough`, `recorded`.
    /// Knobs are the config keys (`ROCMGUARD_<KEY>`), read by the same code as the shim's.
    pub fn parse(spec: &str) -> Result<Policy, String> {
        let (base, knobs) = match spec.split_once(':') {
            Some((b, k)) => (b.trim(), Some(k)),
            None => (spec.trim(), None),
        };
        let kind = match base {
            "rocmguard" => {
                let mut config = Config::default();
                for item in knobs
                    .unwrap_or("")
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                {
                    apply_knob(&mut config, item, spec)?;
                }
                Kind::Pool(Box::new(config))
            }
            "pytorch" => Kind::Torch(Box::new(
                TorchConf::parse(knobs.unwrap_or(""))
                    .map_err(|e| format!("policy `{}`: {}", spec.trim(), e))?,
            )),
            "passthrough" | "recorded" if knobs.is_some() => {
                return Err(format!(
                    "policy `{}` takes no knobs; rocmguard (rocmguard:KEY=VALUE,...) and pytorch \
                     (pytorch:KEY:VALUE,...) do",
                    spec
                ))
            }
            "passthrough" => Kind::Passthrough,
            "recorded" => Kind::Recorded,
            _ => {
                return Err(format!(
                    "unknown policy `{}`; policies:\n{}",
                    spec,
                    POLICIES
                        .iter()
                        .map(|(name, what)| format!("  {:<28} {}", name, what))
                        .collect::<Vec<_>>()
                        .join("\n")
                ))
            }
        };
        Ok(Policy {
            name: spec.trim().to_string(),
            kind,
        })
    }
}

fn apply_knob(config: &mut Config, item: &str, spec: &str) -> Result<(), String> {
    let (name, value) = match item.split_once(['=', ':']) {
        Some((n, v)) => (n.trim().to_ascii_lowercase(), v),
        None => {
            return Err(format!(
                "policy `{}`: knob `{}` has no value (write KEY=VALUE)",
                spec,
                item.trim()
            ))
        }
    };
    if !KEYS.iter().any(|k| k.name == name) {
        return Err(format!(
            "policy `{}`: unknown knob `{}`; knobs: {}",
            spec,
            name,
            KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut warnings = Vec::new();
    config.apply(&name, value, &format!("policy `{}`:", spec), &mut warnings);
    // A bad cap is an error of its own (the shim refuses everything): refuse the policy too.
    if let Some(e) = config.invalid_cap.take() {
        return Err(e.split(". Until").next().unwrap_or(&e).to_string());
    }
    match warnings.first() {
        None => Ok(()),
        // The shim keeps the default on a bad value; a replay asked for this variant, so refuse.
        Some(w) => {
            let w = w.strip_prefix("rocmguard: ").unwrap_or(w);
            Err(w
                .split("; using the default")
                .next()
                .unwrap_or(w)
                .to_string())
        }
    }
}

/// What one replay of a trace through a policy measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub peak_live: u64,
    pub peak_reserved: u64,
    /// Calls to the driver: segments taken and given back.
    pub source_allocs: u64,
    pub source_frees: u64,
    /// Device synchronizes the pool asked for, and its frees of plain memory that waited for
    /// the program's work (see [`super::cost::Clock::waits`]).
    pub syncs: u64,
    /// Modelled time of the driver calls, microseconds ([`super::cost`]).
    pub driver_us: f64,
    /// Allocations that failed at the capacity.
    pub ooms: u64,
    /// Allocations and frees replayed (fewer when the replay stopped at its first OOM).
    pub events: u64,
    pub elapsed: Duration,
}

/// Live and reserved bytes over the trace, kept at a fixed number of points whatever its length:
/// each point holds the highest values of its stretch, so no peak is lost to the downsampling.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub live: Vec<u64>,
    pub reserved: Vec<u64>,
    /// Whether x is the event's number rather than its time (the trace has no times).
    pub by_index: bool,
    /// The trace's length on the x axis: microseconds, or events.
    pub span: u64,
    scale: f64,
    seen: Vec<bool>,
    end: Vec<(u64, u64)>,
}

impl Timeline {
    pub fn new(trace: &Trace, points: usize) -> Timeline {
        let points = points.max(1);
        let last = trace.times.last().copied().unwrap_or(0);
        let by_index = last == 0;
        let span = if by_index {
            trace.ops.len() as u64
        } else {
            last
        };
        Timeline {
            live: vec![0; points],
            reserved: vec![0; points],
            by_index,
            span,
            scale: points as f64 / (span.max(1) as f64 + 1.0),
            seen: vec![false; points],
            end: vec![(0, 0); points],
        }
    }

    pub(super) fn record(&mut self, trace: &Trace, i: usize, live: u64, reserved: u64) {
        let x = if self.by_index {
            i as u64
        } else {
            trace.times[i]
        };
        let b = ((x as f64 * self.scale) as usize).min(self.live.len() - 1);
        self.live[b] = self.live[b].max(live);
        self.reserved[b] = self.reserved[b].max(reserved);
        self.seen[b] = true;
        self.end[b] = (live, reserved);
    }

    /// Points no event fell in carry the values the previous point ended with.
    fn fill(&mut self) {
        let mut last = (0, 0);
        for b in 0..self.live.len() {
            if self.seen[b] {
                last = self.end[b];
            } else {
                self.live[b] = last.0;
                self.reserved[b] = last.1;
            }
        }
    }

    /// What the program asked for over the trace, whatever policy serves it.
    pub fn demand(trace: &Trace, points: usize) -> Timeline {
        let mut t = Timeline::new(trace, points);
        let mut live = 0u64;
        for (i, op) in trace.ops.iter().enumerate() {
            match *op {
                Op::Alloc { size, .. } => live = live.saturating_add(size),
                Op::Free { size, .. } => live = live.saturating_sub(size),
                _ => continue,
            }
            t.record(trace, i, live, 0);
        }
        t.fill();
        t
    }
}

/// Replays `trace` through `policy` on a device of `capacity` bytes. With `stop_at_oom` it stops
/// at the first failed allocation (enough for the capacity search).
pub fn replay(
    trace: &Trace,
    policy: &Policy,
    capacity: u64,
    stop_at_oom: bool,
    mut timeline: Option<&mut Timeline>,
) -> Outcome {
    let start = Instant::now();
    let mut outcome = match &policy.kind {
        Kind::Pool(config) if config.disable => {
            replay_passthrough(trace, capacity, stop_at_oom, timeline.as_deref_mut())
        }
        Kind::Pool(config) => replay_pool(
            trace,
            config,
            capacity,
            stop_at_oom,
            timeline.as_deref_mut(),
        ),
        Kind::Torch(conf) => {
            torch::replay(trace, conf, capacity, stop_at_oom, timeline.as_deref_mut())
        }
        Kind::Passthrough => {
            replay_passthrough(trace, capacity, stop_at_oom, timeline.as_deref_mut())
        }
        Kind::Recorded => replay_recorded(trace, capacity, timeline.as_deref_mut()),
    };
    outcome.elapsed = start.elapsed();
    if let Some(t) = timeline {
        t.fill();
    }
    outcome
}

fn replay_pool(
    trace: &Trace,
    config: &Config,
    capacity: u64,
    stop_at_oom: bool,
    timeline: Option<&mut Timeline>,
) -> Outcome {
    let mut run = PoolRun::new(trace, config, capacity);
    drive(&mut run, trace, stop_at_oom, timeline);
    run.outcome()
}

/// A replay that goes an event at a time: the pool's, PyTorch's model's.
pub(super) trait Run {
    /// Replays event `op` of `trace`.
    fn step(&mut self, trace: &Trace, op: &Op) -> Step;
    /// Bytes the program has asked for and not freed.
    fn live(&self) -> u64;
    /// Bytes the allocator holds from the device now.
    fn reserved(&self) -> u64;
}

/// Replays every event of `trace` through `run` (to the first refusal with `stop_at_oom`),
/// sampling `timeline` after each allocation and free.
pub(super) fn drive(
    run: &mut impl Run,
    trace: &Trace,
    stop_at_oom: bool,
    mut timeline: Option<&mut Timeline>,
) {
    for (i, op) in trace.ops.iter().enumerate() {
        match run.step(trace, op) {
            Step::Skipped => continue,
            Step::Failed if stop_at_oom => break,
            _ => {}
        }
        if let Some(t) = timeline.as_deref_mut() {
            t.record(trace, i, run.live(), run.reserved());
        }
    }
}

/// What one event of a trace came to in a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Done,
    /// An allocation the allocator refused.
    Failed,
    /// A segment row, which only the `recorded` policy reads.
    Skipped,
}

/// One replay of a trace through rocmguard's pool, an event at a time.
pub(super) struct PoolRun {
    pub pool: Pool<TimedSource>,
    /// Pool address of each allocation, 0 while it is not live (the counting device starts far
    /// above 0).
    pub addrs: Vec<u64>,
    pub live: u64,
    ooms: u64,
    events: u64,
}

impl PoolRun {
    pub fn new(trace: &Trace, config: &Config, capacity: u64) -> PoolRun {
        let mut options = PoolOptions::from_config(config, capacity);
        // No other thread can free memory during a replay: waiting before a retry only costs
        // time.
        options.backoff = Duration::ZERO;
        let source = TimedSource {
            inner: CountingSource::new(capacity),
            clock: Clock::new(&MEASURED),
        };
        let pool = Pool::new(source, options);
        // A trace holds one program's requests in the order it made them: with `ordered_reuse`
        // the replay is that of a program with all its work on one stream.
        pool.source().inner.set_in_order(config.ordered_reuse);
        PoolRun {
            pool,
            addrs: vec![0; trace.allocs as usize],
            live: 0,
            ooms: 0,
            events: 0,
        }
    }

    fn outcome(&self) -> Outcome {
        let s = self.pool.stats();
        Outcome {
            peak_live: s.peak_live,
            peak_reserved: s.peak_reserved,
            source_allocs: s.source_allocs,
            source_frees: s.source_frees,
            syncs: s.syncs + self.pool.source().clock.waits(),
            ooms: self.ooms,
            events: self.events,
            driver_us: self.pool.source().clock.us(),
            elapsed: Duration::ZERO,
        }
    }
}

impl Run for PoolRun {
    fn step(&mut self, _: &Trace, op: &Op) -> Step {
        match *op {
            Op::Alloc { id, size } => {
                self.events += 1;
                self.pool.source().clock.program_ran();
                match self.pool.alloc(size) {
                    Ok(addr) => {
                        self.addrs[id as usize] = addr;
                        self.live += size;
                        Step::Done
                    }
                    Err(_) => {
                        self.ooms += 1;
                        Step::Failed
                    }
                }
            }
            Op::Free { id, size } => {
                self.events += 1;
                self.pool.source().clock.program_ran();
                let addr = std::mem::replace(&mut self.addrs[id as usize], 0);
                if addr != 0 {
                    self.pool.free(addr);
                    self.live -= size;
                }
                Step::Done
            }
            Op::SegAlloc { .. } | Op::SegFree { .. } => Step::Skipped,
        }
    }

    fn live(&self) -> u64 {
        self.live
    }

    fn reserved(&self) -> u64 {
        self.pool.source().inner.used()
    }
}

/// What a driver reserves for one request: a multiple of 2 MiB above 1 MiB, 256-byte granules
/// below, packed without loss (the README's ideal-driver baseline, so passthrough is a lower bound
/// of what no pool costs). ROCr rounds VRAM up to its fragment allocator's 2 MiB blocks
/// (`MemoryRegion::BlockAllocator::alloc`, `amd_memory_region.cpp`), as CUDA does.
pub fn driver_size(size: u64) -> u64 {
    let to = if size > SMALL_REQUEST { SEGMENT } else { 256 };
    size.max(1).div_ceil(to) * to
}

fn replay_passthrough(
    trace: &Trace,
    capacity: u64,
    stop_at_oom: bool,
    mut timeline: Option<&mut Timeline>,
) -> Outcome {
    let mut held = vec![false; trace.allocs as usize];
    let mut o = Outcome::default();
    let clock = Clock::new(&MEASURED);
    let (mut live, mut reserved) = (0u64, 0u64);
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            Op::Alloc { id, size } => {
                o.events += 1;
                clock.program_ran();
                let need = driver_size(size);
                if reserved + need > capacity {
                    o.ooms += 1;
                    if stop_at_oom {
                        break;
                    }
                } else {
                    held[id as usize] = true;
                    clock.add(Call::Malloc, need, 1);
                    reserved += need;
                    live += size;
                    o.source_allocs += 1;
                    o.peak_live = o.peak_live.max(live);
                    o.peak_reserved = o.peak_reserved.max(reserved);
                }
            }
            Op::Free { id, size } => {
                o.events += 1;
                clock.program_ran();
                if std::mem::replace(&mut held[id as usize], false) {
                    clock.free(driver_size(size));
                    reserved -= driver_size(size);
                    live -= size;
                    o.source_frees += 1;
                }
            }
            Op::SegAlloc { .. } | Op::SegFree { .. } => continue,
        }
        if let Some(t) = timeline.as_deref_mut() {
            t.record(trace, i, live, reserved);
        }
    }
    o.driver_us = clock.us();
    o.syncs = clock.waits();
    o
}

/// The recording allocator's own segments against the program's live bytes. It cannot fail: the
/// OOMs are the segment allocations that would not have fit in `capacity`.
fn replay_recorded(trace: &Trace, capacity: u64, mut timeline: Option<&mut Timeline>) -> Outcome {
    let mut o = Outcome::default();
    let clock = Clock::new(&MEASURED);
    let (mut live, mut reserved) = (0u64, 0u64);
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            Op::Alloc { size, .. } => {
                o.events += 1;
                clock.program_ran();
                live = live.saturating_add(size);
                o.peak_live = o.peak_live.max(live);
            }
            Op::Free { size, .. } => {
                o.events += 1;
                clock.program_ran();
                live = live.saturating_sub(size);
            }
            Op::SegAlloc { size } => {
                reserved = reserved.saturating_add(size);
                clock.add(Call::Malloc, size, 1);
                o.source_allocs += 1;
                o.peak_reserved = o.peak_reserved.max(reserved);
                if reserved > capacity {
                    o.ooms += 1;
                }
            }
            Op::SegFree { size } => {
                reserved = reserved.saturating_sub(size);
                clock.free(size);
                o.source_frees += 1;
            }
        }
        if let Some(t) = timeline.as_deref_mut() {
            t.record(trace, i, live, reserved);
        }
    }
    o.driver_us = clock.us();
    o.syncs = clock.waits();
    o
}

/// The outcome of a capacity search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Search {
    /// The smallest capacity, in steps of [`RESOLUTION`], with which the trace completes without
    /// an OOM; `None` when not even [`UNLIMITED`] does (a cap below the trace's need).
    pub capacity: Option<u64>,
    pub replays: u64,
}

/// Finds the smallest capacity with which `policy` completes `trace`, by bisection over replays.
/// `peak_reserved` (from a replay without limit) is the first guess for the upper end. Assumes
/// that more capacity never hurts, which holds for the policies here up to trim-timing effects.
pub fn min_capacity(trace: &Trace, policy: &Policy, peak_reserved: u64) -> Search {
    let mut search = Search::default();
    if let Kind::Recorded = policy.kind {
        // The recording's segments do not depend on the capacity: it needs its peak.
        search.capacity = Some(peak_reserved.div_ceil(RESOLUTION) * RESOLUTION);
        return search;
    }
    if trace.allocs == 0 {
        search.capacity = Some(0);
        return search;
    }
    let max_units = UNLIMITED / RESOLUTION;
    // Less than the peak of live bytes never fits, whatever the policy.
    let mut lo = trace.peak_live.saturating_sub(1) / RESOLUTION;
    if lo >= max_units {
        return search;
    }
    let mut hi = (peak_reserved.div_ceil(RESOLUTION)).clamp(lo + 1, max_units);
    while fails(&mut search, trace, policy, hi) {
        if hi == max_units {
            return search;
        }
        lo = hi;
        hi = (hi * 2).min(max_units);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fails(&mut search, trace, policy, mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    search.capacity = Some(hi * RESOLUTION);
    search
}

/// One probe of the search: whether a device of `units` steps runs out of memory.
fn fails(search: &mut Search, trace: &Trace, policy: &Policy, units: u64) -> bool {
    let o = replay(trace, policy, units * RESOLUTION, true, None);
    search.replays += 1;
    o.ooms > 0
}
