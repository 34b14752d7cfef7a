//! The virtual memory calls under the pool's virtual segments. HIP's `hipMem*` (ROCm 6 and later)
//! and the CUDA driver's `cuMem*` have the same shapes, structs and codes for what is used here:
//! reserve an address range, create device memory, map it, make it readable and writable.

use std::ffi::c_void;

/// `hipMemLocation` / `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Location {
    kind: i32,
    id: i32,
}

/// `hipMemAllocationProp` (ROCm 6 layout; ROCm 5 had another) / `CUmemAllocationProp`.
#[repr(C)]
pub struct AllocationProp {
    kind: i32,
    handle_types: i32,
    location: Location,
    win32_metadata: *mut c_void,
    compression: u8,
    rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `hipMemAccessDesc` / `CUmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    location: Location,
    flags: i32,
}

const LOCATION_DEVICE: i32 = 1;
const ALLOCATION_PINNED: i32 = 1;
const ACCESS_READ_WRITE: i32 = 3;
const GRANULARITY_MINIMUM: i32 = 0;
/// `hipMemHandleTypePosixFileDescriptor` / `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub const HANDLE_POSIX_FD: i32 = 1;
/// What the pool maps in: runs of whole 2 MiB pages.
const PAGE: usize = 2 << 20;

pub type ReserveFn = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> i32;
pub type RangeFn = unsafe extern "C" fn(u64, usize) -> i32;
pub type CreateFn = unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> i32;
pub type ReleaseFn = unsafe extern "C" fn(u64) -> i32;
pub type MapFn = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> i32;
pub type SetAccessFn = unsafe extern "C" fn(u64, usize, *const AccessDesc, usize) -> i32;
/// `MemExportToShareableHandle(out, handle, type, flags)`.
pub type ExportFn = unsafe extern "C" fn(*mut c_void, u64, i32, u64) -> i32;
/// `MemImportFromShareableHandle(out, os_handle, type)`.
pub type ImportFn = unsafe extern "C" fn(*mut u64, *mut c_void, i32) -> i32;
pub type GranularityFn = unsafe extern "C" fn(*mut usize, *const AllocationProp, i32) -> i32;
/// Copies `n` bytes from `src` to `dst`, either on the device or the host (unified addressing).
pub type CopyFn = fn(dst: u64, src: u64, n: usize) -> i32;

/// A runtime's virtual memory functions, for one device.
#[derive(Clone, Copy)]
pub struct Vmm {
    pub device: i32,
    pub reserve: ReserveFn,
    pub address_free: RangeFn,
    pub create: CreateFn,
    pub release: ReleaseFn,
    pub map: MapFn,
    pub unmap: RangeFn,
    pub set_access: SetAccessFn,
    pub copy: CopyFn,
    /// Sharing with other processes (`MemExportToShareableHandle` and its import), where the
    /// runtime has it; used once `shareable` is on.
    pub export: Option<ExportFn>,
    pub import: Option<ImportFn>,
    /// Pieces are made exportable as POSIX file descriptors (what IPC of pooled blocks in
    /// virtual segments rests on, see `crate::ipc`).
    pub shareable: bool,
}

fn check(code: i32) -> Result<(), i32> {
    if code == 0 {
        Ok(())
    } else {
        Err(code)
    }
}

impl Vmm {
    fn prop(&self) -> AllocationProp {
        AllocationProp {
            kind: ALLOCATION_PINNED,
            handle_types: if self.shareable { HANDLE_POSIX_FD } else { 0 },
            location: Location {
                kind: LOCATION_DEVICE,
                id: self.device,
            },
            win32_metadata: std::ptr::null_mut(),
            compression: 0,
            rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        }
    }

    /// The same functions with pieces made exportable, if the runtime can export and import.
    pub fn sharing(self) -> Option<Vmm> {
        match (self.export, self.import) {
            (Some(_), Some(_)) => Some(Vmm {
                shareable: true,
                ..self
            }),
            _ => None,
        }
    }

    /// A new file descriptor for piece `handle` (the caller closes it).
    pub fn export_fd(&self, handle: u64) -> Result<i32, i32> {
        let export = self.export.filter(|_| self.shareable).ok_or(-1)?;
        let mut fd: i32 = -1;
        // SAFETY: an int out-parameter, as POSIX file descriptor exports write.
        check(unsafe {
            export(
                &mut fd as *mut i32 as *mut c_void,
                handle,
                HANDLE_POSIX_FD,
                0,
            )
        })?;
        Ok(fd)
    }

