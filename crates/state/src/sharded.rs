//! Shards of a structure that every executing thread reads for every value below the diff
//! layers: the origin pool and the clean cache.
//!
//! Each shard is a `ShardedLock`, under which each thread read-locks a lock of its own, so
//! a read writes no cache line another core reads. With a `RwLock` per shard, every read
//! moved the lock's line between the two executing cores: a miss in the origin pool took
//! 91-99 ns on each of them against 30 ns for one thread alone, and 44 ns with these
//! locks (`bench pipeline`, 2,500 transfers a block, 2 threads). Writing locks every
//! thread's lock, so writers group their keys by shard and take each shard once per batch
//! (`quick_cache`'s own `sharded-lock` feature locks them all for every insert, and a
//! flush inserts the keys of 16 blocks). The clean cache is therefore one
//! `quick_cache::unsync::Cache` per shard, as its sync cache is inside.

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

use crate::key::StateKey;

/// Keys a writer changes per hold of a shard: readers of the shard wait no longer than
/// that takes.
const WRITE_BATCH: usize = 256;

/// `N` shards of `T`, a key's shard picked by its hash.
pub(crate) struct ReadMostly<T, const N: usize> {
    shards: [ShardedLock<T>; N],
}

impl<T, const N: usize> ReadMostly<T, N> {
    /// Shards made by `make`.
    pub(crate) fn new(mut make: impl FnMut() -> T) -> Self {
        Self {
            shards: std::array::from_fn(|_| ShardedLock::new(make())),
        }
    }

    fn index(key: &StateKey) -> usize {
        (key.hashes().0 as usize) % N
    }

    /// Reads the shard of `key`. The shards cache disk values and stay whole after any
    /// panic (they are changed by single calls), so a lock poisoned by one is used all
    /// the same.
    pub(crate) fn read(&self, key: &StateKey) -> ShardedLockReadGuard<'_, T> {
        self.read_at(Self::index(key))
    }

    fn read_at(&self, index: usize) -> ShardedLockReadGuard<'_, T> {
        self.shards[index]
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_at(&self, index: usize) -> ShardedLockWriteGuard<'_, T> {
        self.shards[index]
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Calls `f` on every shard, locked for writing in turn.
    pub(crate) fn each(&self, mut f: impl FnMut(&mut T)) {
        (0..N).for_each(|index| f(&mut self.write_at(index)));
    }

    /// The sum of `f` over the shards.
    pub(crate) fn sum(&self, f: impl Fn(&T) -> usize) -> usize {
        (0..N).map(|index| f(&self.read_at(index))).sum()
    }

    /// Applies `apply` to each item in the shard of its key (`key_of`), taking each shard
    /// once for up to [`WRITE_BATCH`] of them.
    pub(crate) fn write_all<I>(
        &self,
        items: impl IntoIterator<Item = I>,
        key_of: impl Fn(&I) -> &StateKey,
        mut apply: impl FnMut(&mut T, I),
    ) {
        let mut grouped: [Vec<I>; N] = std::array::from_fn(|_| Vec::new());
        for item in items {
            grouped[Self::index(key_of(&item))].push(item);
        }
        for (index, items) in grouped.into_iter().enumerate() {
            let mut items = items.into_iter().peekable();
            while items.peek().is_some() {
                let mut shard = self.write_at(index);
                items
                    .by_ref()
                    .take(WRITE_BATCH)
                    .for_each(|item| apply(&mut shard, item));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, U256};

    use super::*;

    #[test]
    fn items_written_in_batches_reach_the_shard_of_their_key_in_order() {
        // More items than a batch for some shards, so a shard is taken more than once.
        let items: Vec<(StateKey, u64)> = (0..3 * WRITE_BATCH as u64 * 4)
            .map(|i| {
                (
                    StateKey::Storage(Address::repeat_byte(i as u8), U256::from(i)),
                    i,
                )
            })
            .collect();
        let shards: ReadMostly<Vec<u64>, 4> = ReadMostly::new(Vec::new);
        shards.write_all(items.clone(), |(key, _)| key, |shard, (_, i)| shard.push(i));
        assert_eq!(shards.sum(Vec::len), items.len());
        for (key, i) in &items {
            let shard = shards.read(key);
            assert!(shard.contains(i), "{i} is in the shard of its key");
            assert!(
                shard.is_sorted(),
                "a shard got its items in the order written"
            );
        }
        shards.each(Vec::clear);
        assert_eq!(shards.sum(Vec::len), 0);
    }

    #[test]
    fn accounts_and_slots_that_differ_in_their_last_bytes_spread_over_the_shards() {
        const SHARDS: usize = 64;
        let counted = |i| crate::key::counted_address(0, i);
        let per_shard = 200;
        let count = (SHARDS * per_shard) as u64;
        for keys in [
            (0..count)
                .map(|i| StateKey::Account(counted(i)))
                .collect::<Vec<_>>(),
            (0..count)
                .map(|i| StateKey::Storage(counted(1), U256::from(i)))
                .collect(),
        ] {
            let shards: ReadMostly<usize, SHARDS> = ReadMostly::new(|| 0);
            shards.write_all(keys, |key| key, |shard, _| *shard += 1);
            let (mut fewest, mut most) = (usize::MAX, 0);
            shards.each(|shard| {
                fewest = fewest.min(*shard);
                most = most.max(*shard);
            });
            assert!(
                fewest > per_shard / 2 && most < per_shard * 2,
                "shards hold {fewest} to {most} keys where {per_shard} is even"
            );
        }
    }
}
