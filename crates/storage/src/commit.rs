//! The commit stage: a block, its receipts and its state diff, encoded into one
//! [`WriteBatch`] (in parallel) and written in one transaction.
//!
//! Input: [`BlockToCommit`]. Output: [`Committed`]. Tables written: all but none read
//! except `Meta` (the head) and `Headers` (idempotence). Committing a block that is already
//! stored is a no-op, because consensus may deliver a finalized block again after a
//! restart.
//!
//! The key of every value written is in `layout` (see docs/storage-layout.md); the
//! values are read back through [`crate::read`].

use alloy_primitives::{Address, B256};
use rayon::prelude::*;
use stave_primitives::{
    AccountDiff, AccountState, Receipt, SealedBlock, StateDiff, block_bloom, encode_stored_diff,
    encode_stored_receipts,
};

use crate::{
    error::StorageError,
    history::PriorValues,
    kv::{KvStore, Table, WriteBatch},
    layout::{FLUSHED_KEY, FORMAT_KEY, HEAD_KEY, storage_key},
    read::{head, header},
};

/// The data format this build writes and reads. 2: the header's state root hashes a
/// block's changes in leaves of units (an account, one slot it wrote, a code hash) rather
/// than of whole accounts, so stored blocks of format 1 whose changes wrote storage no
/// longer verify. Data dirs created before formats were recorded are format 1.
pub const DATA_FORMAT: u32 = 2;

/// Items per rayon task when encoding: enough that a task outweighs its scheduling, few
/// enough that a block's entries spread over every core.
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

/// An account as the `Accounts` table holds it: nonce (8 bytes), balance (32) and code
/// hash (32), big-endian (docs/storage-layout.md).
pub fn account_bytes(info: &AccountState) -> [u8; 72] {
    let mut bytes = [0; 72];
    bytes[..8].copy_from_slice(&info.nonce.to_be_bytes());
    bytes[8..40].copy_from_slice(&info.balance.to_be_bytes::<32>());
    bytes[40..].copy_from_slice(info.code_hash.as_slice());
    bytes
}

fn account_ops((address, change): &(&Address, &AccountDiff), batch: &mut WriteBatch<'static>) {
    if change.storage_cleared {
        batch.delete_prefix(Table::Storage, address);
    }
    match change.info {
        Some(info) => batch.put_parts(
            Table::Accounts,
            &[address.as_slice()],
            &[&account_bytes(&info)],
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
/// same blocks (`txs`: number and positions) and, when the node keeps history, the values
/// those blocks changed (`prior`); drops their journaled diffs, and records `height` as
/// flushed.
pub fn flush_state(
    store: &dyn KvStore,
    diffs: &[&StateDiff],
    txs: &[(u64, &TxPositions)],
    prior: Option<&PriorValues>,
    height: u64,
    parallel: bool,
) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    for diff in diffs {
        batch.append(state_ops(diff, parallel));
    }
    if let Some(prior) = prior {
        batch.append(prior.ops());
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

/// Stores each `(number, certificate)` as that block's finalization certificate, in a
/// write of their own: a certificate is evidence for peers catching up, not part of the
/// block, so one written late or lost in a crash costs only that peers check the block
/// against a descendant's certificate instead.
pub fn store_finalizations(
    store: &dyn KvStore,
    certificates: &[(u64, Vec<u8>)],
) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    for (number, certificate) in certificates {
        batch.put(Table::Finalizations, number.to_be_bytes(), certificate);
    }
    store.write(batch)
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

/// Removes the blocks after `number` and makes `number` the head, in one transaction:
/// their headers, hashes, bodies, receipts, blooms, senders, journaled diffs and
/// certificates (a dev chain going back to a snapshot). Their state must not have been
/// flushed (the caller's state layers check it), so no `TxIndex` entry or stored state
/// belongs to them. Returns how many blocks went; none if `number` is not below the head.
pub fn unwind_blocks(store: &dyn KvStore, number: u64) -> Result<u64, StorageError> {
    let Some((head_number, _)) = head(store)? else {
        return Ok(0);
    };
    let Some(kept) = header(store, number)? else {
        return Err(StorageError::Gap {
            head: Some(head_number),
            number,
        });
    };
    if number >= head_number {
        return Ok(0);
    }
    let mut batch = WriteBatch::new();
    for gone in number + 1..=head_number {
        let key = gone.to_be_bytes();
        if let Some(header) = header(store, gone)? {
            batch.delete(Table::BlockNumbers, header.hash_slow());
        }
        for table in [
            Table::Headers,
            Table::Bodies,
            Table::Receipts,
            Table::Blooms,
            Table::Senders,
            Table::StateDiffs,
            Table::Finalizations,
        ] {
            batch.delete(table, key);
        }
    }
    batch.put_parts(
        Table::Meta,
        &[HEAD_KEY],
        &[&number.to_be_bytes(), kept.hash_slow().as_slice()],
    );
    store.write(batch)?;
    Ok(head_number - number)
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
