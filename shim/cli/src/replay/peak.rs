//! `rocmguard replay --peak-layout`: where a policy's reserved memory lies at the moment it
//! peaks. Device memory goes back to the driver in whole units (a segment, a mapped piece or
//! page), so what no live block uses at the peak sits in units that something else keeps: this
//! names the units with the most of it and the blocks that keep them, with how long those
//! blocks had lived and would live. Replays the trace twice: once to find the peak, once to
//! stop there.

use std::collections::HashMap;

use rocmguard_core::format_size;
use rocmguard_core::pool::{Layout, Unit};
use serde::Serialize;

use super::load::{Op, Trace};
use super::policy::{Kind, Policy, PoolRun, Run, Step};
use super::torch::TorchRun;

/// Units listed, those with the most idle bytes first.
const TOP: usize = 8;

/// A policy's memory at its peak reserved.
#[derive(Clone, Debug, Serialize)]
pub struct PeakLayout {
    /// The allocation or free (numbered from 1, in trace order) after which reserved peaked.
    pub event: u64,
    pub events: u64,
    pub reserved: u64,
    /// What the program had asked for and not freed then.
    pub live: u64,
    /// Reserved bytes that no live (or quarantined) block covers.
    pub idle: u64,
    pub units: usize,
    pub units_with_idle: usize,
    /// The units with the most idle bytes, most first (at most eight).
    pub top: Vec<UnitReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UnitReport {
    pub addr: u64,
    pub size: u64,
    /// `piece` (mapped into a range reserved for it) or `segment` (from the plain allocator).
    pub kind: &'static str,
    pub idle: u64,
    /// Blocks that touch it.
    pub blocks: usize,
    pub never_freed: usize,
    pub largest: Option<BlockReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BlockReport {
    pub size: u64,
    /// Events since its allocation.
    pub age: u64,
    /// Events until its free (0: freed already, waiting in quarantine); `null` when the trace
    /// never frees it.
    pub freed_after: Option<u64>,
}

/// A replay that can stop and show its allocator.
trait Look: Run {
    /// The allocator's units and busy blocks, and the allocation each busy block's start serves.
    fn layout(&self) -> (Layout, HashMap<u64, u32>);
}

impl Look for PoolRun {
    fn layout(&self) -> (Layout, HashMap<u64, u32>) {
        (self.pool.layout(), owners(self.addrs.iter().copied(), 0))
    }
}

impl Look for TorchRun {
    fn layout(&self) -> (Layout, HashMap<u64, u32>) {
        let a = &self.allocator;
        let starts = self
            .held
            .iter()
            .map(|&b| a.block_start(b).unwrap_or(u64::MAX));
        (a.layout(), owners(starts, u64::MAX))
    }
}

/// Address -> allocation number, for the addresses that are not `none`.
fn owners(addrs: impl Iterator<Item = u64>, none: u64) -> HashMap<u64, u32> {
    addrs
        .enumerate()
        .filter(|&(_, a)| a != none)
        .map(|(id, a)| (a, id as u32))
        .collect()
}

/// The layout of `policy`'s memory at its peak reserved over `trace` on a device of
/// `capacity` bytes; `None` for a policy without an allocator to look into (passthrough,
/// recorded).
pub fn peak_layout(trace: &Trace, policy: &Policy, capacity: u64) -> Option<PeakLayout> {
    match &policy.kind {
        Kind::Pool(config) if !config.disable => {
            let new = || PoolRun::new(trace, config, capacity);
            Some(at_peak(trace, new(), new()))
        }
        Kind::Torch(conf) => {
            let new = || TorchRun::new(trace, conf, capacity);
            Some(at_peak(trace, new(), new()))
        }
        _ => None,
    }
}

/// Replays `trace` through `first` to find the event after which reserved peaked, then through
/// `second` up to that event, and looks.
fn at_peak(trace: &Trace, mut first: impl Run, mut second: impl Look) -> PeakLayout {
    let (mut peak, mut peak_at, mut events) = (0u64, 0u64, 0u64);
    for op in &trace.ops {
        if first.step(trace, op) == Step::Skipped {
            continue;
        }
        events += 1;
        if first.reserved() > peak {
            (peak, peak_at) = (first.reserved(), events);
        }
    }
    // Event numbers of each allocation and of its free (0: never freed).
    let mut born = vec![0u64; trace.allocs as usize];
    let mut freed = vec![0u64; trace.allocs as usize];
    let mut n = 0;
    for op in &trace.ops {
        if n < peak_at && second.step(trace, op) == Step::Skipped {
            continue;
        }
        match *op {
            Op::Alloc { id, .. } => born[id as usize] = n + 1,
            Op::Free { id, .. } => freed[id as usize] = n + 1,
            _ => continue,
        }
        n += 1;
    }
    let (layout, owner) = second.layout();
    let block = |addr: u64, size: u64| -> BlockReport {
        let id = owner.get(&addr).map(|&id| id as usize);
        BlockReport {
            size,
            age: id.map_or(0, |id| peak_at.saturating_sub(born[id])),
            // A block no allocation owns was freed and waits for a synchronize.
            freed_after: match id {
                Some(id) => (freed[id] > peak_at).then(|| freed[id] - peak_at),
                None => Some(0),
            },
        }
    };
    let mut units: Vec<UnitReport> = per_unit(&layout)
        .into_iter()
        .map(
            |UnitUse {
                 unit,
                 idle,
                 touching,
             }| {
                let blocks: Vec<BlockReport> = touching.iter().map(|&(a, s)| block(a, s)).collect();
                UnitReport {
                    addr: unit.addr,
                    size: unit.size,
                    kind: if unit.piece { "piece" } else { "segment" },
                    idle,
                    blocks: blocks.len(),
                    never_freed: blocks.iter().filter(|b| b.freed_after.is_none()).count(),
                    largest: blocks.into_iter().max_by_key(|b| b.size),
                }
            },
        )
        .collect();
    let idle = units.iter().map(|u| u.idle).sum();
    let with_idle = units.iter().filter(|u| u.idle > 0).count();
    let total = units.len();
    units.sort_by_key(|u| (std::cmp::Reverse(u.idle), u.addr));
    units.retain(|u| u.idle > 0);
    units.truncate(TOP);
    PeakLayout {
        event: peak_at,
        events,
        reserved: second.reserved(),
        live: second.live(),
        idle,
        units: total,
        units_with_idle: with_idle,
        top: units,
    }
}

/// A unit, its bytes that no busy block covers, and the busy blocks that touch it
/// (`(addr, size)`).
#[derive(Debug, PartialEq)]
struct UnitUse {
    unit: Unit,
    idle: u64,
    touching: Vec<(u64, u64)>,
}

/// Each unit's use; both lists of `layout` are in address order and blocks never overlap.
fn per_unit(layout: &Layout) -> Vec<UnitUse> {
    let busy = &layout.busy;
    let mut first = 0;
    let mut out = Vec::with_capacity(layout.units.len());
    for &unit in &layout.units {
        let end = unit.addr + unit.size;
        while first < busy.len() && busy[first].0 + busy[first].1 <= unit.addr {
            first += 1;
        }
        let mut covered = 0;
        let mut touching = Vec::new();
        for &(addr, size) in busy[first..].iter().take_while(|b| b.0 < end) {
            covered += (addr + size).min(end) - addr.max(unit.addr);
            touching.push((addr, size));
        }
        out.push(UnitUse {
            unit,
            idle: unit.size - covered,
            touching,
        });
    }
    out
}

/// The layout as text, under the table's block for its trace.
pub fn text(policy: &str, p: &PeakLayout) -> String {
    let mut out = format!(
        "  {} at its peak: {} reserved after event {} of {}, {} live; {} in no live block, \
         in {} of {} units\n",
        policy,
        format_size(p.reserved),
        p.event,
        p.events,
        format_size(p.live),
        format_size(p.idle),
        p.units_with_idle,
        p.units,
    );
    if !p.top.is_empty() {
        out.push_str(&format!(
            "    {:<8} {:>16} {:>11} {:>11} {:>7} {:>6}  largest block there\n",
            "unit", "address", "size", "idle", "blocks", "never"
        ));
    }
    for u in &p.top {
        let largest = u.largest.as_ref().map_or_else(
            || "no block: cached whole".to_string(),
            |b| {
                let end = match b.freed_after {
                    None => "never freed".to_string(),
                    Some(0) => "freed, waiting for a synchronize".to_string(),
                    Some(e) => format!("freed {} events later", e),
                };
                format!(
                    "{}, allocated {} events before, {}",
                    format_size(b.size),
                    b.age,
                    end
                )
            },
        );
        out.push_str(&format!(
            "    {:<8} {:>#16x} {:>11} {:>11} {:>7} {:>6}  {}\n",
            u.kind,
            u.addr,
            format_size(u.size),
            format_size(u.idle),
            u.blocks,
            u.never_freed,
            largest
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_block_across_two_units_covers_only_its_part_of_each() {
        let unit = |addr, size| Unit {
            addr,
            size,
            piece: true,
        };
        let layout = Layout {
            units: vec![
                unit(0, 4 * MIB),
                unit(4 * MIB, 4 * MIB),
                unit(16 * MIB, 2 * MIB),
            ],
            busy: vec![(MIB, 256), (3 * MIB, 2 * MIB), (6 * MIB, MIB)],
        };
        let got: Vec<(u64, Vec<(u64, u64)>)> = per_unit(&layout)
            .into_iter()
            .map(|u| (u.idle, u.touching))
            .collect();
        assert_eq!(
            got,
            vec![
                (3 * MIB - 256, vec![(MIB, 256), (3 * MIB, 2 * MIB)]),
                (2 * MIB, vec![(3 * MIB, 2 * MIB), (6 * MIB, MIB)]),
                (2 * MIB, vec![]),
            ]
        );
    }
}
