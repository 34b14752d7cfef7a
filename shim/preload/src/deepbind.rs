//! Libraries loaded with `dlopen(..., RTLD_DEEPBIND)` (issue 14).
//!
//! Why this exists: a library opened with `RTLD_DEEPBIND` looks its symbols up in its own
//! dependencies first, so its `hipMalloc` binds to the runtime (libamdhip64, one of its
//! dependencies) before our preloaded export, and what it allocates is neither pooled nor
//! counted against the cap. Symbol lookup cannot be changed from a preloaded library, so after
//! such a `dlopen` succeeds we rewrite the new objects' GOT entries for hooked names to our
//! hooks, synchronously, before `dlopen` returns to the program.
//!
//! Why it is careful: glibc's `dlopen` reads its return address to find the caller's link map,
//! whose `DT_RUNPATH`/`DT_RPATH` (with `$ORIGIN`) and namespace decide what a bare name opens.
//! A wrapper written in Rust would make *us* the caller. So the `dlopen` export is a few
//! instructions of assembly that jump straight to glibc's `dlopen`, return address intact,
//! whenever the flags lack `RTLD_DEEPBIND`: every ordinary `dlopen` (Python's `RTLD_LOCAL`
//! extensions included) is exactly what it was. Only a `RTLD_DEEPBIND` call reaches Rust
//! ([`open_deep`]), with the caller's return address; it redoes the part of the search that
//! depends on the caller (its `DT_RPATH` or `DT_RUNPATH`, `$ORIGIN`) and passes glibc a full
//! path where that search finds the file.
//!
//! The export is a naked function (`naked_asm!`) rather than `global_asm!`: rustc's version
//! script for a cdylib exports only Rust items, so a symbol defined in `global_asm!` stays
//! local (rust-lang/rust#128071) and would never interpose glibc's `dlopen`.
//!
//! Never patched: our own library and the runtime libraries themselves (their internal calls
//! stay theirs). Anything unexpected leaves that object unpatched with one warning; the
//! `dlopen` the program asked for never fails because of us.
//!
//! Not covered: `dlmopen` namespaces (we are not in them), calls a DEEPBIND library makes from
//! its own constructors (they run inside glibc's `dlopen`, before we can patch), and anything
//! but x86_64 Linux (this file compiles to nothing there; `dlopen` is then glibc's alone).

#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

/// glibc's `dlopen`; read by the assembly below, so a plain `usize` in memory.
static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// File-name prefixes of the runtime libraries (as in `resolve`'s lists: `hip::LIBS`,
/// `cuda::LIBS`, `cuda_driver`'s and `blas`'s, and below HIP the HSA runtime and the code
/// object manager), whose own references are never patched.
const RUNTIME_PREFIXES: &[&str] = &[
    "libamdhip64",
    "libhsa-runtime64",
    "libamd_comgr",
    "libcudart",
    "libcuda.so",
    "librocblas",
    "libhipblas",
    "libhipblaslt",
    "libMIOpen",
];

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_RELAENT: i64 = 9;
const DT_STRSZ: i64 = 10;
const DT_SYMENT: i64 = 11;
const DT_RPATH: i64 = 15;
const DT_REL: i64 = 17;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const DT_RUNPATH: i64 = 29;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;
const STT_NOTYPE: u8 = 0;
const STT_FUNC: u8 = 2;
const RTLD_DL_LINKMAP: c_int = 2;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// The public head of glibc's `struct link_map` (`<link.h>`).
#[repr(C)]
struct LinkMap {
    addr: usize,
    name: *const c_char,
    ld: *const Dyn,
    next: *const LinkMap,
    prev: *const LinkMap,
}

extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}

