//! The key-value interface the node writes through, so another backend can replace LMDB.

use crate::error::StorageError;

/// The tables of a Stave data dir. Keys and values are bytes; their encodings belong to
/// this crate alone (written by [`crate::commit`], read by [`crate::read`]; see
/// docs/storage-layout.md). Outside it only tests name a table, to damage a store on
/// purpose.
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
    /// Named values: head, flushed state height, data format.
    Meta,
    /// Block number → the block's state changes, for the blocks after the flushed height:
    /// a restart rebuilds their state layers from these instead of executing them again.
    StateDiffs,
    /// Block number → a finalization certificate of the block (the consensus engine's
    /// encoding, opaque here): what a node catching up checks the block against.
    Finalizations,
    /// Address ‖ block number → the account before that block changed it: the state
    /// history, kept when the node serves the state of past blocks.
    AccountHistory,
    /// Address ‖ slot ‖ block number → the slot's value before that block changed it.
    StorageHistory,
}

impl Table {
    /// Every table, in a fixed order (the order of the LMDB databases).
    pub const ALL: [Table; 15] = [
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
        Table::Finalizations,
        Table::AccountHistory,
        Table::StorageHistory,
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
            Table::Finalizations => "finalizations",
            Table::AccountHistory => "account_history",
            Table::StorageHistory => "storage_history",
        }
    }

    pub(crate) fn position(self) -> usize {
        self as usize
    }
}

/// One write of a batch, as the backend applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// Set a key.
    Put(Table, &'a [u8], &'a [u8]),
    /// Remove a key (no error if absent).
    Delete(Table, &'a [u8]),
    /// Remove every key starting with the prefix (an account's storage).
    DeletePrefix(Table, &'a [u8]),
    /// Remove every key of the table.
    Clear(Table),
}

/// What a write does; its bytes are in its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Delete,
    DeletePrefix,
    Clear,
}

/// One write in a [`Segment`]: its key follows the previous write's bytes, then its
/// value (empty unless a put), unless the value is a buffer of its own.
#[derive(Debug, Clone)]
struct Entry<'a> {
    kind: Kind,
    table: Table,
    key_len: u32,
    value: Value<'a>,
}

/// Where an [`Entry`]'s value is: a large value is not copied into the segment.
#[derive(Debug, Clone)]
enum Value<'a> {
    /// This many bytes after the key, in the segment.
    Inline(u32),
    /// Borrowed from the caller (a block's body).
    Borrowed(&'a [u8]),
    /// Encoded by the caller and handed over (a block's receipts, its state journal).
    Owned(Vec<u8>),
}

/// Writes encoded back to back into one buffer: two allocations for any number of
/// writes, where a key and a value of their own would take two each.
#[derive(Debug, Clone, Default)]
struct Segment<'a> {
    bytes: Vec<u8>,
    entries: Vec<Entry<'a>>,
}

/// Writes applied together or not at all, in order.
///
/// A batch is a list of segments, so batches encoded on other threads join it by moving
/// their buffers ([`WriteBatch::append`]), not by copying their bytes; a value it
/// borrows ([`WriteBatch::put_borrowed`]) lives as long as `'a`.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch<'a> {
    segments: Vec<Segment<'a>>,
}

impl<'a> WriteBatch<'a> {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `writes` writes of `bytes` bytes of keys and values.
    pub fn with_capacity(writes: usize, bytes: usize) -> Self {
        Self {
            segments: vec![Segment {
                bytes: Vec::with_capacity(bytes),
                entries: Vec::with_capacity(writes),
            }],
        }
    }

