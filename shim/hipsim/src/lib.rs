//! hipsim: a simulated HIP runtime, built as `libamdhip64.so` (soname `libamdhip64.so.6`) so
//! that programs linked against AMD's runtime run here without an AMD GPU. It is a simulator for
//! testing rocmguard, not a GPU driver: "device" memory is host memory, kernels are the
//! `hipsimLaunchFill` extra, and every message it prints says "hipsim (simulated HIP runtime)".
//!
//! What it models: per-device capacity and out-of-memory, the allocation and query calls with
//! ROCm's argument checks and error codes, the implicit device synchronize of `hipFree`,
//! streams with queued work, stream capture and what invalidates it, the sticky per-thread last
//! error of ROCm 7, `hipGetProcAddress` resolving to its own exports, APU memory misreporting,
//! injected faults, virtual memory management (reserve, create, map, set access, get access;
//! Linux only), peer access between simulated devices,
//! address-range queries (`hipMemGetAddressRange`, `hipMemPtrGetInfo`), pitched allocations,
//! and versioned exports (`hip_4.2`, `hip_5.1`, ...) like the real library.
//! Knobs are `HIPSIM_*` environment variables (see `config`).
//!
//! Layout, bottom layer first (each module uses only those of the layers before it; `layers`
//! lists them and checks the sources): `error` codes and the last error, `cost` the driver
//! calls' time by size (`HIPSIM_COST_*`), `counters` what tests read, `sys` the platform (mmap or
//! VirtualAlloc, memfd mappings, symbol lookup); `config` the knobs; `memory` allocations and
//! faults, `streams` streams, pools and capture, `selfcall` the runtime's calls to its own
//! exports through the dynamic linker (`HIPSIM_SELF_CALLS`); `vmm` the virtual memory table;
//! `state` the locked process state over them, `props` device properties; `work` the queue of
//! simulated GPU work, `ipc` `hipIpc*` between real processes; `api` the exports and their
//! checks (a file per API family under `api/`, the virtual memory calls included); `peer` peer
//! access and `hipMemGetAccess`, `pitch` the pitched allocations, `share` exporting and
//! importing virtual memory handles.

/// Declares one exported HIP entry point and binds it to its ROCm version node with `.symver`
/// (`build.rs` defines the nodes), so each export is written once and carries its version.
macro_rules! hip_export {
    (
        $(#[$attr:meta])*
        $version:literal fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block
    ) => {
        $(#[$attr])*
        ///
        /// # Safety
        /// A C entry point: pointer arguments must be valid as the HIP API documents them.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body

        #[cfg(all(target_os = "linux", not(test)))]
        core::arch::global_asm!(concat!(
            ".symver ", stringify!($name), ", ", stringify!($name), "@@@", $version
        ));
    };
}

mod api;
mod config;
mod cost;
mod counters;
mod error;
mod ipc;
// Checked on Linux only: windows/hipsim builds these sources from elsewhere and runs its tests
// under wine, where the source tree is not beside its manifest.
#[cfg(all(test, unix))]
mod layers;
mod memory;
mod peer;
mod pitch;
mod props;
mod selfcall;
mod share;
mod state;
mod streams;
mod sys;
mod vmm;
mod work;
