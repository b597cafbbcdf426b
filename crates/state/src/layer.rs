//! One block's state changes, kept in memory until they are flushed to disk.

use std::{
    collections::{BTreeMap, hash_map::Entry},
    sync::Arc,
};

use alloy_primitives::{B256, map::AddressHashMap};
use stave_primitives::{AccountDiff, StateDiff};
use stave_storage::commit::TxPositions;

use crate::{
    bloom::KeyBloom,
    key::{StateKey, StateValue},
};

/// The changes of block `number`, with a bloom filter over its keys and its parents'.
pub(crate) struct DiffLayer {
    pub(crate) number: u64,
    pub(crate) hash: B256,
    pub(crate) diff: StateDiff,
    /// Where its transactions are, until the flush writes them to the `TxIndex` table.
    pub(crate) txs: TxPositions,
    /// Covers this layer and every layer below it back to the last rebuild.
    pub(crate) bloom: Arc<KeyBloom>,
}

/// Every key `diff` writes, and a [`StateKey::Wiped`] for each account whose storage it
/// wiped.
pub(crate) fn keys(diff: &StateDiff) -> impl Iterator<Item = StateKey> + '_ {
    diff.accounts
        .iter()
        .flat_map(|(address, change)| {
            let wiped = change.storage_cleared.then_some(StateKey::Wiped(*address));
            std::iter::once(StateKey::Account(*address))
                .chain(wiped)
                .chain(
                    change
                        .storage
                        .keys()
                        .map(move |slot| StateKey::Storage(*address, *slot)),
                )
        })
        .chain(diff.codes.keys().map(|hash| StateKey::Code(*hash)))
}

/// The value `diff` gives `key`, if it changed it.
pub(crate) fn lookup(diff: &StateDiff, key: &StateKey) -> Option<StateValue> {
    match key {
        StateKey::Account(address) => diff
            .accounts
            .get(address)
            .map(|change| StateValue::Account(change.info)),
        StateKey::Storage(address, slot) => {
            let change = diff.accounts.get(address)?;
            match change.storage.get(slot) {
                Some(value) => Some(StateValue::Storage(*value)),
                // Storage wiped in this block: every unlisted slot is zero.
                None if change.storage_cleared => Some(StateValue::Storage(Default::default())),
                None => None,
            }
        }
        StateKey::Code(hash) => diff
            .codes
            .get(hash)
            .map(|code| StateValue::Code(Some(code.clone()))),
        StateKey::Wiped(_) => None,
    }
}

impl DiffLayer {
    /// The value this layer gives `key`, if it changed it.
    pub(crate) fn get(&self, key: &StateKey) -> Option<StateValue> {
        lookup(&self.diff, key)
    }
}

/// The changes of a block executed but not committed: a consensus engine's notarized
/// block, which the next proposal may build on before it is final. Cheap to clone.
#[derive(Clone)]
pub struct SpeculativeLayer(Arc<Speculative>);

struct Speculative {
    number: u64,
    hash: B256,
    diff: StateDiff,
}

impl SpeculativeLayer {
    /// Block `number` (`hash`)'s changes, `diff`.
    pub fn new(number: u64, hash: B256, diff: StateDiff) -> Self {
        Self(Arc::new(Speculative { number, hash, diff }))
    }

    /// The block's number.
    pub fn number(&self) -> u64 {
        self.0.number
    }

    /// The block's hash.
    pub fn hash(&self) -> B256 {
        self.0.hash
    }

    /// The changes, for committing the block (copied if another holder still reads them).
    pub fn into_diff(self) -> StateDiff {
        Arc::try_unwrap(self.0).map_or_else(|shared| shared.diff.clone(), |layer| layer.diff)
    }

    pub(crate) fn get(&self, key: &StateKey) -> Option<StateValue> {
        lookup(&self.0.diff, key)
    }
}

/// The changes of consecutive blocks, oldest first, as one: what flushing them at once
/// must write.
pub(crate) fn merge<'d>(diffs: impl IntoIterator<Item = &'d StateDiff>) -> StateDiff {
    let mut accounts: AddressHashMap<AccountDiff> = AddressHashMap::default();
    let mut codes = BTreeMap::new();
    for diff in diffs {
        for (address, change) in &diff.accounts {
            match accounts.entry(*address) {
                Entry::Occupied(mut first) => first.get_mut().then(change.clone()),
                Entry::Vacant(slot) => {
                    slot.insert(change.clone());
                }
            }
        }
        codes.extend(diff.codes.iter().map(|(hash, code)| (*hash, code.clone())));
    }
    StateDiff {
        accounts: accounts.into_iter().collect(),
        codes,
    }
}
