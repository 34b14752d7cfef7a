//! rocmguard's core: the device memory pool, its configuration, stats and trace format.
//! Pure Rust without FFI, so it builds anywhere (Debian's rustc 1.63 included) and every
//! decision can be tested without a GPU.
#![forbid(unsafe_code)]

pub mod config;
pub mod counting;
pub mod group;
mod hash;
pub mod live;
pub mod pool;
pub mod size;
pub mod source;
pub mod stats;
pub mod topology;
pub mod trace;

pub use config::{Config, UmaMode, KEYS};
pub use counting::CountingSource;
pub use pool::{AllocError, Pool, PoolOptions};
pub use size::{format_size, parse_size, Limit};
pub use source::{DeviceSource, SourceError};
pub use stats::Stats;
