//! Unified-memory APUs (Strix Halo and friends): their runtime reports a small carve-out as the
//! device's memory while the GPU can really use far more of system memory.

/// The total the pool works with for a device whose runtime reports `total`.
pub fn device_total(total: u64, integrated: bool) -> u64 {
    let _ = integrated;
    total
}

/// The free memory the pool works with for a device whose runtime reports `free` of `total`.
pub fn device_free(free: u64, total: u64, integrated: bool) -> u64 {
    let _ = (total, integrated);
    free
}
