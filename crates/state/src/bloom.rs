//! A fixed-size bloom filter over state keys, one per diff layer, covering the layer and
//! its parents: a key it does not contain is in no layer, and the lookup goes straight
//! below the layers.
//!
//! The filter is blocked: each key's bits lie in one 64-byte block, one cache line, so a
//! lookup costs at most one miss where four bits anywhere in the 1 MiB would cost up to
//! four. Most lookups miss (a transfer's fresh recipient, an account no recent block
//! changed), and the two executing threads each warm their own core's cache for them.

use crate::key::StateKey;

/// 2^23 bits (1 MiB) in 2^14 blocks of 512 bits: 0.54% false positives with 128 layers of
/// 2,500 transfers (0.48% with the bits spread over the whole filter).
const BLOCKS_LOG2: u32 = 14;
const BLOCKS: usize = 1 << BLOCKS_LOG2;
/// Bits set per key, all in the key's block.
const HASHES: u32 = 4;
/// Bits of a hash that pick one of a block's 512 bits.
const BIT_IN_BLOCK_LOG2: u32 = 9;

/// One cache line of the filter.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Block([u64; 8]);

/// The bloom filter of a diff layer.
#[derive(Clone)]
pub(crate) struct KeyBloom {
    blocks: Box<[Block]>,
}

impl KeyBloom {
    /// An empty filter.
    pub(crate) fn new() -> Self {
        Self {
            blocks: vec![Block([0; 8]); BLOCKS].into_boxed_slice(),
        }
    }

    /// The key's block, and its bits there (as word, bit).
    fn positions(key: &StateKey) -> (usize, impl Iterator<Item = (usize, u64)>) {
        let (h1, h2) = key.hashes();
        let block = (h1 >> (64 - BLOCKS_LOG2)) as usize;
        let bits = (0..HASHES).map(move |i| {
            let bit = (h2 >> (i * BIT_IN_BLOCK_LOG2)) as usize & ((1 << BIT_IN_BLOCK_LOG2) - 1);
            (bit / 64, 1 << (bit % 64))
        });
        (block, bits)
    }

    /// Adds `key`.
    pub(crate) fn insert(&mut self, key: &StateKey) {
        let (block, bits) = Self::positions(key);
        let words = &mut self.blocks[block].0;
        for (word, bit) in bits {
            words[word] |= bit;
        }
    }

    /// Starts loading `key`'s block into this core's cache, for a lookup soon after.
    pub(crate) fn prefetch(&self, key: &StateKey) {
        let (block, _) = Self::positions(key);
        let line: *const Block = &self.blocks[block];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch only hints the cache; it never faults, whatever the address.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(line.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// False when `key` was certainly never inserted.
    pub(crate) fn may_contain(&self, key: &StateKey) -> bool {
        let (block, mut bits) = Self::positions(key);
        let words = &self.blocks[block].0;
        bits.all(|(word, bit)| words[word] & bit != 0)
    }

    /// False when no layer under the filter can hold `key`: neither the key itself nor,
    /// for a slot, its account's storage wiped was inserted.
    pub(crate) fn may_hold(&self, key: &StateKey) -> bool {
        self.may_contain(key)
            || matches!(key, StateKey::Storage(owner, _) if self.may_contain(&StateKey::Wiped(*owner)))
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, U256};

    use super::*;

    /// Distinct accounts and slots, from a seed.
    fn keys(seed: u64, count: usize) -> Vec<StateKey> {
        (0..count as u64)
            .map(|i| {
                let n = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i);
                let address = Address::from_word(alloy_primitives::keccak256(n.to_be_bytes()));
                if i % 3 == 0 {
                    StateKey::Storage(address, U256::from(i))
                } else {
                    StateKey::Account(address)
                }
            })
            .collect()
    }

    #[test]
    fn every_key_inserted_may_be_held_and_few_others_are() {
        // 128 layers of 2,500 transfers: a sender and a recipient each.
        let inserted = keys(1, 128 * 5_000);
        let mut bloom = KeyBloom::new();
        inserted.iter().for_each(|key| bloom.insert(key));
        assert!(inserted.iter().all(|key| bloom.may_hold(key)));
        let others = keys(2, 100_000);
        let false_positives = others.iter().filter(|key| bloom.may_contain(key)).count();
        assert!(
            false_positives < others.len() / 100,
            "{false_positives} of {} keys never inserted were let through",
            others.len()
        );
        assert!(!KeyBloom::new().may_contain(&inserted[0]));
    }

    /// Accounts counted up from the bench's recipients' prefix.
    fn counted_accounts(range: std::ops::Range<u64>) -> Vec<StateKey> {
        range
            .map(|i| StateKey::Account(crate::key::counted_address(0x5a, i)))
            .collect()
    }

    #[test]
    fn accounts_counted_up_from_a_prefix_spread_over_the_filter() {
        // Three layers of 2,500 such recipients, then the next block's.
        let inserted = counted_accounts(0..7_500);
        let mut bloom = KeyBloom::new();
        inserted.iter().for_each(|key| bloom.insert(key));
        assert!(inserted.iter().all(|key| bloom.may_hold(key)));
        let others = counted_accounts(7_500..17_500);
        let false_positives = others.iter().filter(|key| bloom.may_contain(key)).count();
        assert!(
            false_positives < others.len() / 100,
            "{false_positives} of {} counted accounts never inserted were let through",
            others.len()
        );
    }

    #[test]
    fn a_slot_of_an_account_whose_storage_was_wiped_may_be_held() {
        let owner = Address::repeat_byte(7);
        let mut bloom = KeyBloom::new();
        bloom.insert(&StateKey::Wiped(owner));
        assert!(bloom.may_hold(&StateKey::Storage(owner, U256::from(12_345))));
        assert!(!bloom.may_contain(&StateKey::Storage(owner, U256::from(12_345))));
    }
}
