//! The machine as the kernel describes it in sysfs and procfs: AMD GPUs from the KFD topology,
//! their memory from the DRM devices, the `amdgpu` and `ttm` module parameters, and system RAM.
//!
//! Every read goes through a root directory (`/` on a real machine), so the doctor's tests and
//! the unit tests below run against fake trees. Missing files are `None`, never errors: a machine
//! without a GPU, a container without `/sys/module`, or an old kernel is a normal answer.
//!
//! Files read, all relative to the root:
//! - `sys/class/kfd/kfd/topology/nodes/N/properties` (`key value` lines) and
//!   `nodes/N/mem_banks/M/properties`: one node per CPU socket and per GPU; GPU nodes have
//!   `simd_count > 0` and a `gfx_target_version` (major*10000 + minor*100 + stepping).
//! - `sys/class/drm/cardN/device/mem_info_{vram_total,vis_vram_total,gtt_total}` (bytes), matched
//!   to a KFD node through the render node listed in `cardN/device/drm/` (`renderD128` belongs to
//!   the node whose `drm_render_minor` is 128).
//! - `sys/module/amdgpu/parameters/*` and `sys/module/ttm/parameters/pages_limit`.
//! - `proc/meminfo`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::size::{format_size, Limit};

/// TTM counts `pages_limit` in pages of this size (x86-64 and arm64 with 4 KiB pages).
pub const TTM_PAGE_SIZE: u64 = 4096;

/// `amdgpu` module parameters that decide how GPU memory behaves, shown by the doctor.
pub const AMDGPU_PARAMS: &[&str] = &["noretry", "gttsize", "vramlimit", "cwsr_enable"];

/// A gfx IP version, as in `gfx1030` or `HSA_OVERRIDE_GFX_VERSION=10.3.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GfxVersion {
    pub major: u32,
    pub minor: u32,
    pub stepping: u32,
}

impl GfxVersion {
    /// From KFD's `gfx_target_version` (`100300` is gfx1030, `90010` is gfx90a).
    pub fn from_target_version(v: u32) -> GfxVersion {
        GfxVersion {
            major: v / 10000,
            minor: (v / 100) % 100,
            stepping: v % 100,
        }
    }

    /// Parses `HSA_OVERRIDE_GFX_VERSION` the way libhsakmt does: exactly `major.minor.stepping`,
    /// major at most 63, the others at most 255; anything else makes the runtime fail to start.
    pub fn parse_override(text: &str) -> Result<GfxVersion, String> {
        let parts: Vec<&str> = text.trim().split('.').collect();
        let numbers: Vec<u32> = parts
            .iter()
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .filter_map(|p| p.parse().ok())
            .collect();
        if parts.len() != 3 || numbers.len() != 3 {
            return Err(format!(
                "`{}` is not major.minor.stepping (for example 10.3.0)",
                text
            ));
        }
        if numbers[0] > 63 || numbers[1] > 255 || numbers[2] > 255 {
            return Err(format!("`{}` is out of range", text));
        }
        Ok(GfxVersion {
            major: numbers[0],
            minor: numbers[1],
            stepping: numbers[2],
        })
    }

    /// `gfx1030`, `gfx90a`: the stepping is one hex digit in LLVM's target names.
    pub fn name(&self) -> String {
        format!("gfx{}{}{:x}", self.major, self.minor, self.stepping)
    }

    /// `10.3.0`, the form `HSA_OVERRIDE_GFX_VERSION` takes.
    pub fn override_text(&self) -> String {
        format!("{}.{}.{}", self.major, self.minor, self.stepping)
    }

    /// Integrated GPUs (APUs) by target. KFD has no "integrated" flag for current APUs (they get
    /// a GPU node of their own, like a discrete card), but consumer APUs have gfx targets of their
    /// own. MI300A shares gfx942 with the discrete MI300X, so it is not listed.
    pub fn is_apu(&self) -> bool {
        matches!(
            (self.major, self.minor, self.stepping),
            (8, 0, 1)
                | (8, 1, 0)
                | (9, 0, 2)
                | (9, 0, 9)
                | (9, 0, 12)
                | (10, 1, 3)
                | (10, 3, 3)
                | (10, 3, 5)
                | (10, 3, 6)
                | (10, 3, 7)
                | (11, 0, 3)
                | (11, 5, _)
        )
    }
}

/// One memory bank of a KFD node (`mem_banks/M/properties`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemBank {
    /// 0 system, 1 frame buffer (public), 2 frame buffer (private).
    pub heap_type: u32,
    pub size: u64,
}

