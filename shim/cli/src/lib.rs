//! The `rocmguard` command's pieces, one module per subcommand, as a library so tests and
//! benchmarks reuse them (the trace readers, the replay, the doctor's checks).

pub mod doctor;
pub mod replay;
pub mod run;
pub mod stats;
pub mod tune;
