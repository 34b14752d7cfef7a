//! A fast hasher for device addresses: they are unique, so no protection against crafted keys
//! is needed, and SipHash would be most of the hot path's cost.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; addresses are 256-aligned, so fold the high bits down.
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

pub type AddrMap<V> = std::collections::HashMap<u64, V, BuildHasherDefault<AddrHasher>>;