/// What the DRM device of a GPU says about its memory (`cardN/device/mem_info_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrmMemory {
    /// `card0`.
    pub card: String,
    /// VRAM; on an APU, the carve-out the BIOS took from RAM.
    pub vram_total: Option<u64>,
    /// The part of VRAM the CPU can map (the PCI BAR; all of it with resizable BAR).
    pub vis_vram_total: Option<u64>,
    /// GTT: system memory the GPU can map, capped by `amdgpu.gttsize`.
    pub gtt_total: Option<u64>,
}

/// A GPU node of the KFD topology.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gpu {
    /// The node's number under `topology/nodes` (CPU nodes come first).
    pub node: u32,
    pub gfx_target_version: u32,
    pub simd_count: u32,
    /// Non-zero only for old APUs (Kaveri, Carrizo) whose CPU and GPU share one node.
    pub cpu_cores_count: u32,
    pub vendor_id: u32,
    pub device_id: u32,
    /// PCI bus, device and function: `bus << 8 | device << 3 | function`.
    pub location_id: u32,
    pub domain: u32,
    pub drm_render_minor: Option<u32>,
    pub mem_banks: Vec<MemBank>,
    pub drm: Option<DrmMemory>,
}

impl Gpu {
    pub fn gfx(&self) -> GfxVersion {
        GfxVersion::from_target_version(self.gfx_target_version)
    }

    pub fn integrated(&self) -> bool {
        self.cpu_cores_count > 0 || self.gfx().is_apu()
    }

    /// Device memory: the DRM figure, else the sum of the node's frame-buffer banks.
    pub fn vram(&self) -> Option<u64> {
        if let Some(v) = self.drm.as_ref().and_then(|d| d.vram_total) {
            return Some(v);
        }
        let banks: u64 = self
            .mem_banks
            .iter()
            .filter(|b| b.heap_type == 1 || b.heap_type == 2)
            .map(|b| b.size)
            .sum();
        if banks > 0 {
            Some(banks)
        } else {
            None
        }
    }

    pub fn gtt(&self) -> Option<u64> {
        self.drm.as_ref().and_then(|d| d.gtt_total)
    }

    /// `0000:03:00.0`.
    pub fn pci_address(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain,
            self.location_id >> 8,
            (self.location_id >> 3) & 0x1f,
            self.location_id & 7
        )
    }
}

/// Everything the doctor and the unified-memory view need from one machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    pub root: PathBuf,
    /// `sys/class/kfd/kfd/topology/nodes` exists: the amdgpu driver with its compute side.
    pub kfd: bool,
    /// `sys/module/amdgpu` exists.
    pub amdgpu_loaded: bool,
    pub gpus: Vec<Gpu>,
    /// The [`AMDGPU_PARAMS`] present, with their values as sysfs shows them.
    pub amdgpu_params: Vec<(String, String)>,
    /// TTM's cap on pages for GPU buffers (`ttm.pages_limit`; the kernel fills in half of RAM
    /// when it is not set on the command line). `None` when unreadable or 0.
    pub ttm_pages_limit: Option<u64>,
    pub mem_total: Option<u64>,
    pub mem_available: Option<u64>,
}

impl Machine {
    /// Reads the machine under `root` (`/` for the real one).
    pub fn read(root: &Path) -> Machine {
        let nodes_dir = root.join("sys/class/kfd/kfd/topology/nodes");
        let cards = read_drm_cards(root);
        let mut gpus = Vec::new();
        for (node, dir) in numbered_entries(&nodes_dir, "") {
            if let Some(mut gpu) = read_gpu_node(node, &dir) {
                gpu.drm = gpu.drm_render_minor.and_then(|minor| {
                    cards
                        .iter()
                        .find(|(renders, _)| renders.contains(&minor))
                        .map(|(_, mem)| mem.clone())
                });
                gpus.push(gpu);
            }
        }
        let params_dir = root.join("sys/module/amdgpu/parameters");
        let amdgpu_params = AMDGPU_PARAMS
            .iter()
            .filter_map(|p| read_trimmed(&params_dir.join(p)).map(|v| (p.to_string(), v)))
            .collect();
        let meminfo = read_trimmed(&root.join("proc/meminfo")).unwrap_or_default();
        Machine {
            root: root.to_path_buf(),
            kfd: nodes_dir.is_dir(),
            amdgpu_loaded: root.join("sys/module/amdgpu").is_dir(),
            gpus,
            amdgpu_params,
            ttm_pages_limit: read_number(&root.join("sys/module/ttm/parameters/pages_limit"))
                .filter(|&p| p > 0),
            mem_total: meminfo_field(&meminfo, "MemTotal"),
            mem_available: meminfo_field(&meminfo, "MemAvailable"),
        }
    }

