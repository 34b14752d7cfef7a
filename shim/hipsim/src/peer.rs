//! Peer access between simulated devices, after clr's `hip_peer.cpp`: every pair of distinct
//! devices can access each other (a machine whose GPUs are all linked), enabling is per
//! (device, peer) and a second enable is `hipErrorPeerAccessAlreadyEnabled`. `hipMemGetAccess`
//! lives here too: it is how a program (or a test) asks what a device may do with mapped
//! virtual memory, which peer access must extend to.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint, c_ulonglong};
use std::sync::Mutex;

use crate::api::{get_access, MemLocation};
use crate::error::{self, *};
use crate::state::{self, current_device};

const PEER_ACCESS_ALREADY_ENABLED: HipError = 704;
const PEER_ACCESS_NOT_ENABLED: HipError = 705;

/// Enabled (device, peer) pairs: `device` may use `peer`'s memory.
static ENABLED: Mutex<Vec<(c_int, c_int)>> = Mutex::new(Vec::new());

/// clr's `canAccessPeer`: a device is not its own peer; out-of-range ids are invalid.
fn can_access(device: c_int, peer: c_int) -> Result<bool, HipError> {
    state::with(|s| {
        s.check_device(device)?;
        s.check_device(peer)
    })?;
    Ok(device != peer)
}

hip_export! {
    "hip_4.2" fn hipDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> c_int {
        error::api(|| {
            if can.is_null() {
                return Err(INVALID_VALUE);
            }
            *can = can_access(device, peer)? as c_int;
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> c_int {
        error::api(|| {
            let device = current_device();
            if flags != 0 {
                return Err(INVALID_VALUE);
            }
            if !can_access(device, peer).unwrap_or(false) {
                return Err(INVALID_DEVICE);
            }
            let mut enabled = ENABLED.lock().unwrap_or_else(|e| e.into_inner());
            if enabled.contains(&(device, peer)) {
                return Err(PEER_ACCESS_ALREADY_ENABLED);
            }
            enabled.push((device, peer));
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipDeviceDisablePeerAccess(peer: c_int) -> c_int {
        error::api(|| {
            let device = current_device();
            if !can_access(device, peer).unwrap_or(false) {
                return Err(INVALID_DEVICE);
            }
            let mut enabled = ENABLED.lock().unwrap_or_else(|e| e.into_inner());
            let before = enabled.len();
            enabled.retain(|p| *p != (device, peer));
            match enabled.len() < before {
                true => Ok(()),
                false => Err(PEER_ACCESS_NOT_ENABLED),
            }
        })
    }
}

hip_export! {
    "hip_5.1" fn hipMemGetAccess(
        flags: *mut c_ulonglong,
        location: *const MemLocation,
        ptr: *mut c_void,
    ) -> c_int {
        error::api(|| get_access(flags, location, ptr))
    }
}
