//! `rocmguard replay`: what a program's allocations would need under each allocator policy,
//! side by side. Reads traces (RMM CSV, gzipped or not, and PyTorch memory snapshots), replays
//! each through every policy over a simulated device, and reports peak live and reserved bytes,
//! driver calls, OOMs and the smallest device that completes the trace.

pub mod cost;
pub mod load;
pub mod peak;
pub mod plot;
pub mod policy;
pub mod progress;
pub mod snapshot;
pub mod torch;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use rocmguard_core::{format_size, parse_size};
use serde::Serialize;

use load::Trace;
use policy::{Kind, Policy, Timeline, UNLIMITED};
use progress::Progress;

/// Points per line in plots: enough for a smooth curve, few enough for a small file.
const PLOT_POINTS: usize = 1500;

#[derive(clap::Args)]
#[command(
    after_help = "Policies (--policy, repeatable; default: rocmguard, passthrough, recorded):
  rocmguard[:KEY=VALUE,...]   rocmguard's pool; keys as in ROCMGUARD_CONF, e.g.
                              rocmguard:max_split=64MiB,trim_threshold=0.7
  pytorch[:CONF]              PyTorch 2.11's caching allocator (a model of
                              CUDACachingAllocator.cpp); CONF as the value of
                              PYTORCH_HIP_ALLOC_CONF, e.g.
                              pytorch:expandable_segments:True,max_split_size_mb:128
  passthrough                 every request straight to the driver (no pool)
  recorded                    what the recording program's own allocator reserved
                              (traces with segment_alloc/segment_free rows)

Traces: RMM allocation-log CSV (Thread,Time,Action,Pointer,Size,Stream[,...]) as written by
ROCMGUARD_TRACE, RAPIDS RMM or PyTorch's history, gzipped or not; PyTorch memory snapshots
(torch.cuda.memory._dump_snapshot pickles).

Columns: ratio = peak reserved / peak live; driver ms = modelled time of the driver calls
(cudaMalloc/cudaFree and cuMemCreate/Map/SetAccess/Unmap/Release by size, as timed on an H100:
data/driver_cost.csv); min capacity = the smallest device that completes
the trace (found by search); events/s = the trace's allocations and frees over the time of one
replay at --capacity (the search is not counted; --plot's sampling is)."
)]
pub struct Args {
    /// Trace files (the format is recognized by content, not by name).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Capacity of the simulated device (24GiB, 80G, ...; default: unlimited). A share such as
    /// 85% has no device to be a share of: give bytes.
    #[arg(long, value_name = "BYTES", default_value = "unlimited")]
    pub capacity: String,
    /// A policy to compare; repeat for several.
    #[arg(long = "policy", value_name = "POLICY")]
    pub policies: Vec<String>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Plot live and reserved bytes over time per trace and policy (.svg or .html).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// For each rocmguard and pytorch policy, where its reserved memory lies at its peak: the
    /// units of device memory (segments, pieces) with the most bytes no live block uses, and
    /// the blocks that keep them.
    #[arg(long)]
    pub peak_layout: bool,
}

/// The results, as `--json` prints them.
#[derive(Serialize)]
pub struct Report {
    /// `null` for an unlimited device.
    pub capacity: Option<u64>,
    pub traces: Vec<TraceReport>,
}

#[derive(Serialize)]
pub struct TraceReport {
    pub trace: String,
    pub file: String,
    pub device: i32,
    pub events: u64,
    pub allocs: u64,
    pub frees: u64,
    pub peak_live: u64,
    pub unknown_frees: u64,
    pub live_at_end: u64,
    pub live_at_end_bytes: u64,
    pub reused_pointers: u64,
    pub unknown_segment_frees: u64,
    pub skipped: u64,
    pub policies: Vec<PolicyReport>,
}

#[derive(Serialize)]
pub struct PolicyReport {
    pub policy: String,
    pub peak_live: u64,
    pub peak_reserved: u64,
    /// Peak reserved / peak live.
    pub ratio: f64,
    pub source_allocs: u64,
    pub source_frees: u64,
    /// Device synchronizes: those the allocator asked for, and its frees that waited for the
    /// program's work (`cudaFree`/`hipFree` wait for the device; a run of frees waits once).
    pub syncs: u64,
    pub ooms: u64,
    /// Modelled time of the driver calls, milliseconds (`replay --help` says from what).
    pub driver_ms: f64,
    /// `null` when no capacity completes the trace (a cap below its need).
    pub min_capacity: Option<u64>,
    /// Allocations and frees per second of one replay at the given capacity (the capacity
    /// search is not counted), the figure the replay_speed bench reports.
    pub events_per_sec: f64,
    /// With `--peak-layout`: where the reserved memory lies at the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_layout: Option<peak::PeakLayout>,
}

