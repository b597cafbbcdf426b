//! The read path: every stored value by what it is (a block's header, body, receipts,
//! senders or bloom by number; a block's number by hash; a transaction's position; the
//! stored state; the head and the flushed height), decoded. Other crates read the store
//! through these functions and never name a [`Table`] or a key (see
//! docs/storage-layout.md).
//!
//! A stored value that does not decode is [`StorageError::Corrupt`], naming its table.

use alloy_primitives::{Address, B256, Bloom, Bytes, U256};
use alloy_rlp::Decodable;
use stave_primitives::{
    AccountState, Header, Receipt, StateDiff, decode_stored_diff, decode_stored_receipts,
};

use crate::{
    error::StorageError,
    kv::{KvStore, Table},
    layout::{FLUSHED_KEY, FORMAT_KEY, HEAD_KEY, storage_key},
};

/// Reads `key` from `table` and decodes it; a value that does not decode is `Corrupt`.
fn decoded<T>(
    store: &dyn KvStore,
    table: Table,
    key: &[u8],
    decode: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<Option<T>, StorageError> {
    store
        .get(table, key)?
        .map(|bytes| {
            decode(&bytes).ok_or_else(|| StorageError::Corrupt {
                table: table.name(),
                reason: format!("a {}-byte value does not decode", bytes.len()),
            })
        })
        .transpose()
}

/// Splits `bytes` into a fixed-size head and the rest.
fn split<const N: usize>(bytes: &[u8]) -> Option<(&[u8; N], &[u8])> {
    bytes.split_first_chunk::<N>()
}

/// The data format `store` was created in: `None` for an empty store, 1 for a chain
/// stored before formats were recorded.
pub fn data_format(store: &dyn KvStore) -> Result<Option<u32>, StorageError> {
    if head(store)?.is_none() {
        return Ok(None);
    }
    let format = decoded(store, Table::Meta, FORMAT_KEY, |bytes| {
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    })?;
    Ok(Some(format.unwrap_or(1)))
}

/// The height of the stored state: blocks after it have their state changes only in the
/// state layers (rebuilt by re-executing them after a restart). `None` for an empty store.
pub fn flushed_height(store: &dyn KvStore) -> Result<Option<u64>, StorageError> {
    decoded(store, Table::Meta, FLUSHED_KEY, |bytes| {
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    })
}

/// The stored head: number and hash of the last committed block.
pub fn head(store: &dyn KvStore) -> Result<Option<(u64, B256)>, StorageError> {
    decoded(store, Table::Meta, HEAD_KEY, |bytes| {
        let (number, hash) = split::<8>(bytes)?;
        Some((u64::from_be_bytes(*number), B256::try_from(hash).ok()?))
    })
}

/// The header stored at `number`.
pub fn header(store: &dyn KvStore, number: u64) -> Result<Option<Header>, StorageError> {
    decoded(store, Table::Headers, &number.to_be_bytes(), |mut bytes| {
        Header::decode(&mut bytes).ok()
    })
}

/// The header stored at `number` in its RLP form, as hashed: what a peer catching up
/// checks against the block hash a certificate names.
pub fn encoded_header(store: &dyn KvStore, number: u64) -> Result<Option<Vec<u8>>, StorageError> {
    store.get(Table::Headers, &number.to_be_bytes())
}

/// The finalization certificate stored for block `number`, if any (opaque bytes: the
/// consensus engine's encoding).
pub fn finalization(store: &dyn KvStore, number: u64) -> Result<Option<Vec<u8>>, StorageError> {
    store.get(Table::Finalizations, &number.to_be_bytes())
}

/// The body of block `number` as it was received: its offset-indexed transaction list
/// (see docs/wire-formats.md), undecoded, for callers that forward it or parse only what
/// they need.
pub fn encoded_body(store: &dyn KvStore, number: u64) -> Result<Option<Vec<u8>>, StorageError> {
    store.get(Table::Bodies, &number.to_be_bytes())
}

/// The number of the stored block with this hash.
pub fn block_number(store: &dyn KvStore, hash: B256) -> Result<Option<u64>, StorageError> {
    decoded(store, Table::BlockNumbers, hash.as_slice(), |bytes| {
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    })
}

/// Where a stored transaction is: block number and index. Only blocks up to the flushed
/// height are indexed here; the state layers hold the positions of the later ones.
pub fn tx_location(store: &dyn KvStore, hash: B256) -> Result<Option<(u64, u32)>, StorageError> {
    decoded(store, Table::TxIndex, hash.as_slice(), |bytes| {
        let (number, index) = split::<8>(bytes)?;
        Some((
            u64::from_be_bytes(*number),
            u32::from_be_bytes(index.try_into().ok()?),
        ))
    })
}

/// The receipts stored for block `number`.
pub fn receipts(store: &dyn KvStore, number: u64) -> Result<Option<Vec<Receipt>>, StorageError> {
    decoded(store, Table::Receipts, &number.to_be_bytes(), |bytes| {
        decode_stored_receipts(bytes).ok()
    })
}

/// The senders of block `number`'s transactions, in block order, as recovered when it was
/// imported.
pub fn senders(store: &dyn KvStore, number: u64) -> Result<Option<Vec<Address>>, StorageError> {
    decoded(store, Table::Senders, &number.to_be_bytes(), |bytes| {
        let (senders, rest) = bytes.as_chunks::<20>();
        rest.is_empty()
            .then(|| senders.iter().copied().map(Address::from).collect())
    })
}

/// The state changes journaled for block `number`, if its state is not flushed yet.
pub fn stored_diff(store: &dyn KvStore, number: u64) -> Result<Option<StateDiff>, StorageError> {
    decoded(store, Table::StateDiffs, &number.to_be_bytes(), |bytes| {
        decode_stored_diff(bytes).ok()
    })
}

/// The logs bloom of block `number`: every address and topic its logs carry.
pub fn logs_bloom(store: &dyn KvStore, number: u64) -> Result<Option<Bloom>, StorageError> {
    decoded(store, Table::Blooms, &number.to_be_bytes(), |bytes| {
        (bytes.len() == 256).then(|| Bloom::from_slice(bytes))
    })
}

/// The stored account at `address`.
pub fn account(
    store: &dyn KvStore,
    address: Address,
) -> Result<Option<AccountState>, StorageError> {
    decoded(store, Table::Accounts, address.as_slice(), |bytes| {
        let (nonce, rest) = split::<8>(bytes)?;
        let (balance, code_hash) = split::<32>(rest)?;
        Some(AccountState {
            nonce: u64::from_be_bytes(*nonce),
            balance: U256::from_be_bytes(*balance),
            code_hash: B256::try_from(code_hash).ok()?,
        })
    })
}

/// The stored value of storage `slot` of `address` (zero when absent).
pub fn storage(store: &dyn KvStore, address: Address, slot: U256) -> Result<U256, StorageError> {
    let value = decoded(
        store,
        Table::Storage,
        &storage_key(address, slot),
        |bytes| (bytes.len() == 32).then(|| U256::from_be_slice(bytes)),
    )?;
    Ok(value.unwrap_or_default())
}

/// The stored code with this hash.
pub fn code(store: &dyn KvStore, code_hash: B256) -> Result<Option<Bytes>, StorageError> {
    Ok(store
        .get(Table::Code, code_hash.as_slice())?
        .map(Bytes::from))
}
