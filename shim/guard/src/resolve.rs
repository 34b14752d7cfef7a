//! The real runtime functions behind our hooks, found lazily at first call (where depends on
//! the platform: [`crate::platform::find_symbol`]) and then cached.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::vmm::{self, Vmm};

/// A real function of a runtime library, resolved on first use and then cached.
pub struct Real<F> {
    name: &'static CStr,
    version: &'static CStr,
    libs: &'static [&'static str],
    addr: AtomicUsize,
    _f: PhantomData<F>,
}

// SAFETY: the only state is an atomic address.
unsafe impl<F> Sync for Real<F> {}

impl<F: Copy> Real<F> {
    pub const fn new(
        name: &'static CStr,
        version: &'static CStr,
        libs: &'static [&'static str],
    ) -> Real<F> {
        Real {
            name,
            version,
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
            a = self.resolve();
            if a == 0 {
                return None;
            }
            self.addr.store(a, Ordering::Release);
        }
        // SAFETY: F is the function pointer type of the symbol, same size as usize.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// Remembers an address seen through `dlsym` or `hipGetProcAddress` when none is known yet.
    pub fn offer(&self, addr: usize) {
        let _ = self
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire);
    }

    fn resolve(&self) -> usize {
        crate::platform::find_symbol(self.name, self.version, self.libs)
    }
}

/// A runtime's virtual memory functions, found like the others (see [`crate::vmm`]).
pub struct VirtualMemory {
    pub granularity: Real<vmm::GranularityFn>,
    pub reserve: Real<vmm::ReserveFn>,
    pub address_free: Real<vmm::RangeFn>,
    pub create: Real<vmm::CreateFn>,
    pub release: Real<vmm::ReleaseFn>,
    pub map: Real<vmm::MapFn>,
    pub unmap: Real<vmm::RangeFn>,
    pub set_access: Real<vmm::SetAccessFn>,
    /// A plain copy, for [`Vmm::probe`].
    pub copy: vmm::CopyFn,
    pub export: Real<vmm::ExportFn>,
    pub import: Real<vmm::ImportFn>,
}

impl VirtualMemory {
    /// The functions for `device`, if all are there and the device maps at a granularity that
    /// divides the pool's 2 MiB pages.
    pub fn for_device(&self, device: c_int) -> Option<Vmm> {
        let v = Vmm {
            device,
            reserve: self.reserve.get()?,
            address_free: self.address_free.get()?,
            create: self.create.get()?,
            release: self.release.get()?,
            map: self.map.get()?,
            unmap: self.unmap.get()?,
            set_access: self.set_access.get()?,
            copy: self.copy,
            export: self.export.get(),
            import: self.import.get(),
            shareable: false,
        };
        v.fits_pages(self.granularity.get()?).then_some(v)
    }
}
