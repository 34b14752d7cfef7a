//! The cap as the program meets it: the capped memory view (queries, attributes), refusals
//! logged once per situation with a count at exit, and the warning near the cap.

use std::sync::atomic::Ordering;

use rocmguard_core::trace::Action;
use rocmguard_core::Pool;

use super::source::Source;
use super::Active;
use crate::log;

impl Active {
    /// `(free, total)` of the current device as the program should see them.
    pub fn mem_view(&'static self, device_free: u64, device_total: u64) -> (u64, u64) {
        let device = self.current_device();
        match device.and_then(|d| self.pool(d)) {
            Some(pool) => {
                let integrated = matches!(device, Some(d) if self.is_integrated(d));
                let free = crate::uma::device_free(device_free, device_total, integrated);
                let (free, total) = pool.view(free);
                // In a group, what the other members hold is not ours to take.
                let others = device.map_or(0, crate::platform::group::others_use);
                let ours = pool.usage().0;
                (
                    free.min(total.saturating_sub(others.saturating_add(ours))),
                    total,
                )
            }
            None => (device_free, device_total),
        }
    }

    /// The total the program should see for `device` whose real total is `total`.
    pub fn total_for(&'static self, device: i32, total: u64) -> u64 {
        match self.pools.get(device as usize).and_then(|c| c.get()) {
            Some(p) => p.cap(),
            None => {
                let total = crate::uma::device_total(total, self.is_integrated(device));
                self.config.cap_for(total)
            }
        }
    }

    /// Logs the first refusal of each situation on a device and counts the rest.
    pub(super) fn refused(&self, device: i32, pool: &Pool<Source>, size: u64) {
        crate::trace::event(Action::Oom, device, 0, size);
        let cap = pool.cap();
        let situation = if size > cap {
            Refusal::LargerThanCap
        } else {
            Refusal::OverCap
        };
        let counts = match self.refusals.get(device as usize) {
            Some(c) => c,
            None => return,
        };
        if counts[situation as usize].fetch_add(1, Ordering::Relaxed) > 0 {
            return;
        }
        let held = pool.usage().0;
        let why = match situation {
            // Whether the program itself passed the cap or the pool found no room under it
            // (a user can act on the one, and should report the other).
            Refusal::OverCap if held.saturating_add(size) > cap => format!(
                "over the cap: the program holds {} and asks {} more",
                rocmguard_core::format_size(held),
                rocmguard_core::format_size(size)
            ),
            Refusal::OverCap => format!(
                "over the cap: the program holds {}, so this fits, but the pool's free memory under the cap is in pieces too small for it",
                rocmguard_core::format_size(held)
            ),
            Refusal::LargerThanCap => format!(
                "larger than the whole cap of {}",
                rocmguard_core::format_size(cap)
            ),
        };
        let invalid = if self.config.invalid_cap.is_some() {
            " (the cap is 0 because its value is invalid: see the error above)"
        } else {
            ""
        };
        log::warn(format_args!(
            "[VRAM Limit] refused {} on dev{}: {}{}; {}; further refusals like this are counted, not logged (summary at exit)",
            rocmguard_core::format_size(size),
            device,
            why,
            invalid,
            pool.stats().line(device)
        ));
    }

    pub(super) fn warn_near_cap(&self, device: i32, pool: &Pool<Source>) {
        let (used, cap) = pool.usage();
        let flag = &self.warned[device as usize];
        // Below 90% (every allocation of a program far from its cap): a load, no write to the
        // flag's shared line.
        if used < cap - cap / 10 {
            if flag.load(Ordering::Relaxed) {
                flag.store(false, Ordering::Relaxed);
            }
            return;
        }
        // A cap of 0 refuses everything: the refusal says so, "near" would be noise.
        let near = cap > 0 && used >= cap - cap / 20;
        if near && !flag.swap(true, Ordering::Relaxed) {
            crate::trace::event(Action::CapWarning, device, 0, used);
            log::warn(format_args!(
                "[VRAM Limit] Warning: near the cap; {}",
                pool.stats().line(device)
            ));
        }
    }

    /// One line per device that was refused more often than logged, for the exit: how many
    /// refusals followed the logged ones (and why the cap is 0 when its value was invalid).
    pub fn refusal_summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (device, counts) in self.refusals.iter().enumerate() {
            let over = counts[Refusal::OverCap as usize].load(Ordering::Relaxed);
            let larger = counts[Refusal::LargerThanCap as usize].load(Ordering::Relaxed);
            let logged = u64::from(over > 0) + u64::from(larger > 0);
            if over + larger > logged {
                let invalid = match &self.config.invalid_cap {
                    Some(e) => format!("; {}", e),
                    None => String::new(),
                };
                lines.push(format!(
                    "[VRAM Limit] dev{}: {} allocations refused in all ({} over the cap, {} larger than the whole cap), {} more than logged{}",
                    device,
                    over + larger,
                    over,
                    larger,
                    over + larger - logged,
                    invalid
                ));
            }
        }
        lines
    }
}

/// Why the cap refused an allocation: each is logged once per device.
#[derive(Clone, Copy)]
pub(super) enum Refusal {
    /// The request fits under the cap, but not with what the program already holds.
    OverCap = 0,
    /// The request alone is larger than the cap (every cap of 0 refuses so).
    LargerThanCap = 1,
}

/// A device attribute holding the total memory, capped the way the runtime encodes it (bytes
/// clamped or truncated to `int`, or MiB), given the real total.
pub fn capped_attribute(
    value: i32,
    cap: impl Fn(u64) -> u64,
    real_total: impl Fn() -> Option<u64>,
) -> i32 {
    let total = match real_total() {
        Some(t) => t,
        None => return value,
    };
    let capped = cap(total);
    if capped >= total {
        value
    } else if value == i32::MAX && total > i32::MAX as u64 {
        capped.min(i32::MAX as u64) as i32
    } else if value == total as i32 {
        capped as i32
    } else if value as i64 == (total >> 20) as i64 {
        (capped >> 20) as i32
    } else {
        value
    }
}