/// `dlopen`: glibc's own, untouched (a jump, return address intact) unless `RTLD_DEEPBIND` is
/// in the flags; then [`open_deep`] with the caller's return address as a third argument.
///
/// # Safety
/// As `dlopen(3)`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    // SAFETY: System V x86_64 ABI. rdi = file, esi = flags; at entry [rsp] is the caller's
    // return address and rsp is 8 past a 16-byte boundary. Every path either jumps to a
    // function of the same signature with the arguments and stack exactly as the caller left
    // them (glibc's dlopen; open_deep, whose third argument rdx is filled from [rsp]), or
    // calls a resolver with both argument registers saved and the stack 16-byte aligned, and
    // restores them before jumping, or returns null.
    core::arch::naked_asm!(
        "test esi, {deepbind}",
        "jnz 4f",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        // Not resolved yet: keep the arguments, align the stack for the call, resolve.
        "2:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        // No dlopen in the process at all (cannot happen with glibc): fail the call.
        "3:",
        "xor eax, eax",
        "ret",
        // RTLD_DEEPBIND: open_deep(file, flags, return address), as a tail call.
        "4:",
        "mov rdx, qword ptr [rsp]",
        "jmp {deep}",
        deepbind = const libc::RTLD_DEEPBIND,
        real = sym REAL_DLOPEN,
        resolve = sym resolve_real_dlopen,
        deep = sym open_deep,
    )
}

/// What a RTLD_DEEPBIND library's `dlsym` references are pointed at. With a real handle the
/// answer does not depend on the caller: our `dlsym` hook (hooked names answer the hooks). The
/// pseudo-handles do: `RTLD_DEFAULT` searches the caller's scope (the library's own
/// dependencies first) and `RTLD_NEXT` what follows the caller, so they go to glibc's `dlsym`
/// with the return address intact, except that a hooked name under `RTLD_DEFAULT` answers the
/// hook, as it does in an ordinary program, where our export is found first.
///
/// # Safety
/// As `dlsym(3)`.
#[unsafe(naked)]
unsafe extern "C" fn deep_dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: System V x86_64 ABI. rdi = handle, rsi = symbol; rsp is 8 past a 16-byte
    // boundary at entry. Jumps go to functions of dlsym's signature with the caller's
    // arguments and stack untouched; the two calls save rdi and rsi and keep the stack
    // 16-byte aligned; the early `ret` returns our hook's address in rax.
    core::arch::naked_asm!(
        "test rdi, rdi",
        "jz 2f",
        "cmp rdi, -1",
        "je 3f",
        "jmp {hooked_dlsym}",
        // RTLD_DEFAULT: the hook for a hooked name, else glibc's answer.
        "2:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdi, rsi",
        "call {hook_by_name}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "ret",
        // glibc's dlsym, called as if by the library itself.
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {real_dlsym}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        hooked_dlsym = sym crate::dl::dlsym,
        hook_by_name = sym hook_by_name,
        real_dlsym = sym real_dlsym_address,
    )
}

/// Our hook for the symbol `name` names, or 0 (not hooked, degraded, or a panic).
extern "C" fn hook_by_name(name: *const c_char) -> usize {
    if name.is_null() || crate::degraded() {
        return 0;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: dlsym's argument, a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        crate::dl::hook_for(name, 0).unwrap_or(0)
    })
    .unwrap_or(0)
}

/// glibc's `dlsym`, or 0.
extern "C" fn real_dlsym_address() -> usize {
    std::panic::catch_unwind(|| crate::resolve::real_dlsym() as usize).unwrap_or(0)
}

/// Finds glibc's `dlopen` (`GLIBC_2.34` in libc, else `GLIBC_2.2.5` in libdl); 0 if neither.
extern "C" fn resolve_real_dlopen() -> usize {
    let mut f = REAL_DLOPEN.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym (not hooked) with NUL-terminated names; RTLD_NEXT skips this library.
        f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlopen".as_ptr(), version.as_ptr()) } as usize;
        if f != 0 {
            REAL_DLOPEN.store(f, Ordering::Release);
            break;
        }
    }
    f
}

fn real_dlopen() -> Option<DlopenFn> {
    let f = resolve_real_dlopen();
    // SAFETY: f is glibc's dlopen, whose type this is.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, DlopenFn>(f) })
}

