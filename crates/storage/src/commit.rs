//! The commit stage: a block, its receipts and its state diff, encoded into one
//! [`WriteBatch`] (in parallel) and written in one transaction.
//!
//! Input: [`BlockToCommit`]. Output: [`Committed`]. Tables written: all but none read
//! except `Meta` (the head) and `Headers` (idempotence). Committing a block that is already
//! stored is a no-op, because consensus may deliver a finalized block again after a
//! restart.
//!
//! Encodings (all integers big-endian):
//! - `Headers`: number → header RLP; `BlockNumbers`: hash → number;
//! - `Bodies`: number → the offset-indexed transaction list as received;
//! - `Receipts`: number → RLP list of receipts without their blooms
//!   ([`encode_stored_receipts`]: a bloom is a function of the logs, computed again on read);
//! - `TxIndex`: tx hash → number ‖ index (u32), written with the state ([`TxPositions`]);
//!   `Blooms`: number → logs bloom (256);
//! - `Senders`: number → the 20-byte senders of its transactions, in block order;
//! - `Accounts`: address → nonce (u64) ‖ balance (32) ‖ code hash (32);
//! - `Storage`: address ‖ slot (32) → value (32), absent when zero;
//! - `Code`: code hash → code; `Meta`: `head` → number ‖ hash, `flushed` → the number of
//!   the block the stored state is at (≤ head: the state layers hold the rest in memory),
//!   `format` → the [`DATA_FORMAT`] (u32) the data dir was created in, written with block 0;
//! - `StateDiffs`: number → the state changes of a block after the flushed height
//!   ([`encode_stored_diff`]), deleted when its state is flushed.

use alloy_primitives::{Address, B256, Bloom, U256};
use alloy_rlp::Decodable;
use rayon::prelude::*;
use stave_primitives::{
    AccountDiff, AccountState, Header, Receipt, SealedBlock, StateDiff, block_bloom,
    decode_stored_diff, decode_stored_receipts, encode_stored_diff, encode_stored_receipts,
};

use crate::{
    error::StorageError,
    kv::{KvStore, Table, WriteBatch},
};

/// Key of the head in `Meta`.
const HEAD_KEY: &[u8] = b"head";
/// Key in `Meta` of the height the stored state is at (`Accounts`, `Storage`, `Code`).
const FLUSHED_KEY: &[u8] = b"flushed";

/// Key in `Meta` of the data format the data dir was created in.
const FORMAT_KEY: &[u8] = b"format";

/// The data format this build writes and reads. 2: the header's state root hashes a
/// block's changes in leaves of units (an account, one slot it wrote, a code hash) rather
/// than of whole accounts, so stored blocks of format 1 whose changes wrote storage no
/// longer verify. Data dirs created before formats were recorded are format 1.
pub const DATA_FORMAT: u32 = 2;

/// The data format `store` was created in: `None` for an empty store, 1 for a chain
/// stored before formats were recorded.
pub fn data_format(store: &dyn KvStore) -> Result<Option<u32>, StorageError> {
    if head(store)?.is_none() {
        return Ok(None);
    }
    let format = read(store, Table::Meta, FORMAT_KEY, |bytes| {
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    })?;
    Ok(Some(format.unwrap_or(1)))
}

/// Items per rayon task when encoding: ~64 entries of ~1 µs each, so tasks outweigh
/// scheduling without starving either core of a 2,500-tx block.
const ITEMS_PER_TASK: usize = 64;

/// Bytes of keys and values a task reserves per item: an account write (20 + 72), or a
/// transaction index entry (32 + 12), with room to spare.
const BYTES_PER_ITEM: usize = 128;

/// Everything the commit stage writes for one block.
#[derive(Debug, Clone, Copy)]
pub struct BlockToCommit<'a> {
    /// The block (its hash and transactions).
    pub block: &'a SealedBlock,
    /// Its body as received: the offset-indexed transaction list.
    pub body: &'a [u8],
    /// One receipt per transaction.
    pub receipts: &'a [Receipt],
    /// One sender per transaction, as the verify stage recovered them.
    pub senders: &'a [Address],
    /// Its state changes and how they are written.
    pub state: BlockState<'a>,
}

/// How the commit stage writes a block's state changes.
#[derive(Debug, Clone, Copy)]
pub enum BlockState<'a> {
    /// Applied to the state tables with the block, with its `TxIndex` entries: the
    /// flushed height moves to it (the genesis block).
    Applied(&'a StateDiff),
    /// Held by the state layers in memory until [`flush_state`] applies it, and journaled
    /// in `StateDiffs` so that a restart rebuilds the layer without executing the block.
    Journaled(&'a StateDiff),
}

/// What committing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The block is now the head.
    New,
    /// The block was already stored; nothing was written.
    AlreadyStored,
}

