//! `rocmguard tune`: which `PYTORCH_HIP_ALLOC_CONF` a program should run with, found by
//! replaying its allocation traces through PyTorch's allocator (the `pytorch` policy of
//! `replay`) under every combination of the settings the recipes tell users to try, one
//! training run per guess, and through rocmguard's pool. Prints the ranking and the line to
//! paste, with the default's figures beside it.

pub mod search;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use rocmguard_core::config::STREAMS_STEP_COST;
use rocmguard_core::format_size;
use serde::Serialize;

use crate::replay::policy::{Policy, UNLIMITED};
use crate::replay::progress::Progress;
use crate::replay::{self, load};
use search::{Run, Scored};

/// The pool is named only when it beats PyTorch's best by this much peak reserved / peak live.
const CLEAR_MARGIN: f64 = 0.02;

#[derive(clap::Args)]
#[command(
    after_help = "Tried: every combination of expandable_segments (False, True),
max_split_size_mb (unset, 512, 256, 128, 64), roundup_power2_divisions (unset, 4, 8) and, with
--capacity, garbage_collection_threshold (unset, 0.6, 0.8; PyTorch applies it only under a
memory fraction below 1, so it is tried with per_process_memory_fraction:0.99), and rocmguard's
pool with PyTorch's cache off, at its default piece size (16 MiB) and at 8, 4 and 2 MiB, and
with --peak-slack 25% (shown, never picked: fewer driver calls for more memory).

Ranked by: completing every trace at --capacity, then peak reserved / peak live (the mean over
the traces), then the smallest device that completes them, then driver calls; of equals, the
line with fewer settings. The pool is named with its default pieces, or with --capacity the
coarsest pieces that complete every trace there: finer pieces need less memory but cost driver
calls in every step whose shapes change.