    /// Maps pieces another process exported, `(fd, size)` in address order, into one new
    /// range readable and writable by this device; returns the range and each piece's handle.
    /// Undoes what it did when a step fails.
    pub fn map_imported(&self, pieces: &[(i32, u64)]) -> Result<(u64, u64, Vec<u64>), i32> {
        let import = self.import.ok_or(-1)?;
        let span: u64 = pieces.iter().map(|p| p.1).sum();
        let base = self.reserve(span)?;
        let mut handles: Vec<(u64, u64, u64)> = Vec::new();
        let mut result = Ok(());
        let mut at = base;
        for &(fd, size) in pieces {
            let mut handle = 0u64;
            // SAFETY: valid out-pointer; the descriptor travels as the pointer's value, as
            // both runtimes read it.
            result =
                check(unsafe { import(&mut handle, fd as usize as *mut c_void, HANDLE_POSIX_FD) });
            if result.is_err() {
                break;
            }
            // SAFETY: `at` lies in the reservation just made, with nothing mapped there.
            result = check(unsafe { (self.map)(at, size as usize, 0, handle, 0) });
            if result.is_err() {
                unsafe { (self.release)(handle) };
                break;
            }
            handles.push((at, size, handle));
            at += size;
        }
        if result.is_ok() {
            result = self.grant(base, span, 0);
        }
        match result {
            Ok(()) => Ok((base, span, handles.into_iter().map(|h| h.2).collect())),
            Err(e) => {
                for (at, size, handle) in handles {
                    let _ = self.unmap(at, size, handle);
                }
                let _ = self.unreserve(base, span);
                Err(e)
            }
        }
    }

    /// Whether the device maps memory at a granularity that divides the pool's 2 MiB pages.
    pub fn fits_pages(&self, granularity: GranularityFn) -> bool {
        let mut g = 0usize;
        // SAFETY: valid out-pointer and a prop that lives across the call.
        let code = unsafe { granularity(&mut g, &self.prop(), GRANULARITY_MINIMUM) };
        code == 0 && g > 0 && PAGE / g * g == PAGE
    }

    pub fn reserve(&self, size: u64) -> Result<u64, i32> {
        let mut addr = 0u64;
        // SAFETY: valid out-pointer; no fixed address asked for.
        check(unsafe { (self.reserve)(&mut addr, size as usize, PAGE, 0, 0) })?;
        Ok(addr)
    }

    pub fn unreserve(&self, addr: u64, size: u64) -> Result<(), i32> {
        // SAFETY: a range `reserve` returned, with nothing mapped in it.
        check(unsafe { (self.address_free)(addr, size as usize) })
    }

    /// Makes `[addr, addr + size)` read-write for its own device and for each device in the
    /// bit set `peers` (those the program enabled peer access for), with one call.
    pub fn grant(&self, addr: u64, size: u64, peers: u64) -> Result<(), i32> {
        let own = self.prop().location;
        let descs: Vec<AccessDesc> = std::iter::once(own.id)
            .chain((0..64).filter(|d| peers >> d & 1 == 1 && *d != own.id))
            .map(|id| AccessDesc {
                location: Location { id, ..own },
                flags: ACCESS_READ_WRITE,
            })
            .collect();
        // SAFETY: a mapped range of ours and `descs.len()` descriptors.
        check(unsafe { (self.set_access)(addr, size as usize, descs.as_ptr(), descs.len()) })
    }

