//! A map keyed by device addresses, for the pool's live blocks: one per pooled allocation and
//! free, so it is on the hot path. Addresses are unique and not chosen by an adversary, so a
//! multiplicative hash does (SipHash would be most of the hot path's cost), and open addressing
//! with linear probing in one array, at most half full, finds a key in a slot or two; a removal
//! shifts the entries after it back (no tombstones), so lookups never slow down with churn.

/// Marks a free slot. A key equal to it is kept aside (`at_max`): addresses never are, but the
/// map takes any key.
const EMPTY: u64 = u64::MAX;
/// Slots of a new map (a power of two).
const INITIAL: usize = 16;

/// The top `bits` bits of `key`'s Fibonacci hash (the product with 2^64 / phi), which every bit
/// of the key reaches: addresses and sizes differ in their middle bits. `bits` is 1 to 63.
#[inline(always)]
pub(crate) fn top_bits(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

pub struct AddrMap<V> {
    /// `(key, value)`, `EMPTY` keys in free slots; a power of two long, at most half full. Every
    /// entry lies at or after its home slot ([`AddrMap::home`]) with no free slot in between
    /// (cyclically).
    slots: Vec<(u64, V)>,
    /// 64 less log2 of the slots: the home slot is the hash's top bits.
    shift: u32,
    /// Entries in `slots`.
    len: usize,
    /// The value under key `EMPTY`, if any.
    at_max: Option<V>,
}

impl<V: Copy + Default> Default for AddrMap<V> {
    fn default() -> Self {
        AddrMap {
            slots: vec![(EMPTY, V::default()); INITIAL],
            shift: 64 - INITIAL.trailing_zeros(),
            len: 0,
            at_max: None,
        }
    }
}

impl<V: Copy + Default> AddrMap<V> {
    /// The slot where `key`'s probe starts.
    #[inline]
    fn home(&self, key: u64) -> usize {
        top_bits(key, 64 - self.shift)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key` (not `EMPTY`), if any.
    #[inline]
    fn slot_of(&self, key: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    pub fn len(&self) -> usize {
        self.len + usize::from(self.at_max.is_some())
    }

    #[inline]
    pub fn get(&self, key: &u64) -> Option<&V> {
        if *key == EMPTY {
            return self.at_max.as_ref();
        }
        self.slot_of(*key).map(|i| &self.slots[i].1)
    }

    /// Puts `value` under `key`; returns the value it replaces.
    #[inline]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if key == EMPTY {
            return self.at_max.replace(value);
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Some(std::mem::replace(&mut self.slots[i].1, value));
            }
            if k == EMPTY {
                break;
            }
            i = (i + 1) & mask;
        }
        self.slots[i] = (key, value);
        self.len += 1;
        if self.len * 2 > self.slots.len() {
            self.grow();
        }
        None
    }

    /// Takes `key` out; returns its value.
    #[inline]
    pub fn remove(&mut self, key: &u64) -> Option<V> {
        if *key == EMPTY {
            return self.at_max.take();
        }
        let mut hole = self.slot_of(*key)?;
        let value = self.slots[hole].1;
        self.len -= 1;
        // Entries after the hole whose probe passed it move back into it, until a free slot.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].0;
            if k == EMPTY {
                break;
            }
            // The entry at `j` may fill the hole unless its home lies after the hole (up to
            // `j`, cyclically): its probe then never passed the hole.
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole].0 = EMPTY;
        Some(value)
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let bigger = vec![(EMPTY, V::default()); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        self.shift -= 1;
        let mask = self.mask();
        for (key, value) in old.into_iter().filter(|e| e.0 != EMPTY) {
            let mut i = self.home(key);
            while self.slots[i].0 != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = (key, value);
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &V)> {
        let max = self.at_max.as_ref().map(|v| (&EMPTY, v));
        self.slots
            .iter()
            .filter(|e| e.0 != EMPTY)
            .map(|(k, v)| (k, v))
            .chain(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts, replacements and removals against std's map, with keys that collide
    /// (few distinct homes) and the `EMPTY` key among them, through several growths.
    #[test]
    fn agrees_with_a_hash_map() {
        for spread in [1u64 << 8, 1 << 21, 0x9E37_79B9] {
            let mut ours: AddrMap<u32> = AddrMap::default();
            let mut model: HashMap<u64, u32> = HashMap::new();
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            for step in 0..200_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Up to 4,096 live keys, more while the map grows early on.
                let limit = if step < 100_000 { 4096 } else { 64 };
                let key = match x % 101 {
                    0 => EMPTY,
                    _ => 0x7f00_0000_0000 + (x >> 20) % limit * spread,
                };
                match (x >> 8) % 3 {
                    0 | 1 => assert_eq!(ours.insert(key, step), model.insert(key, step)),
                    _ => assert_eq!(ours.remove(&key), model.remove(&key)),
                }
                assert_eq!(ours.get(&key), model.get(&key));
                assert_eq!(ours.len(), model.len());
            }
            let mut all: Vec<(u64, u32)> = ours.iter().map(|(&k, &v)| (k, v)).collect();
            let mut expected: Vec<(u64, u32)> = model.into_iter().collect();
            all.sort_unstable();
            expected.sort_unstable();
            assert_eq!(all, expected);
        }
    }

    /// Removing from a run that wraps past the array's end keeps every other key findable.
    #[test]
    fn removal_in_a_run_that_wraps() {
        let mut map: AddrMap<u32> = AddrMap::default();
        let mask = map.mask();
        // Keys whose home is the last slot, then one homed at slot 0.
        let mut last = Vec::new();
        let mut first = None;
        let mut k = 0u64;
        while last.len() < 3 || first.is_none() {
            k += 256;
            match map.home(k) {
                h if h == mask && last.len() < 3 => last.push(k),
                0 if first.is_none() => first = Some(k),
                _ => {}
            }
        }
        let first = first.unwrap();
        for (n, &key) in last.iter().chain([first].iter()).enumerate() {
            map.insert(key, n as u32);
        }
        assert_eq!(map.remove(&last[0]), Some(0));
        assert_eq!(map.get(&last[1]), Some(&1));
        assert_eq!(map.get(&last[2]), Some(&2));
        assert_eq!(map.get(&first), Some(&3));
        assert_eq!(map.remove(&last[1]), Some(1));
        assert_eq!(map.get(&first), Some(&3));
        assert_eq!(map.len(), 2);
    }
}
