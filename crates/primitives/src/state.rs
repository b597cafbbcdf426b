//! State changes: what an account is, and what a block changed. Written by the executor,
//! stored by the commit stage, committed to by the header's `state_root` ([`root`]).

use std::collections::BTreeMap;

use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};

use crate::ChainSpec;

mod root;

pub use root::{SlotsHint, generated_genesis_root, receipts_and_state_roots, state_root};

/// An account as state stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountState {
    /// Transactions sent (or contracts created, for a contract).
    pub nonce: u64,
    /// Balance in wei.
    pub balance: U256,
    /// keccak-256 of the code; `KECCAK_EMPTY` for an account without code.
    pub code_hash: B256,
}

impl AccountState {
    /// An account with no nonce, no balance and no code: what an address the state does
    /// not hold reads as.
    pub const EMPTY: Self = Self {
        nonce: 0,
        balance: U256::ZERO,
        code_hash: KECCAK256_EMPTY,
    };
}

/// How one account changed in a block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountDiff {
    /// The account after the block; `None` when it was deleted (self-destruct, EIP-161).
    pub info: Option<AccountState>,
    /// True when all storage from before the block is gone (deletion or re-creation):
    /// only `storage` below then holds.
    pub storage_cleared: bool,
    /// Slots written in the block, with their final values.
    pub storage: SlotDiffs,
}

impl AccountDiff {
    /// The change of an account deleted in the block: no account, no storage.
    pub fn deleted() -> Self {
        Self {
            info: None,
            storage_cleared: true,
            storage: SlotDiffs::default(),
        }
    }

    /// Folds `later`, a change made after this one, on top of it: the account as applying
    /// both in order leaves it. A later clear (self-destruct, re-creation) ends all that
    /// came before; otherwise the earlier slots stay under the later ones.
    pub fn then(&mut self, mut later: AccountDiff) {
        if !later.storage_cleared {
            let mut storage = std::mem::take(&mut self.storage);
            storage.append_with(std::mem::take(&mut later.storage), |kept, value| {
                *kept = value;
            });
            later.storage = storage;
            later.storage_cleared = self.storage_cleared;
        }
        *self = later;
    }
}

/// Entries sorted by key, each key once: a vector rather than a tree, so two lists merge
/// in one linear pass (in place, from the back, into room at the end of the earlier one),
/// and readers iterate it in order or binary-search it. A block's changes are built by
/// collecting them (sorted once), not by inserting them one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedMap<K, V>(Vec<(K, V)>);

/// Changed accounts in address order, each once: the executor merges the diffs of a
/// block's chunks in one linear pass.
pub type AccountDiffs = SortedMap<Address, AccountDiff>;

