//! hipsim: a simulated HIP runtime.
