//! Lookups that bypass exported symbols: `dlsym` on a handle of the runtime library (Triton,
//! ctypes) and the runtimes' `GetProcAddress`. For a hooked name they answer with our hook.

use std::ffi::{c_char, c_void, CStr};

use rocmguard_guard::platform::real_dlsym;
use rocmguard_guard::{degraded, hook_for};

/// `dlsym`: the real answer, replaced by our hook where the name is hooked.
///
/// # Safety
/// As `dlsym(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
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