pub fn exec(args: Args) -> anyhow::Result<u8> {
    let capacity = parse_capacity(&args.capacity)?;
    let policies = if args.policies.is_empty() {
        Policy::defaults()
    } else {
        args.policies
            .iter()
            .map(|p| Policy::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?
    };
    if let Some(path) = &args.plot {
        check_plot_path(path)?;
    }
    let progress = Progress::stderr();
    let mut traces = Vec::new();
    for path in &args.traces {
        progress.message(&format!("reading {}", path.display()));
        traces.extend(load::load_path(path)?);
    }
    let look = Look {
        plot: args.plot.is_some(),
        peak_layout: args.peak_layout,
    };
    let (report, panels) = run(&traces, &policies, capacity, look, &progress);
    drop(progress);
    if let Some(path) = &args.plot {
        write_plot(path, &panels)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", table(&report));
    }
    Ok(0)
}

/// `--plot FILE` must name an .svg or .html file (checked before any work is done).
pub fn check_plot_path(path: &Path) -> anyhow::Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(ext, "svg" | "html" | "htm") {
        bail!(
            "--plot {}: the file must end in .svg or .html",
            path.display()
        );
    }
    Ok(())
}

/// Writes the panels as an SVG or HTML file, by the name's extension.
pub fn write_plot(path: &Path, panels: &[plot::Panel]) -> anyhow::Result<()> {
    let text = if path.extension().is_some_and(|e| e == "svg") {
        plot::svg(panels)
    } else {
        plot::html(panels)
    };
    std::fs::write(path, text).with_context(|| format!("--plot {}", path.display()))
}

pub fn parse_capacity(text: &str) -> anyhow::Result<u64> {
    match text.trim() {
        "unlimited" | "none" => Ok(UNLIMITED),
        t if t.ends_with('%') => bail!(
            "--capacity {}: a share needs a device size, and a replay has none; give the \
             device's bytes (24GiB, 80G) or leave it out (the default is unlimited)",
            t
        ),
        t => match parse_size(t) {
            Ok(0) => bail!("--capacity must be more than 0 bytes"),
            Ok(b) => Ok(b.min(UNLIMITED)),
            Err(e) => bail!("--capacity: {}", e),
        },
    }
}

/// What a run looks at beside the figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct Look {
    /// Sample each replay for the plot's panels.
    pub plot: bool,
    /// Find where each pool's memory lies at its peak (`--peak-layout`).
    pub peak_layout: bool,
}

/// Replays every trace through every policy that applies to it.
pub fn run(
    traces: &[Trace],
    policies: &[Policy],
    capacity: u64,
    look: Look,
    progress: &Progress,
) -> (Report, Vec<plot::Panel>) {
    let plot = look.plot;
    let pairs = traces
        .iter()
        .map(|t| policies.iter().filter(|p| applies(p, t)).count() as u64)
        .sum();
    progress.start(pairs);
    let mut reports = Vec::new();
    let mut panels = Vec::new();
    for trace in traces {
        let mut rows = Vec::new();
        let mut lines = Vec::new();
        for policy in policies.iter().filter(|p| applies(p, trace)) {
            progress.message(&format!("{}: {}", trace.name, policy.name));
            let mut timeline = plot.then(|| Timeline::new(trace, PLOT_POINTS));
            let outcome = policy::replay(trace, policy, capacity, false, timeline.as_mut());
            // Without a limit the pool's peak is the first guess for the search's upper end.
            let guess = if capacity == UNLIMITED {
                outcome.peak_reserved
            } else {
                policy::replay(trace, policy, UNLIMITED, false, None).peak_reserved
            };
            let search = policy::min_capacity(trace, policy, guess);
            let seconds = outcome.elapsed.max(Duration::from_nanos(1));
            rows.push(PolicyReport {
                policy: policy.name.clone(),
                peak_live: outcome.peak_live,
                peak_reserved: outcome.peak_reserved,
                ratio: ratio(outcome.peak_reserved, outcome.peak_live),
                source_allocs: outcome.source_allocs,
                source_frees: outcome.source_frees,
                syncs: outcome.syncs,
                ooms: outcome.ooms,
                driver_ms: outcome.driver_us / 1e3,
                min_capacity: search.capacity,
                events_per_sec: outcome.events as f64 / seconds.as_secs_f64(),
                peak_layout: look
                    .peak_layout
                    .then(|| peak::peak_layout(trace, policy, capacity))
                    .flatten(),
            });
            if let Some(timeline) = timeline {
                lines.push(plot::Line {
                    name: policy.name.clone(),
                    timeline,
                    peak_live: outcome.peak_live,
                    peak_reserved: outcome.peak_reserved,
                    ooms: outcome.ooms,
                });
            }
            progress.step();
        }
        if plot {
            panels.push(plot::Panel {
                title: format!(
                    "{}: {} allocations, peak live {}",
                    trace.name,
                    trace.allocs,
                    format_size(trace.peak_live)
                ),
                demand: Timeline::demand(trace, PLOT_POINTS),
                peak_live: trace.peak_live,
                lines,
                capacity: (capacity != UNLIMITED).then_some(capacity),
            });
        }
        reports.push(TraceReport {
            trace: trace.name.clone(),
            file: trace.file.clone(),
            device: trace.device,
            events: trace.events(),
            allocs: trace.allocs,
            frees: trace.frees,
            peak_live: trace.peak_live,
            unknown_frees: trace.unknown_frees,
            live_at_end: trace.live_at_end,
            live_at_end_bytes: trace.live_at_end_bytes,
            reused_pointers: trace.reused_pointers,
            unknown_segment_frees: trace.unknown_segment_frees,
            skipped: trace.skipped,
            policies: rows,
        });
    }
    let report = Report {
        capacity: (capacity != UNLIMITED).then_some(capacity),
        traces: reports,
    };
    (report, panels)
}