    /// An `amdgpu` parameter's value, if sysfs shows it.
    pub fn amdgpu_param(&self, name: &str) -> Option<&str> {
        self.amdgpu_params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The GPU whose memory is system memory: the first integrated one, else (when the caller
    /// knows better than the target table, e.g. a new APU) the only GPU with a GTT size.
    pub fn unified_gpu(&self) -> Option<&Gpu> {
        self.gpus
            .iter()
            .find(|g| g.integrated() && g.gtt().is_some())
            .or_else(|| {
                let mut with_gtt = self.gpus.iter().filter(|g| g.gtt().is_some());
                match (with_gtt.next(), with_gtt.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            })
    }

    /// [`uma_ceiling`] for `gpu` on this machine, or why it cannot be computed.
    pub fn uma_ceiling(&self, gpu: &Gpu, host_reserve: Limit) -> Result<u64, String> {
        let gtt = gpu.gtt().ok_or_else(|| {
            format!(
                "GPU node {} has no GTT size (sys/class/drm/card*/device/mem_info_gtt_total)",
                gpu.node
            )
        })?;
        let ram = self
            .mem_total
            .ok_or_else(|| "no MemTotal in proc/meminfo".to_string())?;
        let ceiling = uma_ceiling(gtt, self.ttm_pages_limit, ram, host_reserve);
        if ceiling == 0 {
            return Err(format!(
                "host_reserve {} leaves no memory for the GPU ({} of RAM)",
                host_reserve,
                format_size(ram)
            ));
        }
        Ok(ceiling)
    }
}

/// The most memory an integrated GPU can really use, given its GTT size, TTM's page limit (in
/// pages) and the machine's RAM:
///
/// - On an APU, "VRAM" is a carve-out the BIOS takes from RAM (512 MiB on a Strix Halo set up
///   for Linux), so the total that `hipMemGetInfo` reports says little. What the GPU allocates
///   beyond it is GTT: system pages mapped into the GPU, capped by `amdgpu.gttsize`, whose
///   effective value is `mem_info_gtt_total`.
/// - TTM, the memory manager under amdgpu, refuses pages for GPU buffers past `ttm.pages_limit`
///   (default half of RAM). A GTT larger than that cannot be filled: raising `amdgpu.gttsize`
///   alone is the field's usual mistake.
/// - Every byte comes out of RAM that the kernel, the desktop and the program's own host side
///   need; filling it wakes the OOM killer, so the ceiling keeps `host_reserve` (bytes, or a
///   share of RAM) for them.
///
/// The carve-out is not added: `MemTotal` already excludes it, and where it is large (a BIOS set
/// to give the GPU most of RAM) the carve-out is real device memory that the runtime reports
/// correctly, so the unified view is not wanted there (the doctor says so).
pub fn uma_ceiling(
    gtt: u64,
    ttm_pages_limit: Option<u64>,
    mem_total: u64,
    host_reserve: Limit,
) -> u64 {
    let ttm = ttm_pages_limit.map_or(u64::MAX, |p| p.saturating_mul(TTM_PAGE_SIZE));
    let host_left = mem_total.saturating_sub(host_reserve.resolve(mem_total));
    gtt.min(ttm).min(host_left)
}

/// The unified-memory ceiling of the integrated GPU of the machine under `root` (`/` on a real
/// one): see [`uma_ceiling`] for the reasoning and [`Machine::unified_gpu`] for which GPU.
pub fn unified_memory_ceiling(root: &Path, host_reserve: Limit) -> Result<u64, String> {
    let machine = Machine::read(root);
    let gpu = machine.unified_gpu().ok_or_else(|| {
        format!(
            "no integrated GPU with a GTT size under {}",
            root.join("sys/class/drm").display()
        )
    })?;
    machine.uma_ceiling(gpu, host_reserve)
}

/// `key value` lines, as KFD writes its properties files.
pub fn parse_properties(text: &str) -> Vec<(&str, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let key = parts.next()?;
            let value = parts.next()?.parse().ok()?;
            Some((key, value))
        })
        .collect()
}

/// A `/proc/meminfo` field in bytes (`MemTotal:  32768000 kB`).
pub fn meminfo_field(meminfo: &str, name: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (key, rest) = line.split_once(':')?;
        if key.trim() != name {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let value: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") => Some(value * 1024),
            None => Some(value),
            _ => None,
        }
    })
}

