//! The key layout of a data dir: which key each value is stored under, shared by the
//! write path ([`crate::commit`]) and the read path ([`crate::read`]), so no other crate
//! spells a key (see docs/storage-layout.md).
//!
//! Encodings (all integers big-endian):
//! - `Headers`: number → header RLP; `BlockNumbers`: hash → number;
//! - `Bodies`: number → the offset-indexed transaction list as received;
//! - `Receipts`: number → RLP list of receipts without their blooms
//!   ([`stave_primitives::encode_stored_receipts`]: a bloom is a function of the logs,
//!   computed again on read);
//! - `TxIndex`: tx hash → number ‖ index (u32), written with the state
//!   ([`crate::commit::TxPositions`]); `Blooms`: number → logs bloom (256);
//! - `Senders`: number → the 20-byte senders of its transactions, in block order;
//! - `Accounts`: address → nonce (u64) ‖ balance (32) ‖ code hash (32);
//! - `Storage`: address ‖ slot (32) → value (32), absent when zero;
//! - `Code`: code hash → code; `Meta`: `head` → number ‖ hash, `flushed` → the number of
//!   the block the stored state is at (≤ head: the state layers hold the rest in memory),
//!   `format` → the [`crate::commit::DATA_FORMAT`] (u32) the data dir was created in,
//!   written with block 0;
//! - `StateDiffs`: number → the state changes of a block after the flushed height
//!   ([`stave_primitives::encode_stored_diff`]), deleted when its state is flushed;
//! - `AccountHistory`: address ‖ number → the account before block `number` changed it
//!   ([`stave_primitives::encode_stored_account`]; no bytes: it did not exist);
//!   `StorageHistory`: address ‖ slot ‖ number → the slot's value before that block,
//!   big-endian without leading zeros; `Meta` `history-from` → the oldest block the
//!   history serves (absent: no history is kept);
//! - `Finalizations`: number → a finalization certificate of that block, as the consensus
//!   engine encodes it (not every block has one: a block is final once a descendant is).

use alloy_primitives::{Address, U256};

/// Key of the head in `Meta`.
pub(crate) const HEAD_KEY: &[u8] = b"head";
/// Key in `Meta` of the height the stored state is at (`Accounts`, `Storage`, `Code`).
pub(crate) const FLUSHED_KEY: &[u8] = b"flushed";
/// Key in `Meta` of the data format the data dir was created in.
pub(crate) const FORMAT_KEY: &[u8] = b"format";

/// Key in `Meta` of the oldest block the state history serves.
pub(crate) const HISTORY_FROM_KEY: &[u8] = b"history-from";

/// An `AccountHistory` key: address ‖ block number.
pub(crate) fn account_history_key(address: Address, number: u64) -> [u8; 28] {
    let mut key = [0; 28];
    key[..20].copy_from_slice(address.as_slice());
    key[20..].copy_from_slice(&number.to_be_bytes());
    key
}

/// A `StorageHistory` key: address ‖ slot ‖ block number.
pub(crate) fn storage_history_key(address: Address, slot: U256, number: u64) -> [u8; 60] {
    let mut key = [0; 60];
    key[..52].copy_from_slice(&storage_key(address, slot));
    key[52..].copy_from_slice(&number.to_be_bytes());
    key
}

/// A `Storage` key: address ‖ slot (big-endian), so an account's slots are adjacent and in
/// slot order.
pub fn storage_key(address: Address, slot: U256) -> [u8; 52] {
    let mut key = [0; 52];
    key[..20].copy_from_slice(address.as_slice());
    key[20..].copy_from_slice(&slot.to_be_bytes::<32>());
    key
}
