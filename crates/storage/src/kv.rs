//! The key-value interface the node writes through, so another backend can replace LMDB.

use crate::error::StorageError;

/// The tables of a Stave data dir. Keys and values are bytes; their encodings belong to
/// the commit stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// Block number (u64 big-endian) → header RLP.
    Headers,
    /// Block hash → block number.
    BlockNumbers,
    /// Block number → body (the offset-indexed transaction list as received).
    Bodies,
    /// Block number → receipts.
    Receipts,
    /// Transaction hash → (block number, index).
    TxIndex,
    /// Block number → logs bloom of all its receipts: the index `eth_getLogs` filters
    /// blocks with before it reads any receipt.
    Blooms,
    /// Block number → the senders of its transactions, recovered when it was imported:
    /// re-executing a stored block after a restart skips signature recovery.
    Senders,
    /// Address → account.
    Accounts,
    /// Address ‖ slot → value.
    Storage,
    /// Code hash → code.
    Code,
    /// Named values: head, flushed state height.
    Meta,
    /// Block number → the block's state changes, for the blocks after the flushed height:
    /// a restart rebuilds their state layers from these instead of executing them again.
    StateDiffs,
}

impl Table {
    /// Every table, in a fixed order (the order of the LMDB databases).
    pub const ALL: [Table; 12] = [
        Table::Headers,
        Table::BlockNumbers,
        Table::Bodies,
        Table::Receipts,
        Table::TxIndex,
        Table::Blooms,
        Table::Senders,
        Table::Accounts,
        Table::Storage,
        Table::Code,
        Table::Meta,
        Table::StateDiffs,
    ];

    /// The table's name in the data dir.
    pub fn name(self) -> &'static str {
        match self {
            Table::Headers => "headers",
            Table::BlockNumbers => "block_numbers",
            Table::Bodies => "bodies",
            Table::Receipts => "receipts",
            Table::TxIndex => "tx_index",
            Table::Blooms => "blooms",
            Table::Senders => "senders",
            Table::Accounts => "accounts",
            Table::Storage => "storage",
            Table::Code => "code",
            Table::Meta => "meta",
            Table::StateDiffs => "state_diffs",
        }
    }

    pub(crate) fn position(self) -> usize {
        self as usize
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set a key.
    Put(Table, Vec<u8>, Vec<u8>),
    /// Remove a key (no error if absent).
    Delete(Table, Vec<u8>),
    /// Remove every key starting with the prefix (an account's storage).
    DeletePrefix(Table, Vec<u8>),
}

/// Writes applied together or not at all, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<Op>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value` in `table`.
    pub fn put(&mut self, table: Table, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(Op::Put(table, key.into(), value.into()));
    }

    /// Removes `key` from `table` (no error if absent).
    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Delete(table, key.into()));
    }

    /// Removes every key of `table` that starts with `prefix`.
    pub fn delete_prefix(&mut self, table: Table, prefix: impl Into<Vec<u8>>) {
        self.ops.push(Op::DeletePrefix(table, prefix.into()));
    }

    /// Appends writes made elsewhere (for example on another thread).
    pub fn extend(&mut self, ops: impl IntoIterator<Item = Op>) {
        self.ops.extend(ops);
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A transactional key-value store: reads see only whole batches.
pub trait KvStore: Send + Sync {
    /// The value of `key` in `table`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// Applies `batch` atomically and durably: when this returns `Ok`, the batch survives a
    /// crash; when it returns `Err` (or the process dies first), none of it is visible.
    fn write(&self, batch: WriteBatch) -> Result<(), StorageError>;
}
