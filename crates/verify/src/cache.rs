//! The sender cache: transaction hash → sender, filled at txpool admission so block import
//! skips recovery for transactions it has already seen (FISCO BCOS's
//! `verifyAndSetSenderForBlock` does the same).
//!
//! Keyed by the hash of the exact transaction bytes, so a transaction differing in any
//! byte misses and is recovered afresh. An entry is inserted only after the transaction
//! passed every stateless rule for this chain, so a hit is a complete verification.
//!
//! Concurrency: `SHARDS` independent shards, each a mutex over a map and its insertion
//! order; a lookup or insert locks one shard for well under a microsecond, and admission
//! threads rarely meet on the same shard. Eviction is oldest-first per shard.

use std::{
    collections::VecDeque,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use alloy_primitives::{Address, B256, map::B256Map};

/// Shards of the cache: 64, enough that 2–64 admission threads seldom contend, few
/// enough that a small cache still holds useful runs per shard.
const SHARDS: usize = 64;

/// Default capacity: 1,048,576 senders (~80 MiB with map overhead), a few minutes of
/// traffic at 10k TPS: long enough for a tx to get from the pool into a block.
pub const DEFAULT_SENDER_CACHE_CAPACITY: usize = 1 << 20;

#[derive(Debug, Default)]
struct Shard {
    senders: B256Map<Address>,
    /// Hashes in insertion order; the front is evicted first.
    order: VecDeque<B256>,
}

/// A bounded, concurrent map from transaction hash to sender, evicting the oldest entry.
#[derive(Debug)]
pub struct SenderCache {
    shards: Box<[Mutex<Shard>]>,
    shard_capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Lookups a cache has served, for metrics and benches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a sender.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
}

impl SenderCache {
    /// A cache holding about `capacity` senders (rounded up to a multiple of the shard
    /// count).
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, hash: &B256) -> std::sync::MutexGuard<'_, Shard> {
        // Tx hashes are uniform, so one byte spreads them evenly.
        let shard = &self.shards[hash[0] as usize % SHARDS];
        shard.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// The sender of the transaction with this hash, if it was verified before.
    pub fn get(&self, hash: &B256) -> Option<Address> {
        let sender = self.shard(hash).senders.get(hash).copied();
        // Relaxed: counters for reporting, ordered with nothing.
        let counter = if sender.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        sender
    }

    /// Records the sender of a transaction that passed every stateless rule of this chain.
    pub fn insert(&self, hash: B256, sender: Address) {
        let mut shard = self.shard(&hash);
        if shard.senders.insert(hash, sender).is_none() {
            shard.order.push_back(hash);
            if shard.order.len() > self.shard_capacity
                && let Some(oldest) = shard.order.pop_front()
            {
                shard.senders.remove(&oldest);
            }
        }
    }

    /// Senders held.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .senders
                    .len()
            })
            .sum()
    }

    /// True when the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

impl Default for SenderCache {
    fn default() -> Self {
        Self::new(DEFAULT_SENDER_CACHE_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(i: u64) -> B256 {
        alloy_primitives::keccak256(i.to_be_bytes())
    }

    #[test]
    fn returns_what_was_inserted_and_counts_hits() {
        let cache = SenderCache::new(1_000);
        cache.insert(hash(1), Address::with_last_byte(1));
        assert_eq!(cache.get(&hash(1)), Some(Address::with_last_byte(1)));
        assert_eq!(cache.get(&hash(2)), None);
        assert_eq!(cache.stats(), CacheStats { hits: 1, misses: 1 });
    }

    #[test]
    fn stays_bounded_and_evicts_oldest_first() {
        let cache = SenderCache::new(SHARDS * 4);
        for i in 0..10_000 {
            cache.insert(hash(i), Address::with_last_byte(i as u8));
        }
        assert!(cache.len() <= SHARDS * 4, "bounded: {}", cache.len());
        // The newest entries survive; the oldest are gone.
        assert!(cache.get(&hash(9_999)).is_some());
        assert!(cache.get(&hash(0)).is_none());
    }

    #[test]
    fn reinserting_does_not_duplicate() {
        let cache = SenderCache::new(SHARDS);
        for _ in 0..10 {
            cache.insert(hash(7), Address::with_last_byte(7));
        }
        assert_eq!(cache.len(), 1);
    }
}