/// A `RTLD_DEEPBIND` `dlopen` from code returning to `caller`: the caller's search, glibc's
/// `dlopen`, then the GOT of every object it loaded.
///
/// Safety: as `dlopen(3)`; `caller` is the return address of the `dlopen` call.
unsafe extern "C" fn open_deep(
    file: *const c_char,
    flags: c_int,
    caller: *const c_void,
) -> *mut c_void {
    let Some(real) = real_dlopen() else {
        return std::ptr::null_mut();
    };
    let (path, probed) = crate::boundary(
        "dlopen",
        // SAFETY: file is the caller's NUL-terminated name or null; caller is a code address.
        || unsafe { callers_search(file, caller, real) },
        || (None, false),
    );
    let before = crate::boundary("dlopen", loaded_now, HashSet::new);
    let name = path.as_ref().map_or(file, |p| p.as_ptr());
    // SAFETY: the program's own call, with the caller's name or the full path its search found.
    let handle = unsafe { real(name, flags) };
    if !handle.is_null() {
        if probed {
            // Our probe for an object already loaded may have left an error message; the
            // program's call succeeded, so none of it is the program's.
            // SAFETY: plain dlerror.
            unsafe { libc::dlerror() };
        }
        crate::boundary("dlopen", || patch_new_objects(&before), || ());
    }
    handle
}

