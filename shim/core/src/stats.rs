//! Per-device figures: current, peak and total, as mimalloc reports them.

use std::fmt::Write as _;

use crate::size::format_size;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes the program asked for and still holds from the pool.
    pub live: u64,
    pub peak_live: u64,
    /// Bytes the pool holds from the device (segments).
    pub reserved: u64,
    pub peak_reserved: u64,
    /// Bytes the program holds outside the pool (managed, async, flagged) counted against the cap.
    pub external: u64,
    /// Freed blocks waiting for a device synchronize before they can be handed out again.
    pub quarantined: u64,
    pub cap: u64,
    pub allocs: u64,
    pub frees: u64,
    /// Allocations served without calling the device.
    pub pool_hits: u64,
    pub source_allocs: u64,
    pub source_frees: u64,
    /// Synchronizes the pool asked for to reuse freed blocks or after an out-of-memory.
    pub syncs: u64,
    /// Wall time of the pool's device calls (segments and pieces made and given back, address
    /// space reserved and freed), and of its synchronizes (the background reclaimer's
    /// included), in microseconds.
    pub device_us: u64,
    pub sync_us: u64,
    /// Of `syncs`, those an allocation waited for on the program's own thread (freed blocks it
    /// needed still waited for one, or the device was out of memory), and their time in
    /// microseconds: what work on several streams costs a program, beside the reclaimer's.
    pub waits: u64,
    pub wait_us: u64,
    /// Segments released by a trim (threshold, explicit or out-of-memory).
    pub trims: u64,
    pub retries: u64,
    pub ooms: u64,
    pub largest_free: u64,
}

impl Stats {
    /// Reserved / live now: how many bytes the pool holds per byte the program uses (1.0 =
    /// nothing cached; 0 when nothing is live).
    pub fn reserved_per_live(&self) -> f64 {
        ratio(self.reserved, self.live)
    }

    /// Peak reserved / peak live: the pool's overhead at the run's high-water mark, the figure
    /// replay's `ratio` column gives for a trace (an idle cache at exit does not inflate it).
    pub fn peak_reserved_per_live(&self) -> f64 {
        ratio(self.peak_reserved, self.peak_live)
    }

    /// One line for logs: `dev0 live 18.50 GiB | reserved 19.20 GiB (92.5% of 20.00 GiB cap) | ...`,
    /// and what the program holds outside the pool where it holds any.
    pub fn line(&self, device: i32) -> String {
        let outside = match self.external {
            0 => String::new(),
            bytes => format!(" | outside the pool {}", format_size(bytes)),
        };
        format!(
            "dev{} live {} | reserved {} ({:.1}% of {} cap) | cached {} | largest free {}{}",
            device,
            format_size(self.live),
            format_size(self.reserved),
            percent(self.reserved, self.cap),
            format_size(self.cap),
            format_size(self.reserved.saturating_sub(self.live)),
            format_size(self.largest_free),
            outside,
        )
    }

    /// The table printed at exit and by `rocmguard stats`.
    pub fn table(devices: &[(i32, Stats)]) -> String {
        let mut out = String::from(
            "device        live   peak live    reserved  peak resvd         cap  peak-resv/live  allocs   hits  dev-allocs  dev-frees  trims  retries  ooms  syncs  dev-ms  sync-ms\n",
        );
        for (d, s) in devices {
            let _ = writeln!(
                out,
                "dev{:<3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>14.3}x {:>7} {:>6} {:>11} {:>10} {:>6} {:>8} {:>5} {:>6} {:>7} {:>8}",
                d,
                format_size(s.live),
                format_size(s.peak_live),
                format_size(s.reserved),
                format_size(s.peak_reserved),
                format_size(s.cap),
                s.peak_reserved_per_live(),
                s.allocs,
                s.pool_hits,
                s.source_allocs,
                s.source_frees,
                s.trims,
                s.retries,
                s.ooms,
                s.syncs,
                (s.device_us + 500) / 1000,
                (s.sync_us + 500) / 1000
            );
        }
        for (d, s) in devices.iter().filter(|(_, s)| s.waits > 0) {
            let _ = writeln!(
                out,
                "dev{}: allocations waited {} ms for {} of those synchronizes",
                d,
                (s.wait_us + 500) / 1000,
                s.waits
            );
        }
        out
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
