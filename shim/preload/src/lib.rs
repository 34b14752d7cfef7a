//! librocmguard.so
