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
}