/// The full path glibc would find for `file` from the caller's link map where that depends on
/// the caller (its `DT_RPATH`, or `DT_RUNPATH` after `LD_LIBRARY_PATH`; `$ORIGIN` in a path),
/// else `None` (pass the name unchanged). Also says whether a probe `dlopen` was made.
///
/// Safety: `file` is null or NUL-terminated; `real` is glibc's `dlopen`.
unsafe fn callers_search(
    file: *const c_char,
    caller: *const c_void,
    real: DlopenFn,
) -> (Option<CString>, bool) {
    if file.is_null() {
        return (None, false);
    }
    // SAFETY: dlopen's argument is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(file) }.to_bytes();
    // SAFETY: caller is a code address; the map stays valid while its object is loaded, and
    // the object that called us is.
    let Some(map) = (unsafe { caller_map(caller) }) else {
        return (None, false);
    };
    // SAFETY: a live link map.
    let origin = unsafe { origin_of(map) };
    if name.contains(&b'/') {
        // glibc expands $ORIGIN in a path with the caller's directory.
        let expanded = expand_origin(name, origin.as_deref());
        return match expanded {
            Some(p) if p != name => (CString::new(p).ok(), false),
            _ => (None, false),
        };
    }
    // Already loaded under that name (or soname): glibc returns it whatever the paths say.
    // SAFETY: glibc's dlopen with the caller's name; the handle is closed at once.
    let probe = unsafe { real(file, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if !probe.is_null() {
        // SAFETY: the handle just returned.
        unsafe { libc::dlclose(probe) };
        return (None, true);
    }
    // SAFETY: a live link map.
    let (rpath, runpath) = unsafe { search_paths(map) };
    let found = if let Some(runpath) = runpath {
        // DT_RUNPATH comes after LD_LIBRARY_PATH, which glibc searches itself for any caller.
        if in_library_path(name) {
            None
        } else {
            find_in(&runpath, name, origin.as_deref())
        }
    } else if let Some(rpath) = rpath {
        find_in(&rpath, name, origin.as_deref())
    } else {
        None
    };
    (
        found.and_then(|p| CString::new(p.as_os_str().as_bytes()).ok()),
        true,
    )
}

/// The link map of the object holding `caller`, else the main program's (as glibc does).
///
/// Safety: none beyond the loader's own (any address may be asked about).
unsafe fn caller_map(caller: *const c_void) -> Option<*const LinkMap> {
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; dladdr1 only reads the loader's tables.
    if unsafe { dladdr1(caller, &mut info, &mut map, RTLD_DL_LINKMAP) } != 0 && !map.is_null() {
        return Some(map as *const LinkMap);
    }
    // Code in no object (JIT): the main program, the first map of the base namespace.
    // SAFETY: dladdr1 on the address of a function of ours, then walking `prev` links of the
    // loader's live list to its head.
    unsafe {
        let ours = resolve_real_dlopen as *const c_void;
        if dladdr1(ours, &mut info, &mut map, RTLD_DL_LINKMAP) == 0 || map.is_null() {
            return None;
        }
        let mut m = map as *const LinkMap;
        while !(*m).prev.is_null() {
            m = (*m).prev;
        }
        Some(m)
    }
}

/// The directory of the object of `map` (`/proc/self/exe`'s for the main program).
///
/// Safety: `map` is a link map of a loaded object.
unsafe fn origin_of(map: *const LinkMap) -> Option<PathBuf> {
    // SAFETY: l_name of a live map is a NUL-terminated string (empty for the main program).
    let name = unsafe { (*map).name };
    let name = if name.is_null() {
        &b""[..]
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    if name.is_empty() {
        return std::fs::read_link("/proc/self/exe")
            .ok()?
            .parent()
            .map(Path::to_path_buf);
    }
    if !name.contains(&b'/') {
        return None;
    }
    Path::new(std::ffi::OsStr::from_bytes(name))
        .parent()
        .map(Path::to_path_buf)
}

/// `name` with `$ORIGIN` and `${ORIGIN}` replaced by `origin`; `None` if it has another
/// dynamic string token, or `$ORIGIN` with no origin known.
fn expand_origin(name: &[u8], origin: Option<&Path>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.iter().position(|&b| b == b'$') {
        out.extend_from_slice(&rest[..i]);
        let tail = &rest[i..];
        let token = if tail.starts_with(b"${ORIGIN}") {
            9
        } else if tail.starts_with(b"$ORIGIN")
            && !tail
                .get(7)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            7
        } else {
            return None;
        };
        out.extend_from_slice(origin?.as_os_str().as_bytes());
        rest = &tail[token..];
    }
    out.extend_from_slice(rest);
    Some(out)
}

/// The caller's `DT_RPATH` and `DT_RUNPATH` strings.
///
/// Safety: `map` is a link map of a loaded object.
unsafe fn search_paths(map: *const LinkMap) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    // SAFETY: l_ld of a live map is its dynamic section, ended by DT_NULL.
    let (base, mut d) = unsafe { ((*map).addr, (*map).ld) };
    let (mut strtab, mut strsz, mut rpath, mut runpath) = (0usize, 0usize, None, None);
    if d.is_null() {
        return (None, None);
    }
    // SAFETY: reading entries up to DT_NULL.
    unsafe {
        while (*d).tag != DT_NULL {
            let v = (*d).val;
            match (*d).tag {
                DT_STRTAB => strtab = relocated(v, base),
                DT_STRSZ => strsz = v as usize,
                DT_RPATH => rpath = Some(v as usize),
                DT_RUNPATH => runpath = Some(v as usize),
                _ => {}
            }
            d = d.add(1);
        }
    }
    let read = |off: Option<usize>| -> Option<Vec<u8>> {
        let off = off?;
        if strtab == 0 || off >= strsz {
            return None;
        }
        // SAFETY: an offset inside the string table, which holds NUL-terminated strings.
        let s = unsafe { CStr::from_ptr((strtab + off) as *const c_char) };
        Some(s.to_bytes().to_vec())
    };
    (read(rpath), read(runpath))
}

/// An address from the dynamic section: glibc relocates most in place on x86_64, but not in a
/// read-only dynamic section (the vDSO); an address below the load base is still an offset.
fn relocated(v: u64, base: usize) -> usize {
    let v = v as usize;
    if v < base {
        v.wrapping_add(base)
    } else {
        v
    }
}

/// Whether `name` is in a directory of `LD_LIBRARY_PATH` (ignored, as glibc does, in a
/// set-uid program).
fn in_library_path(name: &[u8]) -> bool {
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return false;
    }
    let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") else {
        return false;
    };
    paths
        .as_bytes()
        .split(|&b| b == b':' || b == b';')
        .filter(|d| !d.is_empty())
        .any(|d| loadable(&Path::new(std::ffi::OsStr::from_bytes(d)).join(os(name))))
}

fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(b)
}

/// The first `dir/name` of a `:`-separated search list that is a loadable x86_64 ELF file.
fn find_in(list: &[u8], name: &[u8], origin: Option<&Path>) -> Option<PathBuf> {
    list.split(|&b| b == b':').find_map(|dir| {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let dir = expand_origin(dir, origin)?;
        let path = Path::new(os(&dir)).join(os(name));
        loadable(&path).then_some(path)
    })
}

