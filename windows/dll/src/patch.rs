//! Finding the loaded modules and rewriting their import tables (IAT): where a module imports a
//! hooked function from the HIP runtime or a BLAS library, its slot gets our hook; where it
//! imports the `LoadLibrary` family, `GetProcAddress` or `CreateProcess`, its slot gets ours, so
//! libraries it loads later, lookups it makes by name and processes it starts are caught too.
//!
//! Each module is scanned once, when first seen (at injection, then after every load): its
//! imports are bound by the loader when it is loaded, so nothing changes in them afterwards.
//! Modules of the Windows directory are left alone (they import nothing of HIP, and hooking the
//! loader inside the loader's own DLLs would only make every load pass through us twice), and so
//! is this DLL. The HIP runtime keeps its own system imports, so its lookups of its own exports
//! stay its own, as `hipGetProcAddress` needs.

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rocmguard_guard::platform::modules::{file_name, is_one_of, module_path, modules, path_of};
use rocmguard_guard::platform::win::{self, Module};

/// This DLL's module handle, set at attach.
static SELF: AtomicUsize = AtomicUsize::new(0);

/// Modules scanned so far; a module unloaded and another loaded at its address is scanned again.
static SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

pub fn set_self(module: Module) {
    SELF.store(module as usize, Ordering::Release);
}

/// What a pass over the loaded modules did.
#[derive(Default)]
pub struct Report {
    /// Import slots that now hold a hook.
    pub patched: usize,
    /// Modules whose imports could not be rewritten, with why.
    pub failures: Vec<String>,
}

/// This DLL's own path, to load it into the processes the program starts.
pub fn self_path() -> std::ffi::OsString {
    module_path(SELF.load(Ordering::Acquire) as Module)
}

/// A module kept loaded while we read and rewrite it (another thread may free it meanwhile).
struct Held {
    module: Module,
    path: String,
}