/// The slots an account wrote in a block, with their final values, in slot order, each
/// once. Not a tree: the chunks of a block of token transfers each write many of the
/// token's slots, and merging two trees of them built a third on the executor's critical
/// path, where this merges in place in one linear pass. The executor collects a
/// block's writes in a hash map and sorts them once ([`SlotDiffs::from_distinct`]).
pub type SlotDiffs = SortedMap<U256, U256>;

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// The value under `key`, if there is one.
    pub fn get(&self, key: &K) -> Option<&V> {
        let position = self.position(key).ok()?;
        Some(&self.0[position].1)
    }

    /// The value under `key`, to modify in place.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let position = self.position(key).ok()?;
        Some(&mut self.0[position].1)
    }

    /// Sets the value under `key`, returning the one it replaces. Shifts the entries after
    /// it: for single changes, not for building a list (collect one instead).
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(position) => Some(std::mem::replace(&mut self.0[position].1, value)),
            Err(position) => {
                self.0.insert(position, (key, value));
                None
            }
        }
    }

    fn position(&self, key: &K) -> Result<usize, usize> {
        self.0.binary_search_by(|(held, _)| held.cmp(key))
    }

    /// The entries in key order.
    pub fn iter(&self) -> SortedIter<'_, K, V> {
        self.0.iter().map(|(key, value)| (key, value))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(key, _)| key)
    }

    /// The values in key order, to modify in place.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, value)| value)
    }

    /// Merges `later`, entries from after these, into this list; a key both hold gets
    /// `combine(earlier value, later value)`.
    ///
    /// In place, from the back, into the room at the end of this list (see
    /// [`AccountDiffs::with_room`]): a block's 5,000 changed accounts are ~700 KB, and a
    /// merge into a new list faulted all of it in afresh on the executor's critical path,
    /// where this touches only the room the later list fills, and moves none of the
    /// earlier entries that sort before every later one. An entry moves at most once, in
    /// a block of memory: a merge of safe swaps through default-filled room wrote every
    /// moved change twice, and first counted the shared addresses to size the room (a pass
    /// over both lists).
    pub fn append_with(&mut self, later: Self, mut combine: impl FnMut(&mut V, V)) {
        let earlier = &mut self.0;
        let mut later = later.0;
        if earlier.is_empty() {
            // Nothing to merge with: the later list is the result as it stands.
            *earlier = later;
            return;
        }
        let (earlier_len, later_len) = (earlier.len(), later.len());
        earlier.reserve(later_len);
        let room = earlier.as_mut_ptr();
        let from = later.as_ptr();
        // SAFETY: both lengths are set to 0 first, so a panic (in `combine`, or a failed
        // allocation in it) leaks the entries rather than dropping any twice. Invariant of
        // the loop: `room[..unplaced]` are earlier entries still to place,
        // `room[unplaced..next]` is free (moved out of, or never written),
        // `room[next..earlier_len + later_len]` is the merged tail, and `from[..left]` are
        // later entries still to place; `next - unplaced` is `left` plus the shared keys
        // met so far, so there is always a free place for the next entry. Each entry is
        // read out of a place once and written into a free place once.
        unsafe {
            earlier.set_len(0);
            later.set_len(0);
            let (mut unplaced, mut next, mut left) =
                (earlier_len, earlier_len + later_len, later_len);
            while left > 0 {
                left -= 1;
                let (key, then) = std::ptr::read(from.add(left));
                // The earlier entries that sort after this one move up as one block.
                let mut start = unplaced;
                while start > 0 && (*room.add(start - 1)).0 > key {
                    start -= 1;
                }
                next -= unplaced - start;
                std::ptr::copy(room.add(start), room.add(next), unplaced - start);
                unplaced = start;
                next -= 1;
                let merged = if unplaced > 0 && (*room.add(unplaced - 1)).0 == key {
                    unplaced -= 1;
                    let (_, mut first) = std::ptr::read(room.add(unplaced));
                    combine(&mut first, then);
                    (key, first)
                } else {
                    (key, then)
                };
                std::ptr::write(room.add(next), merged);
            }
            // One free place is left per shared key: the tail closes over them.
            let merged_len = earlier_len + later_len - (next - unplaced);
            std::ptr::copy(room.add(next), room.add(unplaced), merged_len - unplaced);
            earlier.set_len(merged_len);
        }
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Iterator over a [`SortedMap`] in key order.
pub type SortedIter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

/// Iterator over [`AccountDiffs`] in address order.
pub type AccountDiffsIter<'a> = SortedIter<'a, Address, AccountDiff>;

impl<'a, K: Ord, V> IntoIterator for &'a SortedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = SortedIter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V> IntoIterator for SortedMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<K: Ord + std::fmt::Display, V> std::ops::Index<&K> for SortedMap<K, V> {
    type Output = V;

    /// The value under `key`; panics when there is none (as a map's index does).
    fn index(&self, key: &K) -> &V {
        self.get(key)
            .unwrap_or_else(|| panic!("{key} is not in the list"))
    }
}

impl SlotDiffs {
    /// The slots of `writes` (each slot at most once, as a map holds them), sorted in
    /// place: no scratch list, as the stable sort [`SlotDiffs::from_iter`] needs. Of a
    /// slot written more than once after all, one of its values stays.
    pub fn from_distinct(mut writes: Vec<(U256, U256)>) -> Self {
        writes.sort_unstable_by_key(|(slot, _)| *slot);
        writes.dedup_by_key(|(slot, _)| *slot);
        Self(writes)
    }
}

impl FromIterator<(U256, U256)> for SlotDiffs {
    /// Sorts the writes by slot; of two writes of one slot, the later one in the iterator
    /// stays (as inserting them into a map in turn would leave it).
    fn from_iter<I: IntoIterator<Item = (U256, U256)>>(writes: I) -> Self {
        let mut slots: Vec<(U256, U256)> = writes.into_iter().collect();
        // Stable, so the writes of one slot keep their order, and the last one's value
        // goes into the first, which stays.
        slots.sort_by_key(|(slot, _)| *slot);
        slots.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = later.1;
            }
            same
        });
        Self(slots)
    }
}