/// A readable 64-bit little-endian x86_64 ELF file.
fn loadable(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head[..4] == *b"\x7fELF"
        && head[4] == 2
        && head[5] == 1
        && u16::from_le_bytes([head[18], head[19]]) == 62
}

/// Loaded objects, by load base and program headers.
fn loaded_now() -> HashSet<(usize, usize)> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: data is the set passed below; info is the entry glibc gives.
        unsafe {
            let set = &mut *(data as *mut HashSet<(usize, usize)>);
            set.insert(((*info).dlpi_addr as usize, (*info).dlpi_phdr as usize));
        }
        0
    }
    let mut set = HashSet::new();
    // SAFETY: the callback only reads its entry and writes the set, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut set as *mut _ as *mut c_void) };
    set
}

/// One object's planned GOT writes, or why it is left alone.
struct Visit<'a> {
    before: &'a HashSet<(usize, usize)>,
    maps: &'a [Mapping],
    /// Object, slots written, whether any was a runtime function's (not `dlsym`/`dlopen`).
    patched: Vec<(String, usize, bool)>,
    failed: Vec<(String, String)>,
}

/// A line of `/proc/self/maps`: its range and protection.
struct Mapping {
    start: usize,
    end: usize,
    prot: c_int,
}

fn read_maps() -> Option<Vec<Mapping>> {
    let text = std::fs::read_to_string("/proc/self/maps").ok()?;
    text.lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let (start, end) = words.next()?.split_once('-')?;
            let perms = words.next()?.as_bytes();
            let mut prot = 0;
            for (i, bit) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
                .into_iter()
                .enumerate()
            {
                if perms.get(i).is_some_and(|&c| c != b'-') {
                    prot |= bit;
                }
            }
            Some(Mapping {
                start: usize::from_str_radix(start, 16).ok()?,
                end: usize::from_str_radix(end, 16).ok()?,
                prot,
            })
        })
        .collect()
}

/// Points the GOT entries of hooked names in every object loaded since `before` at our hooks.
/// Runs inside `dl_iterate_phdr`, which holds the loader's lock: no object it visits can be
/// unmapped meanwhile.
fn patch_new_objects(before: &HashSet<(usize, usize)>) {
    if loaded_now().is_subset(before) {
        return;
    }
    let Some(maps) = read_maps() else {
        log_with_config(|| {
            crate::log::warn(format_args!(
                "RTLD_DEEPBIND: /proc/self/maps unreadable; the library is not guarded"
            ))
        });
        return;
    };
    let mut visit = Visit {
        before,
        maps: &maps,
        patched: Vec::new(),
        failed: Vec::new(),
    };
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: data is the Visit passed below; info is the entry glibc gives. A panic is
        // caught here: it must not unwind through glibc.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            visit_object(&*info, &mut *(data as *mut Visit))
        }));
        0
    }
    // SAFETY: the callback only reads loader entries and writes GOT slots it checked.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut visit as *mut Visit as *mut c_void) };
    // Only objects that reach the runtime set the configuration (and its log) up: a plugin
    // whose one patched reference is `dlsym` starts nothing.
    if visit.failed.is_empty() && visit.patched.iter().all(|(_, _, guarded)| !guarded) {
        return;
    }
    log_with_config(|| {
        for (object, why) in &visit.failed {
            crate::log::warn(format_args!("RTLD_DEEPBIND library {}: {}", object, why));
        }
        for (object, n, _) in &visit.patched {
            crate::log::info(format_args!(
                "RTLD_DEEPBIND: {} references of {} routed to the hooks",
                n, object
            ));
        }
    });
}

/// Logs once the configuration (which sets the log up) is read, outside the loader's lock:
/// reading it may start a thread. As for any hook, `ROCMGUARD_DISABLE` leaves the patches in
/// place; the hooks then pass every call through.
fn log_with_config(log: impl FnOnce()) {
    if crate::config().is_some() {
        log();
    }
}