impl Held {
    fn new(module: Module) -> Option<Held> {
        let mut held = std::ptr::null_mut();
        // SAFETY: with FROM_ADDRESS the name is an address; the module gains a reference,
        // dropped in `drop`.
        let ok = unsafe {
            win::GetModuleHandleExW(
                win::GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS,
                module as *const u16,
                &mut held,
            )
        };
        (ok != 0 && held == module).then(|| Held {
            module,
            path: path_of(module),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `new`.
        unsafe { win::FreeLibrary(self.module) };
    }
}

/// Scans the modules loaded since the last pass and rewrites their import tables.
///
/// The loader lock is never taken while our lock is held: listing modules and their paths
/// happens before, so a thread that loads a library from a `DllMain` (holding the loader lock)
/// and comes here cannot deadlock with one that is rewriting tables.
pub fn patch_new_modules() -> Report {
    let own = SELF.load(Ordering::Acquire);
    let now: Vec<usize> = modules().into_iter().map(|m| m as usize).collect();
    let known = SEEN.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let windows_dir = windows_dir();
    let fresh: Vec<Held> = now
        .iter()
        .filter(|&&m| m != own && !known.contains(&m))
        .filter_map(|&m| Held::new(m as Module))
        .filter(|h| windows_dir.is_empty() || !h.path.starts_with(&windows_dir))
        .collect();
    let mut report = Report::default();
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    for held in &fresh {
        if seen.contains(&(held.module as usize)) {
            continue; // another thread scanned it meanwhile
        }
        let is_runtime = is_one_of(file_name(&held.path), rocmguard_guard::HIP_LIBS);
        // SAFETY: a loaded module, mapped as an image by the loader, kept loaded by `held`.
        match unsafe { patch_module(held.module as usize, !is_runtime) } {
            Ok(n) => report.patched += n,
            Err(why) => report.failures.push(format!("{}: {}", held.path, why)),
        }
    }
    *seen = now;
    drop(seen);
    report
}

/// `C:\windows\`, lower-cased; empty if unknown.
fn windows_dir() -> String {
    let mut buf = vec![0u16; 512];
    // SAFETY: a buffer of the size given.
    let n = unsafe { win::GetWindowsDirectoryW(buf.as_mut_ptr(), buf.len() as u32) } as usize;
    if n == 0 || n >= buf.len() {
        return String::new();
    }
    let mut dir = String::from_utf16_lossy(&buf[..n]).to_lowercase();
    if !dir.ends_with('\\') {
        dir.push('\\');
    }
    dir
}

/// Reads a little-endian value at `base + offset`.
///
/// # Safety
/// The range must lie inside the mapped image.
unsafe fn read<T: Copy>(base: usize, offset: usize) -> T {
    ((base + offset) as *const T).read_unaligned()
}

/// Rewrites the import slots of the module at `base` that a hook stands for. `loader_hooks`:
/// also the `LoadLibrary` family, `GetProcAddress` and `CreateProcess`. Returns how many slots
/// now hold a hook.
///
/// # Safety
/// `base` is the address of a loaded PE image (a module handle).
unsafe fn patch_module(base: usize, loader_hooks: bool) -> Result<usize, String> {
    const IMAGE_DOS_SIGNATURE: u16 = 0x5a4d;
    const IMAGE_NT_SIGNATURE: u32 = 0x4550;
    const PE32_PLUS: u16 = 0x20b;
    if read::<u16>(base, 0) != IMAGE_DOS_SIGNATURE {
        return Err("not a PE image".to_string());
    }
    let nt = read::<u32>(base, 0x3c) as usize;
    if read::<u32>(base, nt) != IMAGE_NT_SIGNATURE {
        return Err("no NT headers".to_string());
    }
    let optional = nt + 24;
    if read::<u16>(base, optional) != PE32_PLUS {
        return Err("not a 64-bit image".to_string());
    }
    // Data directory 1 (imports) of the PE32+ optional header.
    let directories = optional + 112;
    let imports_rva = read::<u32>(base, directories + 8) as usize;
    if imports_rva == 0 {
        return Ok(0);
    }
    let mut patched = 0;
    let mut descriptor = base + imports_rva;
    loop {
        // IMAGE_IMPORT_DESCRIPTOR: OriginalFirstThunk, TimeDateStamp, ForwarderChain, Name,
        // FirstThunk.
        let names_rva = read::<u32>(descriptor, 0) as usize;
        let dll_rva = read::<u32>(descriptor, 12) as usize;
        let slots_rva = read::<u32>(descriptor, 16) as usize;
        if dll_rva == 0 && slots_rva == 0 {
            break;
        }
        descriptor += 20;
        // Without the name table (bound-only imports) the names are gone; skip.
        if dll_rva == 0 || names_rva == 0 {
            continue;
        }
        let dll = CStr::from_ptr((base + dll_rva) as *const c_char)
            .to_string_lossy()
            .to_ascii_lowercase();
        let kind = match crate::loader::import_kind(&dll) {
            Some(crate::loader::Import::System) if !loader_hooks => continue,
            Some(kind) => kind,
            None => continue,
        };
        let mut i = 0;
        loop {
            let entry = read::<u64>(base + names_rva, i * 8);
            if entry == 0 {
                break;
            }
            let slot = (base + slots_rva + i * 8) as *mut usize;
            i += 1;
            if entry & (1 << 63) != 0 {
                continue; // by ordinal
            }
            // IMAGE_IMPORT_BY_NAME: a 2-byte hint, then the name.
            let name = CStr::from_ptr((base + entry as usize + 2) as *const c_char).to_bytes();
            let current = (*(slot as *const AtomicUsize)).load(Ordering::Acquire);
            let hook = match crate::loader::hook_for_import(kind, name, current) {
                Some(h) => h,
                None => continue,
            };
            if current == hook {
                continue;
            }
            write_slot(slot, hook)?;
            patched += 1;
        }
    }
    Ok(patched)
}

/// Stores `value` in an import slot, making its page writable for the moment.
///
/// # Safety
/// `slot` is an import slot of a loaded image.
unsafe fn write_slot(slot: *mut usize, value: usize) -> Result<(), String> {
    let mut info: win::MemoryBasicInformation = std::mem::zeroed();
    let len = std::mem::size_of::<win::MemoryBasicInformation>();
    if win::VirtualQuery(slot as *const c_void, &mut info, len) != len {
        return Err(format!(
            "VirtualQuery failed (error {})",
            win::GetLastError()
        ));
    }
    // Keep the page executable if it was: other threads may be running code on it.
    let writable = if info.protect & win::PAGE_ANY_EXECUTE != 0 {
        win::PAGE_EXECUTE_READWRITE
    } else {
        win::PAGE_READWRITE
    };
    let size = std::mem::size_of::<usize>();
    let mut old = 0u32;
    if win::VirtualProtect(slot as *mut c_void, size, writable, &mut old) == 0 {
        return Err(format!(
            "the import table is read-only (VirtualProtect error {})",
            win::GetLastError()
        ));
    }
    (*(slot as *const AtomicUsize)).store(value, Ordering::Release);
    win::VirtualProtect(slot as *mut c_void, size, old, &mut old);
    Ok(())
}
