//! Which diff layers changed each account: a read of an account or of one of its slots
//! goes straight to those layers instead of searching every layer above its block.
//!
//! Without it, a key the bloom filter lets through was looked up in each layer in turn,
//! newest first: for an account last changed 64 blocks ago, 64 binary searches over lists
//! of 5,000 changed accounts, most probes cache misses; a validator catching up spent a
//! large part of its chain thread there. The index makes a deep read about as cheap as a
//! read of the newest layer, for a small extra cost per push (`cargo bench -p
//! stave-state`; MEASUREMENTS.md).
//!
//! The index is shared by all snapshots and moves with the layers: an entry is added
//! before its layer is pushed and removed after its layer is flushed and dropped, so a
//! snapshot skips the entries of blocks above its own, and a layer it no longer finds
//! listed is on disk.

use alloy_primitives::{Address, map::AddressMap};
use parking_lot::RwLock;
use smallvec::SmallVec;
use stave_primitives::StateDiff;

/// Shards of the index: addresses are hashes, so their last byte spreads them evenly.
const SHARDS: usize = 32;

/// The layers that changed one account, oldest first; most accounts have one or two, held
/// inline.
type Numbers = SmallVec<[u64; 2]>;

/// For each account changed in a diff layer, the numbers of the layers that changed it.
pub(crate) struct TouchedAccounts {
    shards: [RwLock<AddressMap<Numbers>>; SHARDS],
}

impl TouchedAccounts {
    /// An empty index.
    pub(crate) fn new() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::new(AddressMap::default())),
        }
    }

    fn shard_of(address: &Address) -> usize {
        address[19] as usize % SHARDS
    }

    fn shard(&self, address: &Address) -> &RwLock<AddressMap<Numbers>> {
        &self.shards[Self::shard_of(address)]
    }

    /// `diff`'s accounts by shard, so that each shard is locked once.
    fn by_shard(diff: &StateDiff) -> [Vec<&Address>; SHARDS] {
        let mut shards: [Vec<&Address>; SHARDS] = std::array::from_fn(|_| Vec::new());
        for address in diff.accounts.keys() {
            shards[Self::shard_of(address)].push(address);
        }
        shards
    }

    /// Records that block `number` (newer than every block recorded) changed the accounts
    /// of `diff`.
    pub(crate) fn add(&self, number: u64, diff: &StateDiff) {
        for (shard, addresses) in self.shards.iter().zip(Self::by_shard(diff)) {
            let mut shard = shard.write();
            for address in addresses {
                shard.entry(*address).or_default().push(number);
            }
        }
    }

    /// Forgets the blocks up to `height` for the accounts of `diff` (the changes of those
    /// blocks, or some of them).
    pub(crate) fn forget_up_to(&self, height: u64, diff: &StateDiff) {
        self.edit(diff, |numbers| numbers.retain(|number| *number > height));
    }

    /// Takes back one [`TouchedAccounts::add`] of block `number` for the accounts of
    /// `diff`: its layer was indexed but will not be pushed (another layer of that number
    /// may have been, and keeps its entries).
    pub(crate) fn remove(&self, number: u64, diff: &StateDiff) {
        self.edit(diff, |numbers| {
            if let Some(at) = numbers.iter().rposition(|listed| *listed == number) {
                numbers.remove(at);
            }
        });
    }

    /// Edits the blocks listed for each account of `diff`; an account left with none
    /// leaves the index.
    fn edit(&self, diff: &StateDiff, edit: impl Fn(&mut Numbers)) {
        for (shard, addresses) in self.shards.iter().zip(Self::by_shard(diff)) {
            let mut shard = shard.write();
            for address in addresses {
                if let Some(numbers) = shard.get_mut(address) {
                    edit(numbers);
                    if numbers.is_empty() {
                        shard.remove(address);
                    }
                }
            }
        }
    }

    /// The first `Some` that `find` returns for the blocks at or below `top` that changed
    /// `address`, newest first.
    pub(crate) fn find_newest<T>(
        &self,
        address: &Address,
        top: u64,
        mut find: impl FnMut(u64) -> Option<T>,
    ) -> Option<T> {
        let shard = self.shard(address).read();
        let numbers = shard.get(address)?;
        numbers
            .iter()
            .rev()
            .skip_while(|number| **number > top)
            .find_map(|number| find(*number))
    }
}

#[cfg(test)]
mod tests {
    use stave_primitives::AccountDiff;

    use super::*;

    fn diff(accounts: &[u8]) -> StateDiff {
        let mut diff = StateDiff::default();
        for who in accounts {
            diff.accounts
                .insert(Address::with_last_byte(*who), AccountDiff::default());
        }
        diff
    }

    fn visited(touched: &TouchedAccounts, who: u8, top: u64) -> Vec<u64> {
        let mut seen = Vec::new();
        touched.find_newest(&Address::with_last_byte(who), top, |number| {
            seen.push(number);
            None::<()>
        });
        seen
    }

    #[test]
    fn reads_visit_only_the_blocks_that_changed_the_account_newest_first_up_to_their_own() {
        let touched = TouchedAccounts::new();
        let blocks = [diff(&[1, 2]), diff(&[2]), diff(&[3]), diff(&[1, 2])];
        for (number, diff) in (1..).zip(&blocks) {
            touched.add(number, diff);
        }
        assert_eq!(visited(&touched, 1, 4), [4, 1]);
        assert_eq!(visited(&touched, 2, 4), [4, 2, 1]);
        // A snapshot at block 3 does not see block 4.
        assert_eq!(visited(&touched, 2, 3), [2, 1]);
        assert_eq!(visited(&touched, 9, 4), Vec::<u64>::new());
        // The search stops at the first answer.
        let found = touched.find_newest(&Address::with_last_byte(2), 4, |number| {
            (number < 3).then_some(number)
        });
        assert_eq!(found, Some(2));

        // Flushing blocks 1 and 2 forgets them; an account left in no layer goes.
        for diff in &blocks[..2] {
            touched.forget_up_to(2, diff);
        }
        assert_eq!(visited(&touched, 1, 4), [4]);
        assert_eq!(visited(&touched, 2, 4), [4]);
        assert_eq!(visited(&touched, 3, 4), [3]);
        // Block 4 indexed twice (a layer prepared, then overtaken by another push of block
        // 4): taking one back leaves the other.
        touched.add(4, &blocks[3]);
        touched.remove(4, &blocks[3]);
        assert_eq!(visited(&touched, 1, 4), [4]);
        // Block 4's layer is not pushed after all: its accounts go back to what they had.
        touched.remove(4, &blocks[3]);
        assert_eq!(visited(&touched, 1, 4), Vec::<u64>::new());
        assert_eq!(visited(&touched, 3, 4), [3]);
        touched.forget_up_to(4, &blocks[2]);
        assert!(touched.shards.iter().all(|shard| shard.read().is_empty()));
    }
}
