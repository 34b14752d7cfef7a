//! Lookups that bypass exported symbols: `dlsym` on a handle of the runtime library (Triton,
//! ctypes, hip-python) answers our hook for a hooked name.
//!
//! glibc's `dlsym` reads its return address for the pseudo-handles: `RTLD_NEXT` searches the
//! objects after the caller's, `RTLD_DEFAULT` the caller's namespace. A `dlsym` written in Rust
//! would make *us* the caller (`dlsym(RTLD_NEXT, ...)` from the program would search after
//! librocmguard.so), so on x86_64 Linux the export is a few instructions that jump to glibc's
//! `dlsym`, return address intact, for the pseudo-handles, and to [`lookup`] for real handles,
//! whose answer does not depend on the caller.

use std::ffi::{c_char, c_void, CStr};

use rocmguard_guard::platform::real_dlsym;
use rocmguard_guard::{degraded, hook_for};

/// `dlsym`: glibc's own for `RTLD_DEFAULT` and `RTLD_NEXT` (a jump, the caller's return address
/// intact), else [`lookup`].
///
/// # Safety
/// As `dlsym(3)`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: System V x86_64 ABI. rdi = handle, rsi = symbol; rsp is 8 past a 16-byte
    // boundary at entry. Every path jumps to a function of dlsym's signature with the caller's
    // arguments and stack untouched, after (for the pseudo-handles) a call that saves rdi and
    // rsi and keeps the stack 16-byte aligned; or returns null when glibc has no dlsym.
    core::arch::naked_asm!(
        "test rdi, rdi",
        "jz 2f",
        "cmp rdi, -1",
        "je 2f",
        "jmp {lookup}",
        "2:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {real}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "xor eax, eax",
        "ret",
        lookup = sym lookup,
        real = sym real_dlsym_address,
    )
}

/// `dlsym` elsewhere (no ROCm there): the Rust body for every handle.
///
/// # Safety
/// As `dlsym(3)`.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    lookup(handle, symbol)
}

/// glibc's `dlsym`, or 0 (for the assembly above and `deepbind`'s).
pub extern "C" fn real_dlsym_address() -> usize {
    std::panic::catch_unwind(|| real_dlsym() as usize).unwrap_or(0)
}

/// `dlsym` on a real handle: the real answer, replaced by our hook where the name is hooked.
///
/// # Safety
/// As `dlsym(3)`.
pub unsafe extern "C" fn lookup(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let found = real_dlsym()(handle, symbol);
    if found.is_null() || symbol.is_null() || handle == libc::RTLD_DEFAULT {
        return found;
    }
    let name = CStr::from_ptr(symbol).to_bytes();
    match std::panic::catch_unwind(|| hook_for(name, found as usize)) {
        Ok(Some(hook)) if !degraded() => hook as *mut c_void,
        _ => found,
    }
}
