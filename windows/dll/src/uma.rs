//! Unified-memory APUs (Strix Halo and friends) on Windows. The runtime reports the dedicated
//! carve-out as the device's memory, while WDDM lets an integrated GPU also use shared system
//! memory, up to half of RAM. With the unified view on (`ROCMGUARD_UMA=1`, or `auto` on an
//! integrated device) the pool works with the ceiling that the core's `uma_ceiling` gives for
//! that half of RAM, keeping `host_reserve` for the system; never less than the runtime's total.
//! Not checked on a real APU (see docs/windows.md).

use rocmguard_core::{topology, UmaMode};

use crate::win;

fn applies(integrated: bool) -> bool {
    match crate::config().map(|c| c.uma) {
        Some(UmaMode::On) => true,
        Some(UmaMode::Auto) => integrated,
        _ => false,
    }
}

/// `(ceiling, host bytes available beyond the reserve)`, from `GlobalMemoryStatusEx`.
fn host() -> Option<(u64, u64)> {
    let config = crate::config()?;
    let mut status = win::MemoryStatus {
        length: std::mem::size_of::<win::MemoryStatus>() as u32,
        memory_load: 0,
        total_phys: 0,
        avail_phys: 0,
        total_page_file: 0,
        avail_page_file: 0,
        total_virtual: 0,
        avail_virtual: 0,
        avail_extended_virtual: 0,
    };
    // SAFETY: a struct of the size its first field says.
    if unsafe { win::GlobalMemoryStatusEx(&mut status) } == 0 {
        return None;
    }
    let ram = status.total_phys;
    let reserve = config.host_reserve.resolve(ram);
    let ceiling = topology::uma_ceiling(ram / 2, None, ram, config.host_reserve);
    Some((ceiling, status.avail_phys.saturating_sub(reserve)))
}

/// The total the pool works with for a device whose runtime reports `total`.
pub fn device_total(total: u64, integrated: bool) -> u64 {
    if !applies(integrated) {
        return total;
    }
    host().map_or(total, |(ceiling, _)| ceiling.max(total))
}

/// The free memory the pool works with for a device whose runtime reports `free` of `total`:
/// what the runtime says plus the shared memory beyond its total that the host has free.
pub fn device_free(free: u64, total: u64, integrated: bool) -> u64 {
    if !applies(integrated) {
        return free;
    }
    match host() {
        Some((ceiling, available)) if ceiling > total => free + (ceiling - total).min(available),
        _ => free,
    }
}
