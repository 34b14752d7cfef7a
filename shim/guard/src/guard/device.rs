//! The current device, which every pooled allocation asks for: the runtime's answer, or 0
//! without a call once the runtime has said it has one device (ordinals run from 0, so its only
//! device is always current, and the count is fixed when the runtime starts).

use std::sync::atomic::Ordering;

use super::errors::SHADOW_ERROR;
use super::{Active, MAX_DEVICES, SUCCESS};

impl Active {
    #[inline]
    pub fn current_device(&self) -> Option<i32> {
        if self.one_device.load(Ordering::Relaxed) {
            return Some(0);
        }
        let mut d = 0;
        // SAFETY: valid out-pointer.
        let ok = unsafe { (self.api.get_device)(&mut d) } == SUCCESS;
        (ok && (0..MAX_DEVICES as i32).contains(&d)).then_some(d)
    }

    /// Asks the runtime how many devices it has, once a pool exists (the runtime works). A
    /// failed count changes nothing and leaves the program's last error as it was.
    pub(super) fn count_devices(&self) {
        let mut count = 0;
        // SAFETY: no arguments; then a valid out-pointer.
        let (before, code) = unsafe {
            let before = (self.api.peek_last_error)();
            (before, (self.api.device_count)(&mut count))
        };
        if code == SUCCESS {
            self.one_device.store(count == 1, Ordering::Relaxed);
            return;
        }
        // SAFETY: no arguments: clears what the failed count left.
        unsafe { (self.api.get_last_error)() };
        if before != SUCCESS {
            SHADOW_ERROR.with(|c| c.set(before));
        }
    }
}
