//! `ROCMGUARD_GROUP` is Linux only (its members find each other through a private directory
//! and `flock`); the Windows DLL keeps each process's own cap. A named file mapping would carry
//! it there. The shared guard calls these, so they exist here as what "no group" means.

/// Always room outside a group: the pool's own cap decides.
pub fn reserve(_device: i32, _bytes: u64, _cap: u64) -> bool {
    true
}

pub fn release(_device: i32, _bytes: u64) {}

/// No other members outside a group.
pub fn others_use(_device: i32) -> u64 {
    0
}