/// Patches one object if it is new and neither ours nor a runtime library.
///
/// Safety: `info` is an entry `dl_iterate_phdr` is visiting (its object stays loaded).
unsafe fn visit_object(info: &libc::dl_phdr_info, visit: &mut Visit) {
    let key = (info.dlpi_addr as usize, info.dlpi_phdr as usize);
    if visit.before.contains(&key) || info.dlpi_phdr.is_null() {
        return;
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let file = name.rsplit('/').next().unwrap_or("");
    if RUNTIME_PREFIXES.iter().any(|p| file.starts_with(p)) {
        return;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr as usize;
    let (lo, hi) =
        phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .fold((usize::MAX, 0), |(lo, hi), p| {
                let start = base.wrapping_add(p.p_vaddr as usize);
                (
                    lo.min(start),
                    hi.max(start.wrapping_add(p.p_memsz as usize)),
                )
            });
    let ours = resolve_real_dlopen as *const () as usize;
    if lo >= hi || (lo..hi).contains(&ours) {
        return;
    }
    let object = Object { base, lo, hi };
    // SAFETY: the object is loaded (we are inside dl_iterate_phdr) and its tables are checked
    // to lie inside its mapped range before they are read.
    let plan = match unsafe { object.plan(phdrs) } {
        Ok(plan) => plan,
        Err(why) => {
            let why = format!(
                "left unpatched ({}): its runtime calls are not guarded",
                why
            );
            visit.failed.push((name, why));
            return;
        }
    };
    let guarded = plan.iter().any(|w| w.guarded);
    let (written, problem) = object.apply(&plan, visit.maps);
    if written > 0 {
        visit.patched.push((name.clone(), written, guarded));
    }
    if let Some(problem) = problem {
        visit.failed.push((name, problem));
    }
}

/// A loaded object: its load base and the span of its `PT_LOAD` segments.
struct Object {
    base: usize,
    lo: usize,
    hi: usize,
}

impl Object {
    fn inside(&self, addr: usize, len: usize) -> bool {
        addr >= self.lo && addr.checked_add(len).is_some_and(|end| end <= self.hi)
    }

    /// The GOT writes for this object.
    ///
    /// Safety: the object is loaded and `phdrs` are its program headers.
    unsafe fn plan(&self, phdrs: &[libc::Elf64_Phdr]) -> Result<Vec<Write>, String> {
        let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return Ok(Vec::new());
        };
        let mut d = self.base.wrapping_add(dynamic.p_vaddr as usize);
        let count = dynamic.p_memsz as usize / std::mem::size_of::<Dyn>();
        if !self.inside(d, count * std::mem::size_of::<Dyn>()) {
            return Err("dynamic section outside the object".into());
        }
        let mut t = Tables::default();
        for _ in 0..count {
            // SAFETY: inside the dynamic section, checked above.
            let e = unsafe { &*(d as *const Dyn) };
            match e.tag {
                DT_NULL => break,
                DT_JMPREL => t.jmprel = relocated(e.val, self.base),
                DT_PLTRELSZ => t.pltrelsz = e.val as usize,
                DT_PLTREL => t.pltrel = e.val as i64,
                DT_RELA => t.rela = relocated(e.val, self.base),
                DT_RELASZ => t.relasz = e.val as usize,
                DT_RELAENT => t.relaent = e.val as usize,
                DT_REL => t.has_rel = true,
                DT_SYMTAB => t.symtab = relocated(e.val, self.base),
                DT_SYMENT => t.syment = e.val as usize,
                DT_STRTAB => t.strtab = relocated(e.val, self.base),
                DT_STRSZ => t.strsz = e.val as usize,
                _ => {}
            }
            d += std::mem::size_of::<Dyn>();
        }
        if t.has_rel || (t.pltrelsz != 0 && t.pltrel != DT_RELA) {
            return Err("REL relocations on x86_64".into());
        }
        if t.relaent != 0 && t.relaent != std::mem::size_of::<Rela>() {
            return Err("unexpected relocation entry size".into());
        }
        if t.syment != 0 && t.syment != std::mem::size_of::<Sym>() {
            return Err("unexpected symbol entry size".into());
        }
        if t.symtab == 0 || t.strtab == 0 || !self.inside(t.strtab, t.strsz) {
            return Ok(Vec::new());
        }
        let mut plan = Vec::new();
        for (table, size) in [(t.jmprel, t.pltrelsz), (t.rela, t.relasz)] {
            if table == 0 || size == 0 {
                continue;
            }
            if !self.inside(table, size) {
                return Err("relocations outside the object".into());
            }
            let n = size / std::mem::size_of::<Rela>();
            // SAFETY: the table lies inside the object, checked above; Rela is plain data.
            let relas = unsafe { std::slice::from_raw_parts(table as *const Rela, n) };
            for r in relas {
                // SAFETY: the symbol and string tables are checked before they are read.
                if let Some(w) = unsafe { self.write_for(r, &t) }? {
                    plan.push(w);
                }
            }
        }
        Ok(plan)
    }

    /// Our address for the slot of relocation `r`, if it names a hooked function the object
    /// does not define itself and the slot already holds a resolved address.
    ///
    /// Safety: `t.symtab`, `t.strtab` and `t.strsz` come from this loaded object's dynamic
    /// section, and the string table was checked to lie inside it.
    unsafe fn write_for(&self, r: &Rela, t: &Tables) -> Result<Option<Write>, String> {
        let kind = r.info & 0xffff_ffff;
        let index = (r.info >> 32) as usize;
        if (kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT) || index == 0 {
            return Ok(None);
        }
        let sym_at = index
            .checked_mul(std::mem::size_of::<Sym>())
            .and_then(|o| t.symtab.checked_add(o))
            .filter(|&a| self.inside(a, std::mem::size_of::<Sym>()))
            .ok_or("symbol index outside the object")?;
        // SAFETY: inside the object, checked above; Sym is plain data.
        let sym = unsafe { &*(sym_at as *const Sym) };
        let sym_type = sym.info & 0xf;
        if sym.shndx != 0 || (sym_type != STT_FUNC && sym_type != STT_NOTYPE) {
            return Ok(None);
        }
        let name_at = sym.name as usize;
        if name_at >= t.strsz {
            return Err("symbol name outside the string table".into());
        }
        // SAFETY: strtab..strtab+strsz is inside the object (checked in plan).
        let strings = unsafe { std::slice::from_raw_parts(t.strtab as *const u8, t.strsz) };
        let Some(len) = strings[name_at..].iter().position(|&b| b == 0) else {
            return Err("unterminated symbol name".into());
        };
        let name = &strings[name_at..name_at + len];
        let slot = self.base.wrapping_add(r.offset as usize);
        if !slot.is_multiple_of(8) || !self.inside(slot, 8) {
            return Err("GOT slot outside the object".into());
        }
        // SAFETY: an aligned slot inside the object's mapped range, written by the loader.
        let current = unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.load(Ordering::Acquire);
        if current == 0 {
            // An unresolved weak reference: the library tests it for null; leave it so.
            return Ok(None);
        }
        let guarded = !matches!(name, b"dlsym" | b"dlopen");
        let hook = match name {
            b"dlsym" => deep_dlsym as *const () as usize,
            b"dlopen" => dlopen as *const () as usize,
            _ if crate::degraded() => return Ok(None),
            _ => {
                // A lazy slot still points into the object's own PLT: not the real function.
                let real = if self.inside(current, 1) { 0 } else { current };
                match crate::dl::hook_for(name, real) {
                    Some(h) => h,
                    None => return Ok(None),
                }
            }
        };
        Ok((hook != current).then_some(Write {
            slot,
            hook,
            guarded,
        }))
    }

    /// Writes the planned slots, a page at a time, each page made writable for the writes
    /// and given its protection back after. Returns how many slots were written, and what
    /// went wrong, if anything (a slot is either written or left as the loader bound it).
    fn apply(&self, plan: &[Write], maps: &[Mapping]) -> (usize, Option<String>) {
        match self.write_pages(plan, maps) {
            Ok((n, None)) => (n, None),
            Ok((n, Some(e))) => (
                n,
                Some(format!("patched, but a GOT page stayed writable ({})", e)),
            ),
            Err((0, why)) => (
                0,
                Some(format!(
                    "left unpatched ({}): its runtime calls are not guarded",
                    why
                )),
            ),
            Err((n, why)) => (
                n,
                Some(format!(
                    "partly patched ({} after {} of {} references): the rest are not guarded",
                    why,
                    n,
                    plan.len()
                )),
            ),
        }
    }

    /// [`Object::apply`]'s writes: `Ok((written, a page left writable))` or
    /// `Err((written, why it stopped))`.
    fn write_pages(
        &self,
        plan: &[Write],
        maps: &[Mapping],
    ) -> Result<(usize, Option<std::io::Error>), (usize, String)> {
        if plan.is_empty() {
            return Ok((0, None));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        if !page.is_power_of_two() {
            return Err((0, "no page size".into()));
        }
        let mut pages: Vec<usize> = plan.iter().map(|w| w.slot & !(page - 1)).collect();
        pages.sort_unstable();
        pages.dedup();
        // Every page's protection first: nothing is written unless all are known.
        let mut prots = Vec::with_capacity(pages.len());
        for &p in &pages {
            let prot = maps
                .iter()
                .find(|m| m.start <= p && p < m.end)
                .map(|m| m.prot)
                .ok_or((0, "GOT page not in /proc/self/maps".to_string()))?;
            if prot & libc::PROT_READ == 0 {
                return Err((0, "GOT page not readable".into()));
            }
            prots.push(prot);
        }
        let mut written = 0;
        let mut left_writable = None;
        for (&p, &prot) in pages.iter().zip(&prots) {
            let writable = prot & libc::PROT_WRITE != 0;
            // SAFETY: a page of the object's own mapping, given write access on top of what
            // it has; restored below.
            if !writable
                && unsafe { libc::mprotect(p as *mut c_void, page, prot | libc::PROT_WRITE) } != 0
            {
                let e = std::io::Error::last_os_error();
                return Err((written, format!("mprotect refused: {}", e)));
            }
            for &Write { slot, hook, .. } in plan.iter().filter(|w| w.slot & !(page - 1) == p) {
                // SAFETY: an aligned GOT slot of the object, now writable; other threads may
                // read it at any time, so one atomic store.
                unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.store(hook, Ordering::Release);
                written += 1;
            }
            // SAFETY: the same page, given back the protection it had.
            if !writable && unsafe { libc::mprotect(p as *mut c_void, page, prot) } != 0 {
                left_writable = Some(std::io::Error::last_os_error());
            }
        }
        Ok((written, left_writable))
    }
}

/// One planned GOT write: the slot, our address for it, and whether it is a runtime
/// function's (rather than `dlsym`'s or `dlopen`'s).
struct Write {
    slot: usize,
    hook: usize,
    guarded: bool,
}

/// What `plan` reads from a dynamic section.
#[derive(Default)]
struct Tables {
    jmprel: usize,
    pltrelsz: usize,
    pltrel: i64,
    rela: usize,
    relasz: usize,
    relaent: usize,
    has_rel: bool,
    symtab: usize,
    syment: usize,
    strtab: usize,
    strsz: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_expanded_in_both_spellings() {
        let o = Some(Path::new("/opt/app"));
        assert_eq!(
            expand_origin(b"$ORIGIN/sub:${ORIGIN}/x", o).unwrap(),
            b"/opt/app/sub:/opt/app/x"
        );
        assert_eq!(expand_origin(b"/usr/lib", None).unwrap(), b"/usr/lib");
        assert!(expand_origin(b"$ORIGIN/sub", None).is_none());
        assert!(expand_origin(b"$LIB/x", o).is_none());
        assert!(expand_origin(b"$ORIGINAL/x", o).is_none());
    }

    #[test]
    fn search_lists_take_the_first_loadable_file() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let dir = exe.parent().unwrap();
        let name = exe.file_name().unwrap().as_bytes();
        let list = format!("/nonexistent:{}", dir.display());
        assert_eq!(find_in(list.as_bytes(), name, None), Some(exe.clone()));
        assert_eq!(find_in(b"/nonexistent", name, None), None);
    }

    #[test]
    fn the_export_jumps_to_glibc_for_ordinary_flags() {
        // SAFETY: dlopen of the main program, closed at once.
        unsafe {
            let h = dlopen(std::ptr::null(), libc::RTLD_NOW);
            assert!(!h.is_null());
            libc::dlclose(h);
        }
        assert_ne!(REAL_DLOPEN.load(Ordering::Acquire), 0);
    }
}
