//! The doctor's self-test: the `rocmguard` binary re-runs itself as `rocmguard doctor-probe` with
//! `librocmguard.so` preloaded. The probe loads the HIP runtime the way a Python extension does
//! (`dlopen` through the normal search path), asks it for memory, allocates and frees 2 MiB,
//! and asks the process whether the guard is active and whose `hipMalloc` it calls. It prints
//! one JSON object; the doctor judges it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Sonames tried in order: the unversioned name PyTorch's wheels bundle, then the sonames of
/// ROCm 6, 7 and 5.
pub const RUNTIME_NAMES: &[&str] = &[
    "libamdhip64.so",
    "libamdhip64.so.6",
    "libamdhip64.so.7",
    "libamdhip64.so.5",
];

/// What the probe saw. Error codes are `hipError_t` values.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Report {
    /// The name that loaded, and the file behind it (from `/proc/self/maps`).
    pub runtime: Option<String>,
    pub runtime_path: Option<String>,
    /// `dlerror()` for each name that did not load.
    pub load_errors: Vec<String>,
    /// `hipRuntimeGetVersion`, when the runtime has it (HIP_VERSION: major*10^7 + minor*10^5 + patch).
    pub runtime_version: Option<i32>,
    /// (error, count) from `hipGetDeviceCount`.
    pub device_count: Option<(i32, i32)>,
    /// (error, free, total) from `hipMemGetInfo`.
    pub mem_info: Option<(i32, u64, u64)>,
    pub malloc: Option<i32>,
    pub free: Option<i32>,
    /// The file that `hipMalloc` resolves to for the process (the shim when it interposes).
    pub malloc_from: Option<String>,
    pub guard_version: Option<String>,
    pub guard_active: Option<i32>,
    /// `hipDeviceAttributeVirtualMemoryManagementSupported` of device 0.
    #[serde(default)]
    pub virtual_memory: Option<i32>,
    /// The runtime is rocmguard's simulator (it exports [`SIMULATOR_MARKER`]), not ROCm.
    #[serde(default)]
    pub simulator: bool,
}

/// A symbol only hipsim, rocmguard's simulated HIP runtime, exports: its counters.
pub const SIMULATOR_MARKER: &str = "hipsimCounters";

/// Whether the library file at `path` is hipsim: its dynamic symbol table names the marker.
pub fn is_simulator_file(path: &Path) -> bool {
    let marker = format!("{}\0", SIMULATOR_MARKER);
    std::fs::read(path)
        .is_ok_and(|bytes| bytes.windows(marker.len()).any(|w| w == marker.as_bytes()))
}

/// `hipDeviceAttributeVirtualMemoryManagementSupported` (ROCm 6).
const ATTRIBUTE_VIRTUAL_MEMORY: c_int = 89;
/// ROCm 6.0's `HIP_VERSION`, from which rocmguard uses virtual memory.
pub const FIRST_VIRTUAL_MEMORY_VERSION: i32 = 60_000_000;

/// Bytes the probe allocates: one pool segment.
pub const PROBE_BYTES: usize = 2 << 20;

#[derive(clap::Args)]
pub struct Args {}

/// `rocmguard doctor-probe`: runs the probe in this process and prints its report.
pub fn exec(_args: Args) -> anyhow::Result<u8> {
    println!("{}", serde_json::to_string(&probe())?);
    Ok(0)
}

type HipGetInt = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type HipMemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type HipMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type HipFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type GuardVersion = unsafe extern "C" fn() -> *const c_char;
type GuardActive = unsafe extern "C" fn() -> c_int;

