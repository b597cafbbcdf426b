//! The state history: for every account and slot a flushed block changed, the value it had
//! before that block (`AccountHistory`, `StorageHistory`; docs/storage-layout.md). The
//! state at block N is then, key by key, the value recorded by the first change after N,
//! or the stored state when nothing changed the key since N: one seek per read, whatever
//! the age of N.
//!
//! Written only by a flush ([`crate::commit::flush_state`]), in the transaction that
//! writes the same blocks' state, so the history and the stored state never disagree.
//! [`HistoryWindow`] records the oldest block it serves; blocks before it may still have
//! entries (pruning trails it), which no read reaches.

use alloy_primitives::{Address, U256};
use stave_primitives::{AccountState, decode_stored_account, encode_stored_account};

use crate::{
    error::StorageError,
    kv::{KvStore, Table, WriteBatch},
    layout::{HISTORY_FROM_KEY, account_history_key, storage_history_key, storage_key},
    read,
};

/// The values keys had before the blocks of one flush changed them, in any order: what
/// the flush adds to the state history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorValues {
    /// An account, the block that changed it, and the account before that block (`None`:
    /// it did not exist).
    pub accounts: Vec<(Address, u64, Option<AccountState>)>,
    /// An account's slot, the block that changed it, and its value before that block.
    pub slots: Vec<(Address, U256, u64, U256)>,
}

impl PriorValues {
    /// The history writes, in key order (neighbouring entries share LMDB pages).
    pub(crate) fn ops(&self) -> WriteBatch<'static> {
        let mut accounts: Vec<_> = self
            .accounts
            .iter()
            .map(|(address, number, account)| {
                (
                    account_history_key(*address, *number),
                    account.as_ref().map(encode_stored_account),
                )
            })
            .collect();
        accounts.sort_unstable_by_key(|(key, _)| *key);
        let mut slots: Vec<_> = self
            .slots
            .iter()
            .map(|(address, slot, number, value)| {
                (storage_history_key(*address, *slot, *number), *value)
            })
            .collect();
        slots.sort_unstable_by_key(|(key, _)| *key);
        let mut batch = WriteBatch::with_capacity(
            accounts.len() + slots.len(),
            accounts.len() * 48 + slots.len() * 72,
        );
        for (key, account) in &accounts {
            batch.put(
                Table::AccountHistory,
                key,
                account.as_deref().unwrap_or(&[]),
            );
        }
        for (key, value) in &slots {
            batch.put(Table::StorageHistory, key, trimmed(value));
        }
        batch
    }
}

/// A slot's value as the history stores it: big-endian without leading zeros (zero is no
/// bytes).
fn trimmed(value: &U256) -> Vec<u8> {
    let bytes = value.to_be_bytes::<32>();
    let start = bytes.iter().position(|byte| *byte != 0).unwrap_or(32);
    bytes[start..].to_vec()
}

/// Which blocks the stored history serves: from `from` (the block at which it began, or
/// the oldest not pruned) to the flushed height; the state layers serve the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryWindow {
    /// The oldest block whose state can be read.
    pub from: u64,
}

/// The stored history's window, if the data dir keeps one.
pub fn window(store: &dyn KvStore) -> Result<Option<HistoryWindow>, StorageError> {
    store
        .get(Table::Meta, HISTORY_FROM_KEY)?
        .map(|bytes| {
            let from = bytes
                .try_into()
                .map_err(|_| corrupt(Table::Meta, "history-from"))?;
            Ok(HistoryWindow {
                from: u64::from_be_bytes(from),
            })
        })
        .transpose()
}

/// Starts keeping history at block `from` (the flushed height when it is turned on: the
/// history can serve no block before the state it begins with).
pub fn start(store: &dyn KvStore, from: u64) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    batch.put(Table::Meta, HISTORY_FROM_KEY, from.to_be_bytes());
    store.write(batch)
}

/// Stops keeping history: removes it all, so that a later start does not find entries
/// with a gap in them.
pub fn drop_all(store: &dyn KvStore) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    batch.delete(Table::Meta, HISTORY_FROM_KEY);
    batch.clear(Table::AccountHistory);
    batch.clear(Table::StorageHistory);
    store.write(batch)
}

/// Moves the window's start to `from` and deletes, `batch_entries` at a time, every entry
/// no block from `from` on needs (those of blocks up to `from`). Returns the entries
/// deleted. The start moves first: an entry left by a crash part-way is never read.
pub fn prune(store: &dyn KvStore, from: u64, batch_entries: usize) -> Result<u64, StorageError> {
    start(store, from)?;
    let mut deleted = 0;
    for (table, tail) in [(Table::AccountHistory, 20), (Table::StorageHistory, 52)] {
        let mut cursor = Vec::new();
        loop {
            let mut batch = WriteBatch::new();
            let mut seen = 0;
            while seen < batch_entries {
                let Some((key, _)) = store.seek(table, &cursor)? else {
                    break;
                };
                seen += 1;
                let number = key
                    .get(tail..)
                    .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| corrupt(table, "a key of the wrong length"))?;
                if number <= from {
                    batch.delete(table, &key);
                    deleted += 1;
                }
                // The least key after this one.
                cursor = key;
                cursor.push(0);
            }
            store.write(batch)?;
            if seen < batch_entries {
                break;
            }
        }
    }
    Ok(deleted)
}

/// The account at `address` after block `number`, which the history serves: the value
/// before the first change after `number`, or the stored account if none came since.
pub fn account_at(
    store: &dyn KvStore,
    address: Address,
    number: u64,
) -> Result<Option<AccountState>, StorageError> {
    let from = account_history_key(address, number + 1);
    match store.seek(Table::AccountHistory, &from)? {
        Some((key, value)) if key.starts_with(address.as_slice()) => {
            if value.is_empty() {
                return Ok(None);
            }
            decode_stored_account(&value)
                .map(Some)
                .map_err(|e| corrupt(Table::AccountHistory, &e.to_string()))
        }
        _ => read::account(store, address),
    }
}

/// Storage `slot` of `address` after block `number`, as [`account_at`] reads an account.
pub fn storage_at(
    store: &dyn KvStore,
    address: Address,
    slot: U256,
    number: u64,
) -> Result<U256, StorageError> {
    let from = storage_history_key(address, slot, number + 1);
    match store.seek(Table::StorageHistory, &from)? {
        Some((key, value)) if key.starts_with(&storage_key(address, slot)) => {
            if value.len() > 32 {
                return Err(corrupt(Table::StorageHistory, "a value over 32 bytes"));
            }
            Ok(U256::from_be_slice(&value))
        }
        _ => read::storage(store, address, slot),
    }
}

/// Every stored slot of `address` with its value: what a flush records before it deletes
/// the storage of an account a block wiped.
pub fn stored_slots(
    store: &dyn KvStore,
    address: Address,
) -> Result<Vec<(U256, U256)>, StorageError> {
    let mut slots = Vec::new();
    let mut cursor = address.to_vec();
    while let Some((key, value)) = store.seek(Table::Storage, &cursor)? {
        if !key.starts_with(address.as_slice()) {
            break;
        }
        if key.len() != 52 || value.len() != 32 {
            return Err(corrupt(
                Table::Storage,
                "a key or value of the wrong length",
            ));
        }
        slots.push((U256::from_be_slice(&key[20..]), U256::from_be_slice(&value)));
        cursor = key;
        cursor.push(0);
    }
    Ok(slots)
}

fn corrupt(table: Table, reason: &str) -> StorageError {
    StorageError::Corrupt {
        table: table.name(),
        reason: reason.to_owned(),
    }
}