/// Reads `key` from `table` and decodes it; a value that does not decode is `Corrupt`.
fn read<T>(
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

/// The height of the stored state: blocks after it have their state changes only in the
/// state layers (rebuilt by re-executing them after a restart). `None` for an empty store.
pub fn flushed_height(store: &dyn KvStore) -> Result<Option<u64>, StorageError> {
    read(store, Table::Meta, FLUSHED_KEY, |bytes| {
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    })
}

/// The stored head: number and hash of the last committed block.
pub fn head(store: &dyn KvStore) -> Result<Option<(u64, B256)>, StorageError> {
    read(store, Table::Meta, HEAD_KEY, |bytes| {
        let (number, hash) = split::<8>(bytes)?;
        Some((u64::from_be_bytes(*number), B256::try_from(hash).ok()?))
    })
}

/// The header stored at `number`.
pub fn header(store: &dyn KvStore, number: u64) -> Result<Option<Header>, StorageError> {
    read(store, Table::Headers, &number.to_be_bytes(), |mut bytes| {
        Header::decode(&mut bytes).ok()
    })
}

/// The number of the stored block with this hash.
pub fn block_number(store: &dyn KvStore, hash: B256) -> Result<Option<u64>, StorageError> {
    read(store, Table::BlockNumbers, hash.as_slice(), |bytes| {
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    })
}

/// Where a stored transaction is: block number and index. Only blocks up to the flushed
/// height are indexed here; the state layers hold the positions of the later ones.
pub fn tx_location(store: &dyn KvStore, hash: B256) -> Result<Option<(u64, u32)>, StorageError> {
    read(store, Table::TxIndex, hash.as_slice(), |bytes| {
        let (number, index) = split::<8>(bytes)?;
        Some((
            u64::from_be_bytes(*number),
            u32::from_be_bytes(index.try_into().ok()?),
        ))
    })
}

/// The receipts stored for block `number`.
pub fn receipts(store: &dyn KvStore, number: u64) -> Result<Option<Vec<Receipt>>, StorageError> {
    read(store, Table::Receipts, &number.to_be_bytes(), |bytes| {
        decode_stored_receipts(bytes).ok()
    })
}

/// The senders of block `number`'s transactions, in block order, as recovered when it was
/// imported.
pub fn senders(store: &dyn KvStore, number: u64) -> Result<Option<Vec<Address>>, StorageError> {
    read(store, Table::Senders, &number.to_be_bytes(), |bytes| {
        let (senders, rest) = bytes.as_chunks::<20>();
        rest.is_empty()
            .then(|| senders.iter().copied().map(Address::from).collect())
    })
}

/// The state changes journaled for block `number`, if its state is not flushed yet.
pub fn stored_diff(store: &dyn KvStore, number: u64) -> Result<Option<StateDiff>, StorageError> {
    read(store, Table::StateDiffs, &number.to_be_bytes(), |bytes| {
        decode_stored_diff(bytes).ok()
    })
}

/// The logs bloom of block `number`: every address and topic its logs carry.
pub fn logs_bloom(store: &dyn KvStore, number: u64) -> Result<Option<Bloom>, StorageError> {
    read(store, Table::Blooms, &number.to_be_bytes(), |bytes| {
        (bytes.len() == 256).then(|| Bloom::from_slice(bytes))
    })
}

/// The stored account at `address`.
pub fn account(
    store: &dyn KvStore,
    address: Address,
) -> Result<Option<AccountState>, StorageError> {
    read(store, Table::Accounts, address.as_slice(), |bytes| {
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
    let value = read(
        store,
        Table::Storage,
        &storage_key(address, slot),
        |bytes| (bytes.len() == 32).then(|| U256::from_be_slice(bytes)),
    )?;
    Ok(value.unwrap_or_default())
}

/// A `Storage` key: address ‖ slot.
fn storage_key(address: Address, slot: U256) -> [u8; 52] {
    let mut key = [0; 52];
    key[..20].copy_from_slice(address.as_slice());
    key[20..].copy_from_slice(&slot.to_be_bytes::<32>());
    key
}

/// Runs `encode` over `items` into one batch, on all cores when `parallel`: each task
/// encodes into a batch of its own, and the tasks' batches join in item order.
fn encode_all<T: Sync>(
    items: &[T],
    parallel: bool,
    encode: impl Fn(&T, &mut WriteBatch<'static>) + Sync,
) -> WriteBatch<'static> {
    let chunk = |chunk: &[T]| {
        let mut batch = WriteBatch::with_capacity(chunk.len() * 2, chunk.len() * BYTES_PER_ITEM);
        chunk.iter().for_each(|item| encode(item, &mut batch));
        batch
    };
    if !parallel {
        return chunk(items);
    }
    let parts: Vec<WriteBatch<'static>> = items.par_chunks(ITEMS_PER_TASK).map(chunk).collect();
    let mut batch = WriteBatch::new();
    parts.into_iter().for_each(|part| batch.append(part));
    batch
}

fn account_ops((address, change): &(&Address, &AccountDiff), batch: &mut WriteBatch<'static>) {
    if change.storage_cleared {
        batch.delete_prefix(Table::Storage, address);
    }
    match change.info {
        Some(info) => batch.put_parts(
            Table::Accounts,
            &[address.as_slice()],
            &[
                &info.nonce.to_be_bytes(),
                &info.balance.to_be_bytes::<32>(),
                info.code_hash.as_slice(),
            ],
        ),
        None => batch.delete(Table::Accounts, address),
    }
    for (slot, value) in &change.storage {
        let key = storage_key(**address, *slot);
        if value.is_zero() {
            batch.delete(Table::Storage, key);
        } else {
            batch.put(Table::Storage, key, value.to_be_bytes::<32>());
        }
    }
}

/// The writes that apply `diff` to the stored state (accounts, storage, code), encoded on
/// all cores when `parallel`.
pub fn state_ops(diff: &StateDiff, parallel: bool) -> WriteBatch<'static> {
    let accounts: Vec<(&Address, &AccountDiff)> = diff.accounts.iter().collect();
    let mut batch = encode_all(&accounts, parallel, account_ops);
    for (code_hash, code) in &diff.codes {
        batch.put(Table::Code, code_hash, code);
    }
    batch
}

/// Where each transaction of a block sits in it, sorted by hash: the block's `TxIndex`
/// entries. They are written with the block's state ([`flush_state`]), not with the block:
/// 2,500 random hashes dirty up to 2,500 pages of the index, a write the commit stage
/// should not wait for, and many blocks' entries written together share pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxPositions(Vec<(B256, u32)>);

impl TxPositions {
    /// The positions of transactions with these hashes, in block order.
    pub fn new(hashes: impl IntoIterator<Item = B256>) -> Self {
        let mut positions: Vec<(B256, u32)> = hashes.into_iter().zip(0u32..).collect();
        positions.sort_unstable_by_key(|(hash, _)| *hash);
        Self(positions)
    }

    /// The positions of `block`'s transactions.
    pub fn of(block: &SealedBlock) -> Self {
        Self::new(block.transactions().iter().map(|tx| tx.hash()))
    }

    /// The index of the transaction with this hash, if the block has it.
    pub fn find(&self, hash: B256) -> Option<u32> {
        self.0
            .binary_search_by_key(&hash, |(tx_hash, _)| *tx_hash)
            .ok()
            .map(|at| self.0[at].1)
    }
}

/// The `TxIndex` writes for the transactions of `blocks` (number, positions), in key order
/// across all of them: LMDB then inserts into neighbouring pages instead of jumping across
/// the tree for each random hash.
fn tx_index_ops(blocks: &[(u64, &TxPositions)], parallel: bool) -> WriteBatch<'static> {
    let mut entries: Vec<(B256, u64, u32)> = blocks
        .iter()
        .flat_map(|(number, positions)| {
            positions
                .0
                .iter()
                .map(|(hash, index)| (*hash, *number, *index))
        })
        .collect();
    if blocks.len() > 1 {
        entries.sort_unstable_by_key(|(hash, _, _)| *hash);
    }
    encode_all(&entries, parallel, |(hash, number, index), batch| {
        batch.put_parts(
            Table::TxIndex,
            &[hash.as_slice()],
            &[&number.to_be_bytes(), &index.to_be_bytes()],
        );
    })
}

/// Applies the state changes of consecutive blocks (oldest first), ending at block
/// `height`, to the stored state in one transaction, with the `TxIndex` entries of the
/// same blocks (`txs`: number and positions), drops their journaled diffs, and records
/// `height` as flushed.
pub fn flush_state(
    store: &dyn KvStore,
    diffs: &[&StateDiff],
    txs: &[(u64, &TxPositions)],
    height: u64,
    parallel: bool,
) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    for diff in diffs {
        batch.append(state_ops(diff, parallel));
    }
    batch.append(tx_index_ops(txs, parallel));
    for (number, _) in txs {
        batch.delete(Table::StateDiffs, number.to_be_bytes());
    }
    batch.put(Table::Meta, FLUSHED_KEY, height.to_be_bytes());
    store.write(batch)
}