    /// Creates device memory for `[addr, addr + size)` in pieces of `chunk` bytes, maps them
    /// and makes the whole range read-write (for the device and `peers`, see [`Vmm::grant`])
    /// with one call (the costly one); returns each piece's handle. Undoes what it did when a
    /// step fails.
    pub fn map(&self, addr: u64, size: u64, chunk: u64, peers: u64) -> Result<Vec<u64>, i32> {
        let mut handles: Vec<(u64, usize, u64)> = Vec::new();
        let mut result = Ok(());
        let mut at = addr;
        while at < addr + size && result.is_ok() {
            let n = chunk.min(addr + size - at) as usize;
            let mut handle = 0u64;
            // SAFETY: valid out-pointer and prop.
            result = check(unsafe { (self.create)(&mut handle, n, &self.prop(), 0) });
            if result.is_ok() {
                // SAFETY: `at` lies in a reservation of ours with nothing mapped there.
                result = check(unsafe { (self.map)(at, n, 0, handle, 0) });
                if result.is_err() {
                    unsafe { (self.release)(handle) };
                } else {
                    handles.push((at, n, handle));
                }
            }
            at += n as u64;
        }
        if result.is_ok() {
            result = self.grant(addr, size, peers);
        }
        match result {
            Ok(()) => Ok(handles.into_iter().map(|(_, _, h)| h).collect()),
            Err(e) => {
                for (at, n, handle) in handles {
                    // SAFETY: undoing our own mappings and handles of this call, once each.
                    unsafe {
                        (self.unmap)(at, n);
                        (self.release)(handle);
                    }
                }
                Err(e)
            }
        }
    }

    /// Checks at first use that virtual memory works end to end: reserve, create, map, grant
    /// access, write, read back, unmap, release, free the range. Some devices claim support and
    /// then fail a step (`hipMemSetAccess` on RDNA4 and gfx1151). `free` is the device's free
    /// memory (`MemGetInfo`): memory given back must show there before its address range is
    /// freed, else the pool's trims would free nothing (ROCm 7.2 on Linux returns it only with
    /// the whole range, torch_memory_saver #83). Returns the failed step and its code (-1:
    /// other bytes came back; -2: the memory came back only with its range).
    pub fn probe(&self, free: &dyn Fn() -> Option<u64>) -> Result<(), (&'static str, i32)> {
        let size = PAGE as u64;
        let addr = self.reserve(size).map_err(|c| ("reserve", c))?;
        let before = free();
        let used = self.probe_range(addr, size, free);
        let freed = self.unreserve(addr, size).map_err(|c| ("address free", c));
        let after = free();
        let [mapped, released] = used?;
        freed?;
        match came_back_with_range(size, [before, mapped, released, after]) {
            true => Err(("release (memory came back only with its address range)", -2)),
            false => Ok(()),
        }
    }

    /// The device's free memory while the page was mapped and once it was released.
    fn probe_range(
        &self,
        addr: u64,
        size: u64,
        free: &dyn Fn() -> Option<u64>,
    ) -> Result<[Option<u64>; 2], (&'static str, i32)> {
        let handles = self
            .map(addr, size, size, 0)
            .map_err(|c| ("create, map or set access", c))?;
        let mapped = free();
        let written: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        let mut read = vec![0u8; written.len()];
        let at = addr + size - written.len() as u64;
        let copied = check((self.copy)(at, written.as_ptr() as u64, written.len()))
            .and_then(|()| check((self.copy)(read.as_mut_ptr() as u64, at, read.len())))
            .map_err(|c| ("copy", c))
            .and_then(|()| match read == written {
                true => Ok(()),
                false => Err(("read back", -1)),
            });
        let unmapped = handles
            .into_iter()
            .try_for_each(|h| self.unmap(addr, size, h))
            .map_err(|c| ("unmap or release", c));
        copied.and(unmapped).map(|()| [mapped, free()])
    }

    /// Unmaps what [`Vmm::map`] mapped and gives its memory back.
    pub fn unmap(&self, addr: u64, size: u64, handle: u64) -> Result<(), i32> {
        self.detach(addr, size)?;
        self.release(handle)
    }

    /// Unmaps one earlier mapping, keeping its handle's memory.
    pub fn detach(&self, addr: u64, size: u64) -> Result<(), i32> {
        // SAFETY: exactly one earlier mapping.
        check(unsafe { (self.unmap)(addr, size as usize) })
    }

    /// Gives back the memory of a handle no longer mapped.
    pub fn release(&self, handle: u64) -> Result<(), i32> {
        // SAFETY: a handle of ours, released once.
        check(unsafe { (self.release)(handle) })
    }

