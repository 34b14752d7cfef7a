//! What the simulator did so far, counted for tests (`hipsimCounters`; the C layout is in
//! `tests/c/hipsim.h`).

/// What happened so far, for tests (`hipsimCounters`; the C layout is in `tests/c/hipsim.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful allocations (every allocating call that returned a pointer, and every
    /// `hipMemCreate` that returned a handle).
    pub allocs: u64,
    /// Blocks released (`hipFree`, `hipFreeAsync` when it takes effect, `hipDeviceReset`), and
    /// `hipMemCreate` memory freed (by `hipMemRelease`, or the last unmap after it).
    pub frees: u64,
    /// Device synchronizations: `hipDeviceSynchronize` and the implicit one of each `hipFree`.
    pub syncs: u64,
    /// Bytes charged to the devices, `hipMemCreate` handles included, and their high mark.
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub mempool_trims: u64,
    /// Captures invalidated by a call that is not allowed during capture.
    pub capture_invalidations: u64,
    /// Allocation calls that returned `hipErrorOutOfMemory` (capacity or an injected fault).
    pub failed_allocs: u64,
    pub live_allocs: u64,
    /// `hipStreamSynchronize` calls that waited.
    pub stream_syncs: u64,
    /// `hipsimLaunchFill` work that ran, and work dropped because its memory was gone.
    pub fills: u64,
    pub dropped_fills: u64,
}
