//! Unified-memory APUs (Strix Halo and friends) on Windows: the runtime reports the dedicated
//! carve-out as the device's memory, while WDDM lets an integrated GPU also use shared system
//! memory, up to half of RAM. In unified-memory mode (automatic on an integrated device,
//! `ROCMGUARD_UMA=1` to force) the pool works with that ceiling, bounded by system memory less
//! the host reserve (the core's `uma_ceiling`), as the Linux library does with the GTT limit.
//! Not checked on a real APU (see docs/windows.md).

use once_cell::sync::OnceCell;
use rocmguard_core::{format_size, topology, UmaMode};

use crate::win;

/// The ceiling, computed once from `GlobalMemoryStatusEx`.
fn ceiling() -> Option<u64> {
    static CEILING: OnceCell<Option<u64>> = OnceCell::new();
    *CEILING.get_or_init(|| {
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
            crate::log::warn(format_args!(
                "unified-memory mode wanted but the system's memory size is unknown; keeping \
                 the runtime's figures"
            ));
            return None;
        }
        let ram = status.total_phys;
        let c = topology::uma_ceiling(ram / 2, None, ram, config.host_reserve);
        crate::log::warn(format_args!(
            "unified memory: the GPU may use {} of system memory; memory queries report that",
            format_size(c)
        ));
        Some(c)
    })
}

/// Whether the unified-memory view applies to a device.
fn applies(integrated: bool) -> bool {
    match crate::config().map(|c| c.uma) {
        Some(UmaMode::On) => true,
        Some(UmaMode::Auto) => integrated,
        _ => false,
    }
}

/// The total the pool works with for a device whose runtime reports `total`.
pub fn device_total(total: u64, integrated: bool) -> u64 {
    match applies(integrated).then(ceiling).flatten() {
        Some(c) => c.max(total),
        None => total,
    }
}

/// The free memory for a device whose runtime reports `free` of `total`: the ceiling less what
/// the runtime counts as used.
pub fn device_free(free: u64, total: u64, integrated: bool) -> u64 {
    match applies(integrated).then(ceiling).flatten() {
        Some(c) => c.max(total).saturating_sub(total.saturating_sub(free)),
        None => free,
    }
}
