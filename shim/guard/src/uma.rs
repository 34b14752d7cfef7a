//! Unified-memory APUs (Strix Halo and friends): their runtime reports a small carve-out as the
//! device's memory (15.49 GiB on a 128 GiB machine) while the GPU can use far more of system
//! memory, so frameworks refuse work they could do. In unified-memory mode (automatic on an
//! integrated device, `ROCMGUARD_UMA=1` to force) the shim works with the real ceiling, bounded
//! by system memory less a host reserve: on Linux the GTT / TTM limit from sysfs
//! (`rocmguard_core::topology::unified_memory_ceiling`), on Windows the shared system memory
//! WDDM lets an integrated GPU use, half of RAM (`platform::unified_memory_ceiling`).

use once_cell::sync::OnceCell;
use rocmguard_core::UmaMode;

/// The ceiling, read once (`ROCMGUARD_SYSROOT` roots the sysfs reads, for tests).
fn ceiling() -> Option<u64> {
    static CEILING: OnceCell<Option<u64>> = OnceCell::new();
    *CEILING.get_or_init(|| {
        let config = crate::config()?;
        match crate::platform::unified_memory_ceiling(config.host_reserve) {
            Ok(c) => {
                crate::log::warn(format_args!(
                    "unified memory: the GPU may use {} of system memory; memory queries report that",
                    rocmguard_core::format_size(c)
                ));
                Some(c)
            }
            Err(why) => {
                crate::log::warn(format_args!(
                    "unified-memory mode wanted but {}; keeping the runtime's figures",
                    why
                ));
                None
            }
        }
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
