//! The device calls: memory totals, attributes and properties, choosing the current device,
//! and synchronizing or resetting it.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr;

use super::put;
use crate::error::{self, *};
use crate::props::{self, Layout};
use crate::state::{self, current_device};
use crate::work;

hip_export! {
    /// Free and total of the current device; in integrated mode the total is the smaller
    /// reported one and free is counted down from it.
    "hip_4.2" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> c_int {
        error::api(|| {
            if free.is_null() || total.is_null() {
                return Err(INVALID_VALUE);
            }
            let (f, t) = state::with(|s| {
                let device = current_device();
                s.check_device(device)?;
                let used = s.mem.used(device);
                let t = s.cfg.reported_vram;
                let f = match s.cfg.integrated {
                    true => t.saturating_sub(used),
                    false => s.cfg.vram.saturating_sub(used),
                };
                Ok::<_, HipError>((f, t))
            })?;
            free.write(f as usize);
            total.write(t as usize);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> c_int {
        error::api(|| {
            if bytes.is_null() {
                return Err(INVALID_VALUE);
            }
            let total = state::with(|s| s.check_device(device).map(|_| s.cfg.reported_vram))?;
            put(bytes, total as usize)
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int {
        error::api(|| {
            if value.is_null() {
                return Err(INVALID_VALUE);
            }
            let v = state::with(|s| {
                s.check_device(device)?;
                Ok::<_, HipError>(props::attribute(s.cfg, attr))
            })?;
            put(value, v)
        })
    }
}

/// Writes the properties of `device` in `layout` to `out`.
unsafe fn device_properties(out: *mut c_void, device: c_int, layout: &Layout) -> HipResult {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    let bytes = state::with(|s| {
        s.check_device(device)
            .map(|_| props::properties(s.cfg, layout))
    })?;
    ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
    Ok(())
}

hip_export! {
    /// The unsuffixed export takes the pre-6.0 layout, `hipDeviceProp_tR0000`.
    "hip_4.2" fn hipGetDeviceProperties(prop: *mut c_void, device: c_int) -> c_int {
        error::api(|| device_properties(prop, device, &props::R0000))
    }
}

hip_export! {
    "hip_6.0" fn hipGetDevicePropertiesR0600(prop: *mut c_void, device: c_int) -> c_int {
        error::api(|| device_properties(prop, device, &props::R0600))
    }
}

hip_export! {
    "hip_4.2" fn hipGetDeviceCount(count: *mut c_int) -> c_int {
        error::api(|| {
            let n = state::with(|s| s.cfg.devices);
            put(count, n)?;
            match n {
                0 => Err(NO_DEVICE),
                _ => Ok(()),
            }
        })
    }
}

hip_export! {
    "hip_4.2" fn hipGetDevice(device: *mut c_int) -> c_int {
        error::api(|| put(device, current_device()))
    }
}

hip_export! {
    "hip_4.2" fn hipSetDevice(device: c_int) -> c_int {
        error::api(|| {
            state::with(|s| s.check_device(device))?;
            state::set_current_device(device);
            Ok(())
        })
    }
}

hip_export! {
    /// Waits for all queued work of the current device; refused (and the captures invalidated)
    /// while any stream is capturing.
    "hip_4.2" fn hipDeviceSynchronize() -> c_int {
        error::api(|| {
            state::with(|s| {
                s.streams
                    .check_no_capture(&mut s.counters, STREAM_CAPTURE_UNSUPPORTED)
            })?;
            let device = current_device();
            work::wait_for(|w| w.device == device);
            state::with(|s| s.counters.syncs += 1);
            Ok(())
        })
    }
}

hip_export! {
    /// Waits for the current device's work, then frees every block it holds.
    "hip_4.2" fn hipDeviceReset() -> c_int {
        error::api(|| {
            let device = current_device();
            work::wait_for(|w| w.device == device);
            state::with(|s| {
                for ptr in s.mem.blocks_of(device) {
                    s.mem.release(&mut s.counters, ptr)?;
                }
                Ok(())
            })
        })
    }
}