impl FromIterator<(Address, AccountDiff)> for AccountDiffs {
    /// Sorts the changes by address; of two changes of one address, the later one in the
    /// iterator stays (as inserting them into a map in turn would leave it).
    ///
    /// Sorting the entries themselves would move ~140 bytes per swap; this sorts
    /// (address prefix, position) pairs instead and then moves each entry once. Equal
    /// prefixes (crafted addresses) are ordered by the whole address.
    fn from_iter<I: IntoIterator<Item = (Address, AccountDiff)>>(changes: I) -> Self {
        Self::with_room(&mut changes.into_iter().collect(), 0)
    }
}

impl AccountDiffs {
    /// `changes` sorted as [`FromIterator`] sorts them (its work, compiled once rather
    /// than for every iterator type), in a list with room for `room` more: what a
    /// [`StateDiff::append`] of about that many later changes merges into without a new
    /// list. Room never touched costs no memory. `changes` is left empty, with its room,
    /// for the next changes to be sorted.
    pub fn with_room(changes: &mut Vec<(Address, AccountDiff)>, room: usize) -> Self {
        let prefix = |address: &Address| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&address[..8]);
            u64::from_be_bytes(bytes)
        };
        let mut order: Vec<(u64, usize)> = changes
            .iter()
            .enumerate()
            .map(|(position, (address, _))| (prefix(address), position))
            .collect();
        // A repeated address puts its later change first, which the dedup below keeps.
        order.sort_unstable_by(|left, right| {
            left.0
                .cmp(&right.0)
                .then_with(|| changes[left.1].0.cmp(&changes[right.1].0))
                .then(right.1.cmp(&left.1))
        });
        let mut sorted = Vec::with_capacity(changes.len() + room);
        sorted.extend(order.into_iter().map(|(_, position)| {
            let (address, change) = &mut changes[position];
            (*address, std::mem::take(change))
        }));
        changes.clear();
        sorted.dedup_by_key(|(address, _)| *address);
        Self(sorted)
    }
}

/// Everything a block changed, in a deterministic (sorted) order: the input of the
/// commit stage and of the state commitment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDiff {
    /// Changed accounts.
    pub accounts: AccountDiffs,
    /// Code deployed in the block, by hash.
    pub codes: BTreeMap<B256, Bytes>,
}

impl StateDiff {
    /// Applies `later`, the changes made after these, on top of them: the result is what
    /// applying both in order gives. The account lists merge in place, from the back, into
    /// the room these changes' list has (see [`AccountDiffs::with_room`] and
    /// [`SortedMap::append_with`]).
    pub fn append(&mut self, mut later: StateDiff) {
        self.codes.append(&mut later.codes);
        self.accounts.append_with(later.accounts, AccountDiff::then);
    }

    /// The state a genesis creates, as a diff over nothing: block 0's changes.
    pub fn from_genesis(spec: &ChainSpec) -> Self {
        let mut diff = Self::default();
        let mut accounts = Vec::with_capacity(spec.alloc().len());
        for (address, account) in spec.alloc() {
            let code = account.code.clone().unwrap_or_default();
            let code_hash = if code.is_empty() {
                KECCAK256_EMPTY
            } else {
                keccak256(&code)
            };
            if !code.is_empty() {
                diff.codes.insert(code_hash, code);
            }
            let storage = account
                .storage
                .iter()
                .flatten()
                .map(|(slot, value)| (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0)))
                .filter(|(_, value)| !value.is_zero())
                .collect();
            let info = AccountState {
                nonce: account.nonce.unwrap_or(0),
                balance: account.balance,
                code_hash,
            };
            accounts.push((
                *address,
                AccountDiff {
                    info: Some(info),
                    storage_cleared: true,
                    storage,
                },
            ));
        }
        diff.accounts = accounts.into_iter().collect();
        diff
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// An account change with `balance`, these slot writes and the cleared flag.
    pub(super) fn account(
        balance: u64,
        storage: &[(u64, u64)],
        storage_cleared: bool,
    ) -> AccountDiff {
        AccountDiff {
            info: Some(AccountState {
                nonce: 1,
                balance: U256::from(balance),
                code_hash: KECCAK256_EMPTY,
            }),
            storage: storage
                .iter()
                .map(|(slot, value)| (U256::from(*slot), U256::from(*value)))
                .collect(),
            storage_cleared,
        }
    }