/// Runs `a` and `b`, side by side when `parallel`.
fn both<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if parallel {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

/// Encodes everything a block writes into one batch, on all cores when `parallel`
/// (the serial path is the baseline `stave bench` compares against): the block's data,
/// its receipts, its state and (for an applied state) its transaction index are four
/// tasks, and the state and the index split further.
pub fn encode_block_batch<'a>(input: &BlockToCommit<'a>, parallel: bool) -> WriteBatch<'a> {
    let (mut batch, receipts) = both(
        parallel,
        || encode_all_but_receipts(input, parallel),
        || encode_receipts(input),
    );
    batch.append(receipts);
    batch
}

/// The part of a block's batch that holds its receipts ([`encode_block_batch`] is the rest
/// and this): apart, so that another thread may encode it while the committing thread
/// encodes the rest (see [`commit_block_with`]).
pub fn encode_receipts(input: &BlockToCommit<'_>) -> WriteBatch<'static> {
    let mut batch = WriteBatch::new();
    batch.put_owned(
        Table::Receipts,
        input.block.number().to_be_bytes(),
        encode_stored_receipts(input.receipts),
    );
    batch
}

/// Everything of [`encode_block_batch`] but [`encode_receipts`].
fn encode_all_but_receipts<'a>(input: &BlockToCommit<'a>, parallel: bool) -> WriteBatch<'a> {
    let block = input.block;
    let number = block.number().to_be_bytes();
    let hash = block.hash();
    let data = || {
        let mut batch = WriteBatch::new();
        batch.put(Table::Headers, number, alloy_rlp::encode(block.header()));
        batch.put(Table::BlockNumbers, hash, number);
        batch.put_borrowed(Table::Bodies, number, input.body);
        batch.put(Table::Blooms, number, block_bloom(input.receipts));
        batch.put_owned(Table::Senders, number, input.senders.concat());
        batch
    };
    let state = || match input.state {
        BlockState::Applied(diff) => state_ops(diff, parallel),
        BlockState::Journaled(diff) => {
            let mut batch = WriteBatch::new();
            batch.put_owned(Table::StateDiffs, number, encode_stored_diff(diff));
            batch
        }
    };
    // An applied state goes with the transaction index: both are at the flushed height.
    let index = || match input.state {
        BlockState::Applied(_) => {
            let positions = TxPositions::of(block);
            let mut batch = tx_index_ops(&[(block.number(), &positions)], parallel);
            batch.put(Table::Meta, FLUSHED_KEY, number);
            batch
        }
        BlockState::Journaled(_) => WriteBatch::new(),
    };
    let (mut batch, (state, index)) = both(parallel, data, || both(parallel, state, index));
    batch.append(state);
    batch.append(index);
    batch.put_parts(Table::Meta, &[HEAD_KEY], &[&number, hash.as_slice()]);
    if block.number() == 0 {
        batch.put(Table::Meta, FORMAT_KEY, DATA_FORMAT.to_be_bytes());
    }
    batch
}

