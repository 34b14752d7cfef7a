//! The layer below the pool: a device that hands out and takes back memory.

/// An error from the device, carried unchanged so the caller sees the runtime's own code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceError {
    /// The runtime's error code (`hipError_t`, `cudaError_t`).
    pub code: i32,
    /// Whether the code means out of memory, so trimming and retrying may help.
    pub out_of_memory: bool,
}

/// What the pool needs from a device. Implemented over `hipMalloc` and friends by the preload
/// library, over a counter by replays and tests.
pub trait DeviceSource: Send + Sync {
    /// A fresh region of `size` bytes (a multiple of 2 MiB); returns its device address.
    fn alloc(&self, size: u64) -> Result<u64, SourceError>;
    /// Gives back a region that `alloc` returned, whole.
    fn free(&self, addr: u64, size: u64) -> Result<(), SourceError>;
    /// `(free, total)` bytes of the device.
    fn mem_info(&self) -> Result<(u64, u64), SourceError>;
    /// Waits until all work queued on the device has finished.
    fn synchronize(&self) -> Result<(), SourceError>;
    /// False while a synchronize would do harm (a stream capture is active).
    fn may_synchronize(&self) -> bool {
        true
    }
    /// True while all device work runs in one order (the program has queued everything on one
    /// device's default stream): work that uses a block after it is handed out again is queued
    /// after all work that used it before its free, so the pool reuses it without waiting.
    /// Device memory given back still waits for a synchronize: the device may be using it.
    fn in_order(&self) -> bool {
        false
    }

    /// Whether the device offers virtual memory: address ranges reserved without memory behind
    /// them, backed later a run of 2 MiB pages at a time ([`DeviceSource::map`]).
    fn has_virtual_memory(&self) -> bool {
        false
    }
    /// Reserves `size` bytes of address space (a multiple of 2 MiB), 2 MiB aligned.
    fn reserve(&self, _size: u64) -> Result<u64, SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
    /// Gives back a reservation with nothing mapped in it.
    fn unreserve(&self, _addr: u64, _size: u64) -> Result<(), SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
    /// Backs `[addr, addr + size)` of a reservation with fresh device memory, readable and
    /// writable by the device, in pieces of `chunk` bytes (the last may be shorter), each given
    /// back whole later; returns a token per piece for [`DeviceSource::unmap`]. All or nothing.
    fn map(&self, _addr: u64, _size: u64, _chunk: u64) -> Result<Vec<u64>, SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
    /// Gives back the memory of one earlier [`DeviceSource::map`], whole.
    fn unmap(&self, _addr: u64, _size: u64, _token: u64) -> Result<(), SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }

    /// Whether [`DeviceSource::detach`] works: a trim that frees room for a map at once then
    /// moves memory to where it is needed instead of giving it back and asking for more (the
    /// driver's create and release are about a third of a map and unmap, data/driver_cost.csv).
    fn moves_memory(&self) -> bool {
        false
    }
    /// Unmaps one earlier mapping (a piece of [`DeviceSource::map`] or
    /// [`DeviceSource::remap`]) but keeps its memory, `token` still valid, for
    /// [`DeviceSource::remap`] or [`DeviceSource::release`].
    fn detach(&self, _addr: u64, _size: u64, _token: u64) -> Result<(), SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
    /// Maps the `size` bytes of memory `token` kept by [`DeviceSource::detach`] at `addr` of a
    /// reservation, readable and writable by the device.
    fn remap(&self, _addr: u64, _size: u64, _token: u64) -> Result<(), SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
    /// Gives back the `size` bytes of memory `token` kept by [`DeviceSource::detach`].
    fn release(&self, _size: u64, _token: u64) -> Result<(), SourceError> {
        Err(SourceError::NOT_SUPPORTED)
    }
}

impl SourceError {
    /// `hipErrorNotSupported` and `cudaErrorNotSupported` alike.
    pub const NOT_SUPPORTED: SourceError = SourceError {
        code: 801,
        out_of_memory: false,
    };
}