    /// A diff changing the accounts `Address::repeat_byte(byte)`.
    pub(super) fn accounts(changes: &[(u8, AccountDiff)]) -> StateDiff {
        StateDiff {
            accounts: changes
                .iter()
                .map(|(byte, change)| (Address::repeat_byte(*byte), change.clone()))
                .collect(),
            codes: Default::default(),
        }
    }

    #[test]
    fn collected_changes_are_sorted_and_the_last_of_an_address_stays() {
        let diffs: AccountDiffs = [
            (Address::repeat_byte(3), account(3, &[], false)),
            (Address::repeat_byte(1), account(1, &[], false)),
            (Address::repeat_byte(3), account(33, &[], false)),
            (Address::repeat_byte(2), account(2, &[], false)),
        ]
        .into_iter()
        .collect();
        let keys: Vec<u8> = diffs.keys().map(|address| address[0]).collect();
        assert_eq!(keys, [1, 2, 3]);
        assert_eq!(
            diffs.get(&Address::repeat_byte(3)),
            Some(&account(33, &[], false))
        );
        assert_eq!(diffs.get(&Address::repeat_byte(4)), None);
    }

    #[test]
    fn changes_of_distinct_addresses_are_sorted_by_the_whole_address() {
        // Two addresses that share their first 8 bytes, and one that repeats.
        let mut shared = [7u8; 20];
        shared[19] = 1;
        let changes = vec![
            (Address::from(shared), account(2, &[], false)),
            (Address::repeat_byte(9), account(9, &[], false)),
            (Address::repeat_byte(7), account(1, &[], false)),
            (Address::repeat_byte(1), account(0, &[], false)),
            (Address::repeat_byte(9), account(10, &[], false)),
        ];
        let balances: Vec<u64> = changes
            .into_iter()
            .collect::<AccountDiffs>()
            .iter()
            .map(|(_, change)| change.info.expect("info").balance.to::<u64>())
            .collect();
        assert_eq!(balances, [0, 2, 1, 10]);
    }

    #[test]
    fn inserting_keeps_the_order_and_replaces_an_existing_change() {
        let mut diffs = AccountDiffs::default();
        for byte in [5, 1, 3] {
            assert_eq!(
                diffs.insert(Address::repeat_byte(byte), account(byte.into(), &[], false)),
                None
            );
        }
        let replaced = diffs.insert(Address::repeat_byte(3), account(9, &[], true));
        assert_eq!(replaced, Some(account(3, &[], false)));
        let entries: Vec<(u8, AccountDiff)> = diffs
            .into_iter()
            .map(|(address, change)| (address[0], change))
            .collect();
        assert_eq!(
            entries,
            [
                (1, account(1, &[], false)),
                (3, account(9, &[], true)),
                (5, account(5, &[], false))
            ]
        );
    }

    #[test]
    fn appending_equals_applying_the_later_changes_in_order() {
        let mut earlier = accounts(&[
            (1, account(10, &[(1, 1), (2, 2)], false)),
            (2, account(20, &[(1, 1)], true)),
            (3, account(30, &[(5, 5)], false)),
        ]);
        let later = accounts(&[
            // Written again: new balance, one slot overwritten, one added.
            (1, account(11, &[(2, 9), (3, 3)], false)),
            // Cleared by the later changes (self-destructed and re-created): nothing
            // from before survives.
            (3, account(31, &[(6, 6)], true)),
            (4, account(40, &[], false)),
            (0, account(0, &[], false)),
        ]);
        earlier.append(later);
        let expected = accounts(&[
            (0, account(0, &[], false)),
            (1, account(11, &[(1, 1), (2, 9), (3, 3)], false)),
            (2, account(20, &[(1, 1)], true)),
            (3, account(31, &[(6, 6)], true)),
            (4, account(40, &[], false)),
        ]);
        assert_eq!(earlier, expected);
    }