/// Commits a block on top of the stored head in one transaction. The block must be the
/// head's successor (or block 0 of an empty store); the head itself or an older stored
/// block is a no-op; a different block at a stored height is an error.
pub fn commit_block(
    store: &dyn KvStore,
    input: &BlockToCommit<'_>,
    parallel: bool,
) -> Result<Committed, StorageError> {
    commit_block_with(store, input, parallel, &mut || encode_receipts(input))
}

/// [`commit_block`], its receipts' part of the batch from `receipts` (what
/// [`encode_receipts`] gives): the node's commit stage encodes that part on its other
/// thread, and `receipts` waits for it once the rest is encoded and put in the write
/// transaction. Not called for a block already stored.
pub fn commit_block_with(
    store: &dyn KvStore,
    input: &BlockToCommit<'_>,
    parallel: bool,
    receipts: &mut dyn FnMut() -> WriteBatch<'static>,
) -> Result<Committed, StorageError> {
    let number = input.block.number();
    let head = head(store)?;
    match head {
        Some((head_number, _)) if number <= head_number => {
            let stored = header(store, number)?
                .ok_or(StorageError::Gap {
                    head: Some(head_number),
                    number,
                })?
                .hash_slow();
            if stored == input.block.hash() {
                return Ok(Committed::AlreadyStored);
            }
            return Err(StorageError::Conflict {
                number,
                stored,
                offered: input.block.hash(),
            });
        }
        Some((head_number, _)) if number != head_number + 1 => {
            return Err(StorageError::Gap {
                head: Some(head_number),
                number,
            });
        }
        None if number != 0 => return Err(StorageError::Gap { head: None, number }),
        _ => {}
    }
    store.write_then(encode_all_but_receipts(input, parallel), receipts)?;
    Ok(Committed::New)
}