    /// Appends `key`'s parts, then the value: `value`'s parts, or `whole` as it is.
    fn push(
        &mut self,
        kind: Kind,
        table: Table,
        key: &[&[u8]],
        value: &[&[u8]],
        whole: Option<Value<'a>>,
    ) {
        if self.segments.is_empty() {
            self.segments.push(Segment::default());
        }
        let segment = self
            .segments
            .last_mut()
            .expect("a batch has a segment to write to");
        let mut write = |parts: &[&[u8]]| {
            let start = segment.bytes.len();
            for part in parts {
                segment.bytes.extend_from_slice(part);
            }
            u32::try_from(segment.bytes.len() - start).expect("a key or value under 4 GiB")
        };
        let key_len = write(key);
        let value = whole.unwrap_or_else(|| Value::Inline(write(value)));
        segment.entries.push(Entry {
            kind,
            table,
            key_len,
            value,
        });
    }

    /// Sets `key` to `value` in `table`.
    pub fn put(&mut self, table: Table, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.put_parts(table, &[key.as_ref()], &[value.as_ref()]);
    }

    /// Sets the key made of `key`'s parts to the value made of `value`'s parts, without
    /// joining them first.
    pub fn put_parts(&mut self, table: Table, key: &[&[u8]], value: &[&[u8]]) {
        self.push(Kind::Put, table, key, value, None);
    }

    /// Sets `key` to `value` in `table` without copying `value`: the batch borrows it
    /// until it is written. For large values the caller holds anyway, such as a block's
    /// body as received (~575 KB for 2,500 transfers).
    pub fn put_borrowed(&mut self, table: Table, key: impl AsRef<[u8]>, value: &'a [u8]) {
        let value = Value::Borrowed(value);
        self.push(Kind::Put, table, &[key.as_ref()], &[], Some(value));
    }

    /// Sets `key` to `value` in `table`, keeping `value`'s buffer instead of copying it:
    /// for a large value encoded only to be written.
    pub fn put_owned(&mut self, table: Table, key: impl AsRef<[u8]>, value: Vec<u8>) {
        let value = Value::Owned(value);
        self.push(Kind::Put, table, &[key.as_ref()], &[], Some(value));
    }

    /// Removes `key` from `table` (no error if absent).
    pub fn delete(&mut self, table: Table, key: impl AsRef<[u8]>) {
        self.push(Kind::Delete, table, &[key.as_ref()], &[], None);
    }

    /// Removes every key of `table` that starts with `prefix`.
    pub fn delete_prefix(&mut self, table: Table, prefix: impl AsRef<[u8]>) {
        self.push(Kind::DeletePrefix, table, &[prefix.as_ref()], &[], None);
    }

    /// Removes every key of `table`.
    pub fn clear(&mut self, table: Table) {
        self.push(Kind::Clear, table, &[], &[], None);
    }

    /// Appends the writes of `other` (for example encoded on another thread) after this
    /// batch's, moving its buffers.
    pub fn append(&mut self, other: WriteBatch<'a>) {
        self.segments.extend(
            other
                .segments
                .into_iter()
                .filter(|segment| !segment.entries.is_empty()),
        );
    }

    /// The writes, in order.
    pub fn ops(&self) -> impl Iterator<Item = Op<'_>> {
        self.segments.iter().flat_map(|segment| {
            let mut rest = segment.bytes.as_slice();
            segment.entries.iter().map(move |entry| {
                let (key, after_key) = rest.split_at(entry.key_len as usize);
                let value = match &entry.value {
                    Value::Inline(len) => {
                        let (value, after_value) = after_key.split_at(*len as usize);
                        rest = after_value;
                        value
                    }
                    Value::Borrowed(value) => {
                        rest = after_key;
                        value
                    }
                    Value::Owned(value) => {
                        rest = after_key;
                        value.as_slice()
                    }
                };
                match entry.kind {
                    Kind::Put => Op::Put(entry.table, key, value),
                    Kind::Delete => Op::Delete(entry.table, key),
                    Kind::DeletePrefix => Op::DeletePrefix(entry.table, key),
                    Kind::Clear => Op::Clear(entry.table),
                }
            })
        })
    }

    /// Writes in the batch.
    pub fn len(&self) -> usize {
        self.segments
            .iter()
            .map(|segment| segment.entries.len())
            .sum()
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Batches are equal when they make the same writes in the same order, however their
/// bytes are split into segments.
impl PartialEq for WriteBatch<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.ops().eq(other.ops())
    }
}

