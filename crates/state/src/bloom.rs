//! A fixed-size bloom filter over state keys, one per diff layer, covering the layer and
//! its parents: a key it does not contain is in no layer, and the lookup goes straight
//! below the layers.

use crate::key::StateKey;

/// 2^23 bits (1 MiB): about 2.5% false positives with 128 layers of 2,500-tx blocks.
const BITS_LOG2: u32 = 23;
const WORDS: usize = (1 << BITS_LOG2) / 64;
const HASHES: u64 = 4;

/// The bloom filter of a diff layer.
#[derive(Clone)]
pub(crate) struct KeyBloom {
    words: Box<[u64]>,
}

impl KeyBloom {
    /// An empty filter.
    pub(crate) fn new() -> Self {
        Self {
            words: vec![0; WORDS].into_boxed_slice(),
        }
    }

    fn positions(key: &StateKey) -> impl Iterator<Item = usize> {
        // Double hashing over the key's two 64-bit hashes.
        let (h1, h2) = key.hashes();
        let mask = (1u64 << BITS_LOG2) - 1;
        (0..HASHES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2 | 1)) & mask) as usize)
    }

    /// Adds `key`.
    pub(crate) fn insert(&mut self, key: &StateKey) {
        for bit in Self::positions(key) {
            self.words[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// False when `key` was certainly never inserted.
    pub(crate) fn may_contain(&self, key: &StateKey) -> bool {
        Self::positions(key).all(|bit| self.words[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// False when no layer under the filter can hold `key`: neither the key itself nor,
    /// for a slot, its account's storage wiped was inserted.
    pub(crate) fn may_hold(&self, key: &StateKey) -> bool {
        self.may_contain(key)
            || matches!(key, StateKey::Storage(owner, _) if self.may_contain(&StateKey::Wiped(*owner)))
    }
}