    proptest::proptest! {
        /// The in-place merge, whatever the room and however the lists interleave and
        /// overlap, equals folding each later change onto a map of the earlier ones.
        #[test]
        fn appending_in_place_equals_folding_onto_a_map(
            earlier in proptest::collection::vec((0u8..40, 0u64..4, proptest::bool::ANY), 0..30),
            later in proptest::collection::vec((0u8..40, 0u64..4, proptest::bool::ANY), 0..30),
            room in 0usize..40,
        ) {
            let change = |(byte, slot, cleared): (u8, u64, bool)| {
                let address = Address::repeat_byte(byte);
                (address, account(u64::from(byte) + slot, &[(slot, u64::from(byte))], cleared))
            };
            let mut earlier: Vec<(Address, AccountDiff)> = earlier.into_iter().map(change).collect();
            let later: StateDiff = StateDiff {
                accounts: later.into_iter().map(change).collect(),
                codes: Default::default(),
            };
            let mut expected: BTreeMap<Address, AccountDiff> =
                earlier.iter().cloned().collect();
            for (address, then) in later.accounts.iter() {
                match expected.get_mut(address) {
                    Some(first) => first.then(then.clone()),
                    None => {
                        expected.insert(*address, then.clone());
                    }
                }
            }
            let mut diff = StateDiff {
                accounts: AccountDiffs::with_room(&mut earlier, room),
                codes: Default::default(),
            };
            diff.append(later);
            let merged: Vec<(Address, AccountDiff)> =
                diff.accounts.iter().map(|(a, c)| (*a, c.clone())).collect();
            proptest::prop_assert_eq!(merged, expected.into_iter().collect::<Vec<_>>());
        }

        /// Slots collected from any writes (a slot written more than once among them), then
        /// merged with any later writes, equal writing all of them into a map in turn; and
        /// a slot's value is found where the map has it.
        #[test]
        fn slots_collected_then_appended_equal_writing_each_into_a_map_in_turn(
            earlier in proptest::collection::vec((0u8..50, 0u64..1000), 0..60),
            later in proptest::collection::vec((0u8..50, 0u64..1000), 0..60),
        ) {
            let write = |(slot, value): (u8, u64)| (U256::from(slot), U256::from(value));
            let mut expected = BTreeMap::new();
            for (slot, value) in earlier.iter().chain(&later).copied().map(write) {
                expected.insert(slot, value);
            }
            let mut slots: SlotDiffs = earlier.into_iter().map(write).collect();
            slots.append_with(later.into_iter().map(write).collect(), |kept, value| *kept = value);
            let merged: Vec<(U256, U256)> = slots.iter().map(|(s, v)| (*s, *v)).collect();
            proptest::prop_assert_eq!(&merged, &expected.clone().into_iter().collect::<Vec<_>>());
            // The same slots once each, in any order, sort to the same list.
            let shuffled: Vec<(U256, U256)> = merged.iter().rev().copied().collect();
            proptest::prop_assert_eq!(&SlotDiffs::from_distinct(shuffled), &slots);
            for slot in 0u8..50 {
                let slot = U256::from(slot);
                proptest::prop_assert_eq!(slots.get(&slot), expected.get(&slot));
            }
        }
    }

    #[test]
    fn inserting_a_slot_keeps_the_order_and_replaces_its_value() {
        let mut slots = SlotDiffs::default();
        for slot in [5u64, 1, 9, 5] {
            slots.insert(U256::from(slot), U256::from(slot * 10));
        }
        assert_eq!(
            slots.insert(U256::from(1), U256::from(7)),
            Some(U256::from(10))
        );
        let keys: Vec<_> = slots.keys().copied().collect();
        assert_eq!(keys, [1u64, 5, 9].map(U256::from));
        assert_eq!(slots.get(&U256::from(1)), Some(&U256::from(7)));
        assert_eq!(slots.get(&U256::from(2)), None);
        assert_eq!(slots.len(), 3);
    }

    #[test]
    fn appending_to_no_changes_gives_the_later_changes() {
        let later = accounts(&[
            (2, account(20, &[(1, 1)], true)),
            (5, account(50, &[], false)),
        ]);
        let mut diff = StateDiff::default();
        diff.append(later.clone());
        assert_eq!(diff, later);
    }

    #[test]
    fn an_earlier_clear_survives_a_later_write() {
        let mut earlier = accounts(&[(1, account(10, &[(1, 1)], true))]);
        earlier.append(accounts(&[(1, account(11, &[(2, 2)], false))]));
        assert_eq!(
            earlier,
            accounts(&[(1, account(11, &[(1, 1), (2, 2)], true))])
        );
    }
}