impl Eq for WriteBatch<'_> {}

/// A key and its value, as read.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A transactional key-value store: reads see only whole batches.
pub trait KvStore: Send + Sync {
    /// The value of `key` in `table`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// The first entry of `table` whose key is `from` or comes after it in byte order:
    /// how a read of the state history finds the first change after a block.
    fn seek(&self, table: Table, from: &[u8]) -> Result<Option<KeyValue>, StorageError>;

    /// Applies `batch` atomically and durably: when this returns `Ok`, the batch survives a
    /// crash; when it returns `Err` (or the process dies first), none of it is visible.
    fn write(&self, batch: WriteBatch<'_>) -> Result<(), StorageError> {
        self.write_then(batch, &mut WriteBatch::new)
    }

    /// Applies `first`, then the batch `rest` gives, as one [`KvStore::write`]: `rest` is
    /// called once `first` is applied, so it may wait for a part of the write that another
    /// thread is still encoding.
    fn write_then(
        &self,
        first: WriteBatch<'_>,
        rest: &mut dyn FnMut() -> WriteBatch<'static>,
    ) -> Result<(), StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_joined_from_parts_makes_the_writes_of_one_built_in_order() {
        let mut whole = WriteBatch::new();
        whole.put(Table::Meta, b"head", b"1");
        whole.delete_prefix(Table::Storage, b"ab");
        whole.put(Table::Storage, b"abcd", b"");
        whole.delete(Table::Accounts, b"ab");
        whole.put(Table::Code, b"c", b"code");

        let mut joined = WriteBatch::new();
        joined.put_parts(Table::Meta, &[b"he", b"ad"], &[b"1"]);
        let mut part = WriteBatch::with_capacity(2, 16);
        part.delete_prefix(Table::Storage, b"ab");
        part.put_parts(Table::Storage, &[b"ab", b"cd"], &[]);
        joined.append(part);
        joined.append(WriteBatch::new());
        let mut last = WriteBatch::new();
        last.delete(Table::Accounts, b"ab");
        joined.append(last);
        joined.put_owned(Table::Code, b"c", b"code".to_vec());

        assert_eq!(joined, whole);
        assert_eq!(joined.len(), 5);
        assert_eq!(
            joined.ops().collect::<Vec<_>>(),
            [
                Op::Put(Table::Meta, b"head", b"1"),
                Op::DeletePrefix(Table::Storage, b"ab"),
                Op::Put(Table::Storage, b"abcd", b""),
                Op::Delete(Table::Accounts, b"ab"),
                Op::Put(Table::Code, b"c", b"code"),
            ]
        );
        let mut swapped = WriteBatch::new();
        swapped.delete_prefix(Table::Storage, b"ab");
        swapped.put(Table::Meta, b"head", b"1");
        swapped.put(Table::Storage, b"abcd", b"");
        swapped.delete(Table::Accounts, b"ab");
        swapped.put(Table::Code, b"c", b"code");
        assert_ne!(swapped, whole, "the same kinds of writes in another order");
        assert!(WriteBatch::with_capacity(4, 64).is_empty());
        // Borrowed and handed-over values are written in order, as copied ones.
        let mut whole_values = WriteBatch::new();
        whole_values.put_borrowed(Table::Bodies, b"1", b"body");
        whole_values.put(Table::Meta, b"head", b"1");
        whole_values.put_owned(Table::Receipts, b"1", b"receipts".to_vec());
        whole_values.delete(Table::Accounts, b"ab");
        assert_eq!(
            whole_values.ops().collect::<Vec<_>>(),
            [
                Op::Put(Table::Bodies, b"1", b"body"),
                Op::Put(Table::Meta, b"head", b"1"),
                Op::Put(Table::Receipts, b"1", b"receipts"),
                Op::Delete(Table::Accounts, b"ab"),
            ]
        );
    }
}
