//! librocmguard.so: preloaded into an unmodified program, it routes the program's HIP (and
//! CUDA) device allocations through rocmguard's guard (`rocmguard_guard`, shim/guard). The
//! hooks themselves are the guard's exports (`hipMalloc` and the rest, exported from this
//! library because it links them); what is here is only how Linux brings calls to them that
//! the preload alone would miss: `dlsym` on a handle of the runtime (`dl.rs`).

mod deepbind;
mod dl;

/// The library's version, for `rocmguard doctor` and programs that want to know.
#[no_mangle]
pub extern "C" fn rocmguard_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// 1 when the guard is on (configured, not disabled, not degraded), else 0.
#[no_mangle]
pub extern "C" fn rocmguard_active() -> i32 {
    rocmguard_guard::active()
}
