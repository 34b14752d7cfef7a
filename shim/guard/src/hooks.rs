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

macro_rules! hooks {
    (libs = $libs:expr, missing = $missing:expr;
     $( $(#[$meta:meta])* [$version:literal] fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty
        |$pass:ident| $body:block )* ) => {
        /// The real runtime functions behind the hooks.
        #[allow(non_upper_case_globals)]
        pub mod real {
            #[allow(unused_imports)]
            use super::*;
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