    /// Maps the `size` bytes of `handle` (kept by [`Vmm::detach`]) at `addr` and makes them
    /// read-write as [`Vmm::map`] does; unmaps it again if that fails.
    pub fn remap(&self, addr: u64, size: u64, handle: u64, peers: u64) -> Result<(), i32> {
        // SAFETY: `addr` lies in a reservation of ours with nothing mapped there; the handle
        // is ours and holds `size` bytes.
        check(unsafe { (self.map)(addr, size as usize, 0, handle, 0) })?;
        let granted = self.grant(addr, size, peers);
        if granted.is_err() {
            let _ = self.detach(addr, size);
        }
        granted
    }
}

/// The device whose memory a `hipMemAllocationProp` / `CUmemAllocationProp` asks for; `None`
/// for a null prop or a location other than a device (host, host NUMA node).
///
/// # Safety
/// `prop` is null or points to the struct the runtime is about to read.
pub unsafe fn device_of(prop: *const c_void) -> Option<i32> {
    if prop.is_null() {
        return None;
    }
    // SAFETY: `location` lies at offset 8 of the caller's struct in both runtimes' layouts.
    let location = std::ptr::read_unaligned((prop as *const u8).add(8) as *const Location);
    if location.kind == LOCATION_DEVICE {
        Some(location.id)
    } else {
        None
    }
}

/// Whether a page's memory came back only when its address range was freed, from the device's
/// free memory before it was mapped, while mapped, once released and once its range was freed.
/// Judged only where the mapping itself showed. Other processes on the device move these
/// figures too (several starting at once allocate between any two readings), so both halves of
/// the fault must show: the release gave nothing back and freeing the range did; a neighbour
/// that allocates cannot fake the second.
fn came_back_with_range(size: u64, readings: [Option<u64>; 4]) -> bool {
    match readings {
        [Some(before), Some(mapped), Some(released), Some(after)] => {
            let half = size / 2;
            mapped + half <= before && released < mapped + half && after >= released + half
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The readings of [`came_back_with_range`] for a device with `free` bytes free, where
    /// releasing a page (2 MiB) gives it back (`at_release`) or only freeing its range does,
    /// while a neighbour takes `taken[i]` bytes just before reading `i`.
    fn readings(at_release: bool, taken: [u64; 4]) -> [Option<u64>; 4] {
        let (free, page) = (8u64 << 30, PAGE as u64);
        let mut neighbour = 0;
        let mut read = |ours: u64, i: usize| {
            neighbour += taken[i];
            Some(free - ours - neighbour)
        };
        let held_released = if at_release { 0 } else { page };
        [
            read(0, 0),
            read(page, 1),
            read(held_released, 2),
            read(0, 3),
        ]
    }

    #[test]
    fn memory_held_until_its_range_goes_is_told_from_a_busy_neighbour() {
        let page = PAGE as u64;
        assert!(came_back_with_range(page, readings(false, [0; 4])));
        assert!(!came_back_with_range(page, readings(true, [0; 4])));
        // Processes starting beside this one allocate between the readings: before, a page
        // or more taken between the mapping and the release read as memory kept.
        for taken in [
            [0, 0, page, 0],
            [0, 4 * page, 4 * page, 4 * page],
            [0, 0, 64 << 20, 0],
        ] {
            assert!(
                !came_back_with_range(page, readings(true, taken)),
                "{:?}",
                taken
            );
        }
        // A neighbour that allocates while the range goes hides the fault: the trim's own
        // check is left to find it (`guard`).
        assert!(!came_back_with_range(
            page,
            readings(false, [0, 0, 0, page])
        ));
        // A mapping that did not show (a neighbour freed as much) is not judged.
        let mut r = readings(false, [0; 4]);
        r[1] = r[0];
        assert!(!came_back_with_range(page, r));
        assert!(!came_back_with_range(
            page,
            [None, Some(0), Some(0), Some(0)]
        ));
    }

    #[test]
    fn structs_have_the_runtime_layout() {
        assert_eq!(std::mem::size_of::<AllocationProp>(), 32);
        let mut prop = AllocationProp {
            kind: ALLOCATION_PINNED,
            handle_types: 0,
            location: Location {
                kind: LOCATION_DEVICE,
                id: 3,
            },
            win32_metadata: std::ptr::null_mut(),
            compression: 0,
            rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        };
        let at = &prop as *const AllocationProp as *const c_void;
        // SAFETY: a live prop.
        assert_eq!(unsafe { device_of(at) }, Some(3));
        prop.location.kind = 2;
        let at = &prop as *const AllocationProp as *const c_void;
        // SAFETY: a live prop, then null, which device_of checks for.
        assert_eq!(unsafe { device_of(at) }, None, "a host location");
        assert_eq!(unsafe { device_of(std::ptr::null()) }, None);
        assert_eq!(std::mem::size_of::<AccessDesc>(), 12);
    }
}
