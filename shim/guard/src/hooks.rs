//! Declares each hooked symbol once: the hook (exported on Linux), its real function (found
//! lazily by name, and by symbol version where the platform has them) and its entry in the
//! lookup table that `dlsym`, `GetProcAddress`, the import-table patcher and the runtimes' own
//! lookups answer from.
//!
//! ```ignore
//! hooks! {
//!     libs = HIP_LIBS, missing = guard::SYMBOL_NOT_FOUND;
//!     ["hip_4.2"] fn hipFree(ptr: *mut c_void) -> i32 |pass| { ... pass() ... }
//! }
//! ```
//! `pass` names a closure that makes the plain runtime call with the same arguments; it is also
//! what runs when the guard is off or degraded.
//!
//! A hook entered while the guard's own call into the same runtime is under way on that thread
//! ([`calling`]: the pool's `hipMalloc`, `hipFree` and synchronize, and the pass-through
//! allocations it charges to the cap) is that runtime calling its own export through its PLT,
//! as a library linked without `-Bsymbolic` does (HAMi#1707 reports it of ROCm 7; hipsim does it
//! under `HIPSIM_SELF_CALLS=1`): it goes straight to the runtime. The outer call is the one the
//! guard counts, and the inner one must not wait on a pool lock the outer may hold. Calls into
//! another face's runtime (rocBLAS allocating its workspace with `hipMalloc`) are still guarded.
//! A hook pays one relaxed load for this while no such call is under way in the process, and a
//! thread-local read while one is.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls marked by [`calling`] under way in the process, on any thread.
static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The runtime this thread is calling into (the address of its face's `real::RUNTIME`), 0
    /// when none.
    static CALLING: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread is inside a call into `runtime` marked by [`calling`].
#[inline]
pub fn inside(runtime: &'static u8) -> bool {
    UNDER_WAY.load(Ordering::Relaxed) != 0 && calling_into(runtime)
}

/// The thread-local half of [`inside`], out of line: LLVM may otherwise compute the
/// thread-local's address (a `__tls_get_addr` call in a shared library) before the cheap test.
#[cold]
#[inline(never)]
fn calling_into(runtime: &'static u8) -> bool {
    let id = runtime as *const u8 as usize;
    CALLING.try_with(|c| c.get() == id).unwrap_or(false)
}

/// Runs `call`, the guard's own call into `runtime`, marked for the hooks it may reach.
pub fn calling<T>(runtime: &'static u8, call: impl FnOnce() -> T) -> T {
    let id = runtime as *const u8 as usize;
    UNDER_WAY.fetch_add(1, Ordering::Relaxed);
    let outer = CALLING.try_with(|c| c.replace(id)).unwrap_or(0);
    let result = call();
    let _ = CALLING.try_with(|c| c.set(outer));
    UNDER_WAY.fetch_sub(1, Ordering::Relaxed);
    result
}

macro_rules! hooks {
    (libs = $libs:expr, missing = $missing:expr;
     $( $(#[$meta:meta])* [$version:literal] fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty
        |$pass:ident| $body:block )* ) => {
        /// The real runtime functions behind the hooks.
        #[allow(non_upper_case_globals)]
        pub mod real {
            #[allow(unused_imports)]
            use super::*;
            /// This face's runtime, for [`crate::hooks::calling`]: only its address matters.
            pub static RUNTIME: u8 = 0;
            $(
                pub static $name: $crate::resolve::Real<unsafe extern "C" fn($($ty),*) -> $ret> =
                    $crate::resolve::Real::new(
                        $crate::cstr!(stringify!($name)),
                        $crate::cstr!($version),
                        $libs,
                    );
            )*
        }

        $(
            $(#[$meta])*
            // Exported on Linux, where preloading makes it the program's `hipMalloc`; on
            // Windows the import tables are given its address.
            #[cfg_attr(unix, no_mangle)]
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                let $pass = move || -> $ret {
                    match real::$name.get() {
                        // SAFETY (the hook's own unsafe context): the caller's own arguments,
                        // passed on unchanged.
                        Some(f) => f($($arg),*),
                        None => $missing,
                    }
                };
                if $crate::hooks::inside(&real::RUNTIME) {
                    return $pass();
                }
                $crate::boundary(stringify!($name), move || $body, $pass)
            }
        )*

        /// Our hook for a hooked `name`, remembering `real` (what the library itself answered)
        /// as the real function when none is known yet.
        pub fn hook_for(name: &[u8], real: usize) -> Option<usize> {
            $(
                if name == stringify!($name).as_bytes() {
                    let hook = $name as *const () as usize;
                    if real != 0 && real != hook {
                        real::$name.offer(real);
                    }
                    return Some(hook);
                }
            )*
            None
        }
    };
}

pub(crate) use hooks;
