//! Declares each hooked function once: the hook, its real function (found lazily by name in the
//! loaded library) and its entry in the table that the import-table patcher and the
//! `GetProcAddress` answers come from. The same shape as the Linux preload's `hooks!`, so the
//! shared `blas.rs` declares its hooks with either.
//!
//! ```ignore
//! hooks! {
//!     libs = LIBS, missing = guard::SYMBOL_NOT_FOUND;
//!     ["hip_4.2"] fn hipFree(ptr: *mut c_void) -> i32 |pass| { ... pass() ... }
//! }
//! ```
//! `pass` names a closure that makes the plain runtime call with the same arguments; it is also
//! what runs when the guard is off or degraded. The symbol version in brackets is Linux's; DLL
//! exports have none, so it is not used here.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

macro_rules! hooks {
    (libs = $libs:expr, missing = $missing:expr;
     $( $(#[$meta:meta])* [$version:literal]
        fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty |$pass:ident| $body:block
     )* ) => {
        /// The real runtime functions behind the hooks.
        #[allow(non_upper_case_globals)]
        pub mod real {
            #[allow(unused_imports)]
            use super::*;
            $(
                pub static $name: $crate::hooks::Real<unsafe extern "C" fn($($ty),*) -> $ret> =
                    $crate::hooks::Real::new(concat!(stringify!($name), "\0"), $libs);
            )*
        }

        $(
            $(#[$meta])*
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

/// A real function of a runtime library, found on first use and then cached.
pub struct Real<F> {
    /// NUL-terminated.
    name: &'static str,
    /// The libraries that may define it, as file-name prefixes (`amdhip64`; Linux-style
    /// `librocblas` means `rocblas*.dll`).
    libs: &'static [&'static str],
    addr: AtomicUsize,
    _f: PhantomData<F>,
}

// SAFETY: the only state is an atomic address.
unsafe impl<F> Sync for Real<F> {}

impl<F: Copy> Real<F> {
    pub const fn new(name: &'static str, libs: &'static [&'static str]) -> Real<F> {
        Real {
            name,
            libs,
            addr: AtomicUsize::new(0),
            _f: PhantomData,
        }
    }

    /// The function, or `None` while no loaded library defines it (looked up again next time:
    /// the runtime may be loaded later).
    #[inline]
    pub fn get(&self) -> Option<F> {
        let mut a = self.addr.load(Ordering::Acquire);
        if a == 0 {
            let name = CStr::from_bytes_with_nul(self.name.as_bytes()).ok()?;
            a = crate::patch::find_export(self.libs, name);
            if a == 0 {
                return None;
            }
            self.addr.store(a, Ordering::Release);
        }
        // SAFETY: F is the function pointer type of the export, the same size as usize.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// Remembers an address seen in an import table or a lookup when none is known yet.
    pub fn offer(&self, addr: usize) {
        let _ = self
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire);
    }
}