fn read_gpu_node(node: u32, dir: &Path) -> Option<Gpu> {
    let text = fs::read_to_string(dir.join("properties")).ok()?;
    let props = parse_properties(&text);
    let get = |key: &str| props.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let simd_count = get("simd_count").unwrap_or(0) as u32;
    if simd_count == 0 {
        return None;
    }
    let mem_banks = numbered_entries(&dir.join("mem_banks"), "")
        .into_iter()
        .filter_map(|(_, bank)| {
            let text = fs::read_to_string(bank.join("properties")).ok()?;
            let props = parse_properties(&text);
            let get = |key: &str| props.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            Some(MemBank {
                heap_type: get("heap_type").unwrap_or(0) as u32,
                size: get("size_in_bytes").unwrap_or(0),
            })
        })
        .collect();
    Some(Gpu {
        node,
        gfx_target_version: get("gfx_target_version").unwrap_or(0) as u32,
        simd_count,
        cpu_cores_count: get("cpu_cores_count").unwrap_or(0) as u32,
        vendor_id: get("vendor_id").unwrap_or(0) as u32,
        device_id: get("device_id").unwrap_or(0) as u32,
        location_id: get("location_id").unwrap_or(0) as u32,
        domain: get("domain").unwrap_or(0) as u32,
        drm_render_minor: get("drm_render_minor").map(|m| m as u32),
        mem_banks,
        drm: None,
    })
}

/// Each `cardN` with amdgpu's memory files, with the render minors listed under its device.
fn read_drm_cards(root: &Path) -> Vec<(Vec<u32>, DrmMemory)> {
    numbered_entries(&root.join("sys/class/drm"), "card")
        .into_iter()
        .filter_map(|(n, card)| {
            let device = card.join("device");
            let mem = DrmMemory {
                card: format!("card{}", n),
                vram_total: read_number(&device.join("mem_info_vram_total")),
                vis_vram_total: read_number(&device.join("mem_info_vis_vram_total")),
                gtt_total: read_number(&device.join("mem_info_gtt_total")),
            };
            if mem.vram_total.is_none() && mem.gtt_total.is_none() {
                return None;
            }
            let renders = numbered_entries(&device.join("drm"), "renderD")
                .into_iter()
                .map(|(minor, _)| minor)
                .collect();
            Some((renders, mem))
        })
        .collect()
}