/// `recorded` needs the recording allocator's segment rows.
fn applies(policy: &Policy, trace: &Trace) -> bool {
    policy.kind != Kind::Recorded || trace.has_segments
}

fn ratio(reserved: u64, live: u64) -> f64 {
    if live == 0 {
        0.0
    } else {
        reserved as f64 / live as f64
    }
}

/// The terminal table: one block per trace, one row per policy.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let capacity = report
        .capacity
        .map_or_else(|| "unlimited".to_string(), format_size);
    for t in &report.traces {
        out.push_str(&format!(
            "{}  ({} allocs, {} frees; peak live {} = {} B; device capacity {})\n",
            t.trace,
            t.allocs,
            t.frees,
            format_size(t.peak_live),
            t.peak_live,
            capacity
        ));
        let mut notes = Vec::new();
        if t.live_at_end > 0 {
            notes.push(format!(
                "{} allocations ({}) still live at the end",
                t.live_at_end,
                format_size(t.live_at_end_bytes)
            ));
        }
        if t.unknown_frees > 0 {
            notes.push(format!(
                "{} frees of unknown pointers ignored",
                t.unknown_frees
            ));
        }
        if t.reused_pointers > 0 {
            notes.push(format!(
                "{} pointers allocated again while live (free implied)",
                t.reused_pointers
            ));
        }
        if t.unknown_segment_frees > 0 {
            notes.push(format!(
                "{} segment frees of unknown segments ignored",
                t.unknown_segment_frees
            ));
        }
        if !notes.is_empty() {
            out.push_str(&format!("  note: {}\n", notes.join("; ")));
        }
        let width = t
            .policies
            .iter()
            .map(|p| p.policy.chars().count())
            .max()
            .unwrap_or(0)
            .max(12);
        out.push_str(&format!(
            "  {:<width$} {:>13} {:>10} {:>12} {:>10} {:>6} {:>13} {:>10}\n",
            "policy",
            "peak reserved",
            "resv/live",
            "driver calls",
            "driver ms",
            "OOMs",
            "min capacity",
            "events/s",
            width = width
        ));
        for p in &t.policies {
            out.push_str(&format!(
                "  {:<width$} {:>13} {:>10.3} {:>12} {:>10.1} {:>6} {:>13} {:>10}\n",
                p.policy,
                format_size(p.peak_reserved),
                p.ratio,
                p.source_allocs + p.source_frees,
                p.driver_ms,
                p.ooms,
                p.min_capacity
                    .map_or_else(|| "never".to_string(), format_size),
                rate(p.events_per_sec),
                width = width
            ));
        }
        for p in &t.policies {
            if let Some(layout) = &p.peak_layout {
                out.push_str(&peak::text(&p.policy, layout));
            }
        }
        out.push('\n');
    }
    out
}

fn rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.1} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{:.0}", per_sec)
    }
}
