//! rocblassim: a simulated rocBLAS.
