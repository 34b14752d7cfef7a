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

/// File-name prefixes of what lies below HIP (the HSA runtime, the code object manager): never
/// patched, like the runtime libraries the hooks stand in front of
/// ([`rocmguard_guard::is_runtime_library`]).
const BELOW_HIP: &[&str] = &["libhsa-runtime64", "libamd_comgr"];

mod elf;
mod got;
mod search;

use got::{loaded_now, patch_new_objects};
use search::callers_search;

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
/// answer does not depend on the caller: `dl::lookup` (hooked names answer the hooks). The
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
    // arguments and stack untouched; the one call saves rdi and rsi and keeps the stack
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
        // glibc's dlsym, called as if by the library itself: our export passes the
        // pseudo-handles on to it with the return address intact.
        "3:",
        "jmp {exported_dlsym}",
        hooked_dlsym = sym crate::dl::lookup,
        hook_by_name = sym hook_by_name,
        exported_dlsym = sym crate::dl::dlsym,
    )
}

/// Our hook for the symbol `name` names, or 0 (not hooked, degraded, or a panic).
extern "C" fn hook_by_name(name: *const c_char) -> usize {
    if name.is_null() || rocmguard_guard::degraded() {
        return 0;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: dlsym's argument, a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        rocmguard_guard::hook_for(name, 0).unwrap_or(0)
    })
    .unwrap_or(0)
}

/// Finds glibc's `dlopen`; 0 if there is none.
extern "C" fn resolve_real_dlopen() -> usize {
    let mut f = REAL_DLOPEN.load(Ordering::Acquire);
    if f == 0 {
        f = rocmguard_guard::platform::glibc_function(c"dlopen");
        REAL_DLOPEN.store(f, Ordering::Release);
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
    let (path, probed) = rocmguard_guard::boundary(
        "dlopen",
        // SAFETY: file is the caller's NUL-terminated name or null; caller is a code address.
        || unsafe { callers_search(file, caller, real) },
        || (None, false),
    );
    let before = rocmguard_guard::boundary("dlopen", loaded_now, HashSet::new);
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
        rocmguard_guard::boundary("dlopen", || patch_new_objects(&before), || ());
    }
    handle
}

/// Logs once the configuration (which sets the log up) is read, outside the loader's lock:
/// reading it may start a thread. As for any hook, `ROCMGUARD_DISABLE` leaves the patches in
/// place; the hooks then pass every call through.
fn log_with_config(log: impl FnOnce()) {
    if rocmguard_guard::config().is_some() {
        log();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
