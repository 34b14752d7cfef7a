//! Recording of hooked calls (`ROCMGUARD_TRACE`).

pub fn alloc(device: i32, addr: u64, size: u64) {
    let _ = (device, addr, size);
}

pub fn free(device: i32, addr: u64, size: u64) {
    let _ = (device, addr, size);
}

pub fn event(action: &str, device: i32, addr: u64, size: u64) {
    let _ = (action, device, addr, size);
}