The model is of PyTorch 2.11's CUDA/HIP caching allocator (`rocmguard replay --help`)."
)]
pub struct Args {
    /// Allocation traces of the program (as `rocmguard replay` reads them).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Device memory available to the program (24GiB, 80G; default: unlimited).
    #[arg(long, value_name = "BYTES", default_value = "unlimited")]
    pub capacity: String,
    /// Settings listed in the ranking.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub top: usize,
    /// Plot live and reserved bytes of the default, the pick and the pool (.svg or .html).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Print the results as JSON on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// `--json`: every setting's figures per trace, best first, and the pick.
#[derive(Serialize)]
struct Report {
    capacity: Option<u64>,
    traces: Vec<String>,
    /// The `PYTORCH_HIP_ALLOC_CONF` value to use ("" for PyTorch's defaults).
    pick: String,
    /// Whether rocmguard's pool (with `pool_piece_size`) beats the pick by a clear margin.
    pool_wins: bool,
    /// The pool's piece size picked: `null` for the default.
    pool_piece_size: Option<u64>,
    /// The most streams one trace allocates on (see [`load::Trace::stream_count`]).
    streams: u32,
    /// Device synchronizes rocmguard made to reuse freed blocks while the traces were recorded.
    recorded_syncs: u64,
    settings: Vec<Setting>,
    seconds: f64,
}

#[derive(Serialize)]
struct Setting {
    /// `null` for rocmguard's pool.
    conf: Option<String>,
    /// For the pool: its piece size, `null` for the default.
    piece_size: Option<u64>,
    /// For the pool: its `peak_slack`, `null` for the default.
    peak_slack: Option<&'static str>,
    completes: bool,
    mean_ratio: f64,
    runs: Vec<Run>,
}

pub fn exec(args: Args) -> anyhow::Result<u8> {
    let start = Instant::now();
    let capacity = replay::parse_capacity(&args.capacity)?;
    if let Some(path) = &args.plot {
        replay::check_plot_path(path)?;
    }
    let progress = Progress::stderr();
    let mut traces = Vec::new();
    for path in &args.traces {
        progress.message(&format!("reading {}", path.display()));
        traces.extend(load::load_path(path)?);
    }
    if traces.iter().all(|t| t.allocs == 0) {
        bail!("the traces hold no allocations: nothing to tune");
    }
    let candidates = search::candidates(capacity != UNLIMITED);
    progress.start((candidates.len() * traces.len()) as u64);
    progress.message("replaying");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let mut scored = search::score(&candidates, &traces, capacity, threads, &progress);
    // The pool's settings, coarsest pieces first, apart from PyTorch's, ranked.
    let (pools, mut scored): (Vec<Scored>, Vec<Scored>) =
        scored.drain(..).partition(|s| s.candidate.conf.is_none());
    scored.sort_by(|a, b| a.rank(b));
    let pool = pool_pick(&pools, capacity).clone();
    let default = scored
        .iter()
        .find(|s| s.candidate.conf.as_deref() == Some(""))
        .expect("the default is a candidate")
        .clone();
    let pick = scored[0].clone();
    let pool_wins = pool.completes()
        && (!pick.completes() || pool.mean_ratio() < pick.mean_ratio() - CLEAR_MARGIN);
    let streams = traces
        .iter()
        .map(load::Trace::stream_count)
        .max()
        .unwrap_or(1);
    let recorded_syncs = traces.iter().map(|t| t.recorded_syncs).sum();
    if let Some(path) = &args.plot {
        let policies: Vec<Policy> = [&default, &pick, &pool]
            .iter()
            .map(|s| s.candidate.policy.clone())
            .collect();
        let (_, panels) = replay::run(
            &traces,
            &policies,
            capacity,
            replay::Look {
                plot: true,
                ..Default::default()
            },
            &Progress::none(),
        );
        replay::write_plot(path, &panels)?;
    }
    drop(progress);
    let seconds = start.elapsed().as_secs_f64();
    let names: Vec<String> = traces.iter().map(|t| t.name.clone()).collect();
    if args.json {
        let settings = scored
            .iter()
            .chain(&pools)
            .map(|s| Setting {
                conf: s.candidate.conf.clone(),
                piece_size: s.candidate.piece_size,
                peak_slack: s.candidate.peak_slack,
                completes: s.completes(),
                mean_ratio: s.mean_ratio(),
                runs: s.runs.clone(),
            })
            .collect();
        let report = Report {
            capacity: (capacity != UNLIMITED).then_some(capacity),
            traces: names,
            pick: pick.candidate.conf.clone().unwrap_or_default(),
            pool_wins,
            pool_piece_size: pool.candidate.piece_size,
            streams,
            recorded_syncs,
            settings,
            seconds,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let view = View {
        names: &names,
        paths: args
            .traces
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        capacity,
        top: args.top,
        seconds,
        tried: candidates.len(),
        out_of_order: out_of_order(
            streams,
            recorded_syncs,
            traces.iter().map(|t| t.frees).sum(),
        ),
    };
    print!("{}", view.text(&scored, &default, &pools, &pool, pool_wins));
    Ok(0)
}

/// What shows the program's work out of one stream's order, if anything does: with PyTorch's
/// cache off each block it frees then waits for a device synchronize before reuse (the guard's
/// `leave_in_order`). More than one synchronize in 100 frees while recording is that, not an
/// out-of-memory retry now and then.
fn out_of_order(streams: u32, syncs: u64, frees: u64) -> Option<String> {
    if streams > 1 {
        Some(format!("this program allocates on {} streams", streams))
    } else if syncs * 100 > frees {
        Some(format!(
            "while this trace was recorded, rocmguard synchronized the device {} times to reuse \
             freed blocks",
            syncs
        ))
    } else {
        None
    }
}

/// Of the pool's piece sizes (coarsest first, the default first of all), the one to name: the
/// coarsest that completes every trace at the capacity; without a capacity, or where none
/// completes, the default: finer pieces cost driver calls in every step whose shapes change
/// (GPT-2 with PyTorch's cache off: +5.7% a step at 16 MiB on an H100), worth paying to fit,
/// not to save memory nothing needs. The larger slack is never named: it costs memory.
fn pool_pick(pools: &[Scored], capacity: u64) -> &Scored {
    let completing = pools
        .iter()
        .find(|s| s.completes() && s.candidate.peak_slack.is_none());
    match completing {
        Some(s) if capacity != UNLIMITED => s,
        _ => &pools[0],
    }
}

/// What the tables need beside the scores.
struct View<'a> {
    names: &'a [String],
    /// The traces as given on the command line.
    paths: Vec<String>,
    /// What shows the program's work out of one stream's order (see [`out_of_order`]).
    out_of_order: Option<String>,
    capacity: u64,
    top: usize,
    seconds: f64,
    tried: usize,
}

impl View<'_> {
    fn text(
        &self,
        scored: &[Scored],
        default: &Scored,
        pools: &[Scored],
        pool: &Scored,
        pool_wins: bool,
    ) -> String {
        let capacity = if self.capacity == UNLIMITED {
            "unlimited".to_string()
        } else {
            format_size(self.capacity)
        };
        let mut out = format!(
            "rocmguard tune: {} settings x {} trace(s) ({}), device capacity {}, {:.1} s\n\n",
            self.tried,
            self.names.len(),
            self.names.join(", "),
            capacity,
            self.seconds
        );
        let width = scored
            .iter()
            .take(self.top)
            .chain(std::iter::once(default))
            .chain(pools)
            .map(|s| s.candidate.label().len())
            .max()
            .unwrap_or(0);
        out.push_str(&format!(
            "  {:<4} {:<width$}  {:>9} {:>13} {:>12} {:>10}\n",
            "rank",
            "PYTORCH_HIP_ALLOC_CONF",
            "resv/live",
            "min cap/live",
            "driver calls",
            "driver ms",
            width = width
        ));
        let row = |rank: String, s: &Scored| {
            let oom = if s.completes() { "" } else { "  (OOM)" };
            format!(
                "  {:<4} {:<width$}  {:>9.3} {:>13.3} {:>12} {:>10.1}{}\n",
                rank,
                s.candidate.label(),
                s.mean_ratio(),
                s.mean_min_capacity(),
                s.driver_calls(),
                s.driver_ms(),
                oom,
                width = width
            )
        };
        for (i, s) in scored.iter().take(self.top).enumerate() {
            out.push_str(&row((i + 1).to_string(), s));
        }
        let default_rank = scored
            .iter()
            .position(|s| s.candidate.conf.as_deref() == Some(""))
            .map_or(0, |i| i + 1);
        if default_rank > self.top {
            out.push_str(&row(default_rank.to_string(), default));
        }
        for p in pools {
            out.push_str(&row("pool".to_string(), p));
        }
        out.push_str(&slack_note(pools));
        if self.names.len() > 1 {
            out.push_str("  (resv/live and min cap/live: means over the traces)\n");
        }
        out.push('\n');
        let pick = &scored[0];
        for (i, name) in self.names.iter().enumerate() {
            let (p, d) = (&pick.runs[i], &default.runs[i]);
            let fails = |r: &Run| {
                if r.ooms > 0 {
                    " (runs out of memory)"
                } else {
                    ""
                }
            };
            out.push_str(&format!(
                "  {}: peak reserved {} ({} B){} against {} with the default{} ({:+.1}%); \
                 smallest device {} against {}\n",
                name,
                format_size(p.peak_reserved),
                p.peak_reserved,
                fails(p),
                format_size(d.peak_reserved),
                fails(d),
                (p.peak_reserved as f64 / d.peak_reserved.max(1) as f64 - 1.0) * 100.0,
                p.min_capacity.map_or("none".into(), format_size),
                d.min_capacity.map_or("none".into(), format_size),
            ));
        }
        out.push_str(&format!(
            "\nPaste before the command (PyTorch 2.9+ reads PYTORCH_ALLOC_CONF first: if that is \
             set, give it this value instead):\n  PYTORCH_HIP_ALLOC_CONF={}\n",
            pick.candidate.conf.as_deref().unwrap_or("")
        ));
        if !pick.completes() {
            out.push_str(&format!(
                "  (no PyTorch setting tried completes every trace at {}: this one comes nearest)\n",
                capacity
            ));
        } else if pick.candidate.conf.as_deref() == Some("") {
            out.push_str("  (empty: PyTorch's defaults are the best of the settings tried)\n");
        }
        if pool_wins {
            out.push_str(&format!(
                "\nrocmguard's pool does better ({}): with PyTorch's cache off it is the \
                 allocator:\n  PYTORCH_NO_HIP_MEMORY_CACHING=1 rocmguard run{} -- python train.py\n",
                if pick.completes() {
                    format!(
                        "{:.3} against {:.3} peak reserved / peak live",
                        pool.mean_ratio(),
                        pick.mean_ratio()
                    )
                } else {
                    format!(
                        "it completes at {}, where no PyTorch setting tried does",
                        capacity
                    )
                },
                pool.candidate.run_options()
            ));
            // With PyTorch's cache off every free reaches the pool, and once a second stream
            // exists a freed block waits for a device synchronize (the guard's
            // `leave_in_order`): memory the pool saves may be paid for in step time.
            if let Some(why) = &self.out_of_order {
                out.push_str(&format!(
                    "  ({}:\n   with PyTorch's cache off each block it frees waits for a device \
                     synchronize before reuse,\n   which costs step time ({}); where speed\n   \
                     matters more than memory, keep PyTorch's cache on with the line above)\n",
                    why, STREAMS_STEP_COST
                ));
            }
            // Finer pieces usually cost driver calls; near a capacity the default's may cost
            // more, giving memory back and mapping it again.
            if pool.candidate.piece_size.is_some() {
                let (finer, default) = (pool.driver_ms(), pools[0].driver_ms());
                let (what, so) = if finer > default {
                    (
                        "finer pieces than the default cost driver calls in every step whose \
                         shapes change",
                        "; expect slower steps",
                    )
                } else {
                    ("finer pieces, and no more driver time here", "")
                };
                out.push_str(&format!(
                    "  ({}: {:.0} ms modelled over the traces against {:.0} ms with the default \
                     pieces{})\n",
                    what, finer, default, so
                ));
            }
        }
        // Why a setting reserves what it does: the memory no tensor uses at its peak, by segment
        // or piece, and the tensors that keep it there.
        out.push_str(&format!(
            "\nWhere the memory sits at the peak, and which tensors keep it there:\n  rocmguard \
             replay --peak-layout --policy {} --policy {}{} {}\n",
            pick.candidate.policy.name.trim_end_matches(':'),
            pool.candidate.policy.name,
            match self.capacity {
                UNLIMITED => String::new(),
                c if c % (1 << 20) == 0 => format!(" --capacity {}", search::mib(c)),
                c => format!(" --capacity {}", c),
            },
            self.paths.join(" ")
        ));
        out
    }
}

/// A line on the pool with [`search::SPEED_SLACK`], where it makes at most half the default
/// pool's driver calls: a layout that changes at the peak, where steps pay for the calls.
fn slack_note(pools: &[Scored]) -> String {
    let slack = pools.iter().find(|s| s.candidate.peak_slack.is_some());
    match (pools.first(), slack) {
        (Some(default), Some(slack)) if 2 * slack.driver_calls() <= default.driver_calls() => {
            format!(
                "  (--peak-slack {}: {} driver calls against {}, at {:.3} against {:.3} peak \
                 reserved / peak live:\n   the layout changes at the peak, where the default \
                 gives memory back and maps it again; for step time over memory)\n",
                search::SPEED_SLACK,
                slack.driver_calls(),
                default.driver_calls(),
                slack.mean_ratio(),
                default.mean_ratio()
            )
        }
        _ => String::new(),
    }
}