/// Entries of `dir` named `prefix` followed by a number only (`card0`, not `card0-DP-1`), sorted
/// by that number.
fn numbered_entries(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let n = name.strip_prefix(prefix)?.parse().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_number(path: &Path) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// The fake trees the doctor's tests use too (`tests/fixtures/sysroot`).
    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/sysroot")
            .join(name)
    }

    #[test]
    fn gfx_names_and_overrides() {
        assert_eq!(GfxVersion::from_target_version(100300).name(), "gfx1030");
        assert_eq!(GfxVersion::from_target_version(110501).name(), "gfx1151");
        assert_eq!(GfxVersion::from_target_version(90010).name(), "gfx90a");
        assert_eq!(GfxVersion::from_target_version(90402).name(), "gfx942");
        let o = GfxVersion::parse_override("10.3.0").unwrap();
        assert_eq!(o, GfxVersion::from_target_version(100300));
        assert_eq!(o.override_text(), "10.3.0");
        for bad in [
            "10.3", "gfx1030", "10.3.0.1", "10.x.0", "64.0.0", "", "10..0",
        ] {
            assert!(GfxVersion::parse_override(bad).is_err(), "{}", bad);
        }
        assert!(GfxVersion::from_target_version(110501).is_apu());
        assert!(GfxVersion::from_target_version(110003).is_apu());
        assert!(!GfxVersion::from_target_version(110000).is_apu());
        assert!(!GfxVersion::from_target_version(100100).is_apu());
    }

    #[test]
    fn properties_and_meminfo() {
        let p = parse_properties("simd_count 80\ngfx_target_version 110501\nname junk x\n");
        assert_eq!(p, vec![("simd_count", 80), ("gfx_target_version", 110501)]);
        let m = "MemTotal:       131072000 kB\nMemFree: 5 kB\nHugePages_Total:       0\n";
        assert_eq!(meminfo_field(m, "MemTotal"), Some(131_072_000 * 1024));
        assert_eq!(meminfo_field(m, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_field(m, "MemAvailable"), None);
    }

    #[test]
    fn reads_the_strix_halo_tree() {
        let m = Machine::read(&fixture("strix-halo"));
        assert!(m.kfd && m.amdgpu_loaded);
        assert_eq!(m.gpus.len(), 1, "the CPU node is not a GPU");
        let g = &m.gpus[0];
        assert_eq!(g.node, 1);
        assert_eq!(g.gfx().name(), "gfx1151");
        assert!(g.integrated());
        assert_eq!(g.vram(), Some(512 << 20));
        assert_eq!(g.gtt(), Some(108 * GIB));
        assert_eq!(g.drm.as_ref().unwrap().card, "card0");
        assert_eq!(g.pci_address(), "0000:c5:00.0");
        assert_eq!(m.ttm_pages_limit, Some(27_648_000));
        assert_eq!(m.mem_total, Some(131_072_000 * 1024));
        assert_eq!(m.amdgpu_param("gttsize"), Some("110592"));
    }

    #[test]
    fn strix_halo_ceiling_is_the_ttm_limit() {
        // GTT 108 GiB (amdgpu.gttsize raised), TTM 27,648,000 pages = 105.47 GiB, RAM 125 GiB
        // less 10% = 112.5 GiB: TTM's limit is the real ceiling.
        let root = fixture("strix-halo");
        let ceiling = unified_memory_ceiling(&root, Limit::Percent(10.0)).unwrap();
        assert_eq!(ceiling, 27_648_000 * 4096);
        // A larger reserve makes RAM the bound: 125 GiB - 24 GiB.
        let ceiling = unified_memory_ceiling(&root, Limit::Bytes(24 * GIB)).unwrap();
        assert_eq!(ceiling, 131_072_000 * 1024 - 24 * GIB);
        let err = unified_memory_ceiling(&root, Limit::Percent(100.0)).unwrap_err();
        assert!(err.contains("leaves no memory"), "{}", err);
    }

    #[test]
    fn ceiling_takes_the_lowest_bound() {
        let r = Limit::Percent(10.0);
        // GTT lowest (the kernel default of half of RAM with no TTM override).
        assert_eq!(
            uma_ceiling(64 * GIB, Some(32 * GIB / 4096 * 3), 128 * GIB, r),
            64 * GIB
        );
        // TTM lowest.
        assert_eq!(
            uma_ceiling(120 * GIB, Some(16 * GIB / 4096), 128 * GIB, r),
            16 * GIB
        );
        // RAM less the reserve lowest; an unknown TTM limit bounds nothing.
        assert_eq!(uma_ceiling(120 * GIB, None, 100 * GIB, r), 90 * GIB);
        assert_eq!(
            uma_ceiling(120 * GIB, None, 100 * GIB, Limit::Bytes(8 * GIB)),
            92 * GIB
        );
    }

    #[test]
    fn discrete_and_empty_machines() {
        let m = Machine::read(&fixture("rx5600xt"));
        assert_eq!(m.gpus.len(), 1);
        let g = &m.gpus[0];
        assert_eq!(g.gfx().name(), "gfx1010");
        assert!(!g.integrated());
        assert_eq!(g.vram(), Some(6 * GIB));
        assert_eq!(
            unified_memory_ceiling(&fixture("rx5600xt"), Limit::Percent(10.0)).unwrap(),
            16 * GIB,
            "a lone GPU with a GTT size serves when the caller forces the unified view"
        );

        let m = Machine::read(&fixture("two-gpus"));
        let names: Vec<String> = m.gpus.iter().map(|g| g.gfx().name()).collect();
        assert_eq!(names, ["gfx1100", "gfx1031"]);
        assert_eq!(m.gpus[1].drm.as_ref().unwrap().card, "card1");
        assert!(unified_memory_ceiling(&fixture("two-gpus"), Limit::Percent(10.0)).is_err());

        let m = Machine::read(&fixture("no-gpu"));
        assert!(!m.kfd && !m.amdgpu_loaded && m.gpus.is_empty());
        assert!(m.mem_total.is_some());
        let err = unified_memory_ceiling(&fixture("no-gpu"), Limit::Percent(10.0)).unwrap_err();
        assert!(err.contains("no integrated GPU"), "{}", err);
        assert!(Machine::read(Path::new("/nonexistent-root"))
            .gpus
            .is_empty());
    }
}