/// Runs the checks in this process.
pub fn probe() -> Report {
    let mut report = Report::default();
    for name in RUNTIME_NAMES {
        let cname = CString::new(*name).expect("no NUL in the names");
        // SAFETY: dlopen with a valid C string; RTLD_GLOBAL so that lookups through
        // RTLD_DEFAULT see the runtime after any preloaded library, as for a linked program.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            report.load_errors.push(last_dl_error(name));
        } else {
            report.runtime = Some(name.to_string());
            break;
        }
    }
    report.runtime_path = mapped_file("libamdhip64");
    report.simulator = symbol::<GuardActive>(SIMULATOR_MARKER).is_some();
    report.guard_active = symbol::<GuardActive>("rocmguard_active").map(|f| {
        // SAFETY: the shim exports `int rocmguard_active(void)`.
        unsafe { f() }
    });
    report.guard_version = symbol::<GuardVersion>("rocmguard_version").and_then(|f| {
        // SAFETY: the shim exports `const char* rocmguard_version(void)`, a static C string.
        let p = unsafe { f() };
        // SAFETY: non-null pointers from it point at a NUL-terminated static string.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    });
    if report.runtime.is_none() {
        return report;
    }
    // SAFETY (all calls below): the signatures are HIP's (hip_runtime_api.h), the pointers
    // passed are to live locals, and the freed pointer is the one hipMalloc returned.
    if let Some(f) = symbol::<HipGetInt>("hipRuntimeGetVersion") {
        let mut v = 0;
        if unsafe { f(&mut v) } == 0 {
            report.runtime_version = Some(v);
        }
    }
    if let Some(f) = symbol::<HipGetInt>("hipGetDeviceCount") {
        let mut n = 0;
        // SAFETY: the runtime's own function, with a live out-pointer.
        let err = unsafe { f(&mut n) };
        report.device_count = Some((err, n));
        if err != 0 || n == 0 {
            return report;
        }
    }
    if let Some(f) = symbol::<HipGetAttribute>("hipDeviceGetAttribute") {
        let mut v = 0;
        // SAFETY: a live out-pointer and device 0, which the count above says exists.
        if unsafe { f(&mut v, ATTRIBUTE_VIRTUAL_MEMORY, 0) } == 0 {
            report.virtual_memory = Some(v);
        }
    }
    if let Some(f) = symbol::<HipMemGetInfo>("hipMemGetInfo") {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: live out-pointers.
        let err = unsafe { f(&mut free, &mut total) };
        report.mem_info = Some((err, free as u64, total as u64));
    }
    if let (Some(malloc), Some(free)) = (
        symbol::<HipMalloc>("hipMalloc"),
        symbol::<HipFree>("hipFree"),
    ) {
        report.malloc_from = symbol_file(malloc as *const c_void);
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live out-pointer.
        let err = unsafe { malloc(&mut p, PROBE_BYTES) };
        report.malloc = Some(err);
        if err == 0 {
            // SAFETY: the pointer hipMalloc just returned, freed once.
            report.free = Some(unsafe { free(p) });
        }
    }
    report
}

/// A function from the process's global scope (preloaded libraries first), as a linked program
/// would call it.
fn symbol<F: Copy>(name: &str) -> Option<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let cname = CString::new(name).ok()?;
    // SAFETY: dlsym with a valid C string on the default scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: F is a function-pointer type of the symbol's C signature (checked by the
        // caller's choice of F) and pointer-sized (asserted above).
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
}

/// The library file that holds `addr`.
fn symbol_file(addr: *const c_void) -> Option<String> {
    // SAFETY: Dl_info is plain data; dladdr fills it for any address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out-pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    Some(
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn last_dl_error(name: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        format!("{}: not loaded", name)
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The first mapped file whose name starts with `prefix`, from `/proc/self/maps`.
fn mapped_file(prefix: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            Path::new(path)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .map(str::to_string)
}

/// hipError_t names for the codes a probe meets.
pub fn error_name(code: i32) -> &'static str {
    match code {
        0 => "hipSuccess",
        1 => "hipErrorInvalidValue",
        2 => "hipErrorOutOfMemory",
        3 => "hipErrorNotInitialized",
        17 => "hipErrorInvalidDevicePointer",
        35 => "hipErrorInsufficientDriver",
        100 => "hipErrorNoDevice",
        101 => "hipErrorInvalidDevice",
        209 => "hipErrorNoBinaryForGpu",
        801 => "hipErrorNotSupported",
        _ => "an error",
    }
}

/// `60241133` -> `6.2.41133`.
pub fn format_hip_version(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_names() {
        assert_eq!(format_hip_version(60241133), "6.2.41133");
        assert_eq!(format_hip_version(70100000), "7.1.0");
        assert_eq!(error_name(100), "hipErrorNoDevice");
    }
}
