//! librocmguard.so: preloaded into an unmodified program, it routes the program's HIP (and
//! CUDA) device allocations through rocmguard's guard (`rocmguard_guard`, shim/guard). The
//! hooks (`hipMalloc` and the rest) and the library's C API (`rocmguard_active` and the rest)
//! are the guard's exports, exported from this library because it links them; what is here is
//! only how Linux brings calls to them that the preload alone would miss: `dlsym` on a handle
//! of the runtime (`dl.rs`).

mod deepbind;
mod dl;
