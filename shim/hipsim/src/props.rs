//! What a simulated device says about itself: `hipDeviceGetAttribute` and the two layouts of
//! `hipDeviceProp_t`. Offsets were computed with `offsetof` against ROCm 6.3's headers
//! (`hip_runtime_api.h` for R0600, `hip_deprecated.h` for R0000).

use crate::config::Config;

/// A discrete RDNA3 card, or a Strix Halo APU in integrated mode.
struct Identity {
    name: &'static str,
    arch: &'static str,
    major: i32,
    minor: i32,
    multiprocessors: i32,
}

fn identity(cfg: &Config) -> Identity {
    match cfg.integrated {
        false => Identity {
            name: "hipsim (simulated) gfx1100",
            arch: "gfx1100",
            major: 11,
            minor: 0,
            multiprocessors: 48,
        },
        true => Identity {
            name: "hipsim (simulated) gfx1151",
            arch: "gfx1151",
            major: 11,
            minor: 5,
            multiprocessors: 20,
        },
    }
}

const WARP_SIZE: i32 = 32;

/// `hipDeviceAttribute_t` values the simulator answers; every other attribute reads as 0.
const ATTR_COMPUTE_CAPABILITY_MAJOR: i32 = 23;
const ATTR_INTEGRATED: i32 = 16;
const ATTR_MANAGED_MEMORY: i32 = 24;
const ATTR_COMPUTE_CAPABILITY_MINOR: i32 = 61;
const ATTR_MULTIPROCESSOR_COUNT: i32 = 63;
const ATTR_TOTAL_GLOBAL_MEM: i32 = 84;
const ATTR_WARP_SIZE: i32 = 87;
const ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: i32 = 89;

/// `hipDeviceGetAttribute`. The total memory is clamped to `INT_MAX` as ROCm does.
pub fn attribute(cfg: &Config, attr: i32) -> i32 {
    let id = identity(cfg);
    match attr {
        ATTR_TOTAL_GLOBAL_MEM => cfg.reported_vram.min(i32::MAX as u64) as i32,
        ATTR_INTEGRATED => cfg.integrated as i32,
        ATTR_MANAGED_MEMORY => 1,
        ATTR_WARP_SIZE => WARP_SIZE,
        ATTR_COMPUTE_CAPABILITY_MAJOR => id.major,
        ATTR_COMPUTE_CAPABILITY_MINOR => id.minor,
        ATTR_MULTIPROCESSOR_COUNT => id.multiprocessors,
        ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => crate::vmm::supported(cfg) as i32,
        _ => 0,
    }
}

/// Byte offsets of the fields the simulator fills in one layout of `hipDeviceProp_t`.
pub struct Layout {
    pub size: usize,
    name: usize,
    total_global_mem: usize,
    warp_size: usize,
    major: usize,
    minor: usize,
    multiprocessors: usize,
    integrated: usize,
    managed_memory: usize,
    arch: usize,
}

/// `hipDeviceProp_tR0600`, what code built against ROCm >= 6 passes.
pub const R0600: Layout = Layout {
    size: 1472,
    name: 0,
    total_global_mem: 288,
    warp_size: 308,
    major: 360,
    minor: 364,
    multiprocessors: 388,
    integrated: 396,
    managed_memory: 652,
    arch: 1160,
};

/// `hipDeviceProp_tR0000`, what the unsuffixed `hipGetDeviceProperties` export takes.
pub const R0000: Layout = Layout {
    size: 792,
    name: 0,
    total_global_mem: 256,
    warp_size: 276,
    major: 328,
    minor: 332,
    multiprocessors: 336,
    integrated: 652,
    managed_memory: 772,
    arch: 396,
};

/// The bytes of a property struct in `layout` (fields not listed stay zero). `name` and
/// `gcnArchName` are both 256-byte char arrays in both layouts.
pub fn properties(cfg: &Config, layout: &Layout) -> Vec<u8> {
    let id = identity(cfg);
    let mut out = vec![0u8; layout.size];
    let mut put =
        |offset: usize, bytes: &[u8]| out[offset..offset + bytes.len()].copy_from_slice(bytes);
    put(layout.name, id.name.as_bytes());
    put(layout.arch, id.arch.as_bytes());
    put(layout.total_global_mem, &cfg.reported_vram.to_ne_bytes());
    put(layout.warp_size, &WARP_SIZE.to_ne_bytes());
    put(layout.major, &id.major.to_ne_bytes());
    put(layout.minor, &id.minor.to_ne_bytes());
    put(layout.multiprocessors, &id.multiprocessors.to_ne_bytes());
    put(layout.integrated, &(cfg.integrated as i32).to_ne_bytes());
    put(layout.managed_memory, &1i32.to_ne_bytes());
    out
}
