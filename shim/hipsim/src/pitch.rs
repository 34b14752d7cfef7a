//! Pitched allocations: `hipMallocPitch`, `hipMalloc3D` and `hipMemAllocPitch`, device memory of
//! `height * depth` rows of `width` bytes each padded to the pitch. They follow ROCm's clr
//! (`hipamd/src/hip_memory.cpp` at f9f995c, `ihipMallocPitch` lines 898-941): null out-pointers
//! are `hipErrorInvalidValue`, a zero extent gives a null pointer and success, the pitch is the
//! width rounded up to the device's `imagePitchAlignment_` (256 on every ROCm device,
//! `rocclr/device/rocm/rocdevice.cpp` line 1640), and the memory is one ordinary allocation of
//! `pitch * height * depth` bytes. `hipMemAllocPitch` (lines 3634-3645) also wants a non-zero
//! extent and an element size of 4, 8 or 16.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::ptr;

use crate::api::{allocate, Alloc};
use crate::error::{self, HipResult, INVALID_VALUE};
use crate::selfcall;

/// `imagePitchAlignment_` of ROCm's devices.
pub const PITCH_ALIGNMENT: usize = 256;

/// `hipPitchedPtr`.
#[repr(C)]
pub struct PitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// `hipExtent`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Extent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// clr's `ihipMallocPitch`.
unsafe fn malloc_pitch(
    out: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
    depth: usize,
) -> HipResult {
    if out.is_null() || pitch.is_null() {
        return Err(INVALID_VALUE);
    }
    if width == 0 || height == 0 || depth == 0 {
        out.write(ptr::null_mut());
        return Ok(());
    }
    let row = width
        .checked_add(PITCH_ALIGNMENT - 1)
        .ok_or(INVALID_VALUE)?
        / PITCH_ALIGNMENT
        * PITCH_ALIGNMENT;
    pitch.write(row);
    let size = row
        .checked_mul(height)
        .and_then(|s| s.checked_mul(depth))
        .ok_or(error::OUT_OF_MEMORY)?;
    match selfcall::on() {
        true => selfcall::malloc(out, size),
        false => allocate(out, size, Alloc::Device { flags: 0 }),
    }
}

hip_export! {
    "hip_4.2" fn hipMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int {
        error::api(|| malloc_pitch(ptr, pitch, width, height, 1))
    }
}

hip_export! {
    "hip_4.2" fn hipMalloc3D(pitched: *mut PitchedPtr, extent: Extent) -> c_int {
        error::api(|| {
            if pitched.is_null() {
                return Err(INVALID_VALUE);
            }
            let p = &mut *pitched;
            let mut pitch = 0;
            malloc_pitch(&mut p.ptr, &mut pitch, extent.width, extent.height, extent.depth)?;
            p.pitch = pitch;
            p.xsize = extent.width;
            p.ysize = extent.height;
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipMemAllocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, element_size: c_uint) -> c_int {
        error::api(|| {
            if width == 0 || height == 0 || ![4, 8, 16].contains(&element_size) {
                return Err(INVALID_VALUE);
            }
            malloc_pitch(ptr, pitch, width, height, 1)
        })
    }
}
