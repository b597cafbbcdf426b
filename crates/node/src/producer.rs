//! Block production for a single-validator chain (`stave node --dev`), and the read side
//! RPC queries go through.
//!
//! [`BlockProducer`] takes the txpool's best transactions, runs them through the import
//! pipeline's execute and commit stages ([`Chain::prepare`], [`Chain::commit`]) and tells
//! the pool what was included. [`ChainView`] serves reads through the state layers: the
//! head's state, or any kept block's. A block's state becomes visible in one step, when
//! its layer is pushed, so no query sees half a block.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use alloy_consensus::Transaction as _;
use alloy_primitives::{Address, B256};
use stave_exec::{StateOverride, StateReader};
use stave_primitives::{ChainSpec, Header, Receipt, RecoveredTx, SealedBlock};
use stave_state::{StateLayerError, StateLayers};
use stave_storage::{KvStore, StorageError, read};
use stave_txpool::{DropReason, TxPool};

use crate::{
    chain::{Chain, Incoming, PreparedBlock, SpeculativeBlock},
    error::ImportError,
};

/// Why a state query could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The block's state is no longer (or not yet) kept.
    #[error(transparent)]
    StateNotAvailable(StateLayerError),
    /// No block with this number.
    #[error("block {0} not found")]
    UnknownBlock(u64),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Reads of a chain's state and blocks. Clones read the same chain.
#[derive(Clone)]
pub struct ChainView<'s> {
    store: &'s dyn KvStore,
    spec: ChainSpec,
    layers: Arc<StateLayers<'s>>,
}

impl<'s> ChainView<'s> {
    /// A view of `chain`'s blocks and state.
    pub fn new(chain: &Chain<'s>, spec: ChainSpec) -> Self {
        Self {
            store: chain.store(),
            spec,
            layers: chain.layers(),
        }
    }

    /// The store blocks and receipts are read from.
    pub fn store(&self) -> &'s dyn KvStore {
        self.store
    }

    /// Where the committed transaction with this hash is: block number and index.
    pub fn tx_location(&self, hash: B256) -> Result<Option<(u64, u32)>, StorageError> {
        self.layers.tx_location(hash)
    }

    /// The chain's genesis and rules.
    pub fn spec(&self) -> &ChainSpec {
        &self.spec
    }

    /// The hash of the stored block at `number`, if there is one.
    pub fn hash_at(&self, number: u64) -> Result<Option<B256>, StorageError> {
        Ok(read::header(self.store, number)?.map(|header| header.hash_slow()))
    }

    /// The head's number and hash: the newest block whose state is readable. (A block is
    /// stored a moment before its state layer is added; until then it is not the head.)
    pub fn head(&self) -> Result<(u64, B256), StorageError> {
        let number = self.layers.head();
        let hash =
            read::header(self.store, number)?.map_or(B256::ZERO, |header| header.hash_slow());
        Ok((number, hash))
    }

    /// Runs `query` on the state after block `number` (the head when `None`) and that
    /// block's header.
    pub fn with_state<R>(
        &self,
        number: Option<u64>,
        query: impl FnOnce(&dyn StateReader, &Header) -> R,
    ) -> Result<R, ViewError> {
        let Some(number) = number else {
            let state = self.layers.latest();
            let header = read::header(self.store, state.number())?
                .ok_or(ViewError::UnknownBlock(state.number()))?;
            return Ok(query(&state, &header));
        };
        let header = read::header(self.store, number)?.ok_or(ViewError::UnknownBlock(number))?;
        self.layers
            .with_state_at(number, |state| query(state, &header))
            .map_err(ViewError::StateNotAvailable)
    }
}

/// A block the producer committed.
#[derive(Debug, Clone)]
pub struct Produced {
    /// The block.
    pub block: SealedBlock,
    /// Its receipts.
    pub receipts: Vec<Receipt>,
    /// Selected transactions that failed at execution and left the pool.
    pub dropped: usize,
}

impl Produced {
    /// The block in its wire form (docs/wire-formats.md, block wire form), for peers.
    pub fn encode(&self) -> Result<Vec<u8>, ImportError> {
        let body = stave_codec::encode_transactions(self.block.transactions())?;
        Ok(stave_codec::encode_block_parts(self.block.header(), &body))
    }
}

/// Builds and commits blocks from the txpool.
pub struct BlockProducer<'s> {
    chain: Chain<'s>,
    view: Arc<ChainView<'s>>,
    pool: Arc<TxPool>,
    max_block_txs: usize,
    /// How many times a block is built at most (see [`DEFAULT_FILL_ROUNDS`]).
    fill_rounds: usize,
}

impl<'s> BlockProducer<'s> {
    /// A producer committing through `chain`, publishing through `view`, taking at most
    /// `max_block_txs` transactions per block from `pool`, building each block at most
    /// [`DEFAULT_FILL_ROUNDS`] times.
    pub fn new(
        chain: Chain<'s>,
        view: Arc<ChainView<'s>>,
        pool: Arc<TxPool>,
        max_block_txs: usize,
    ) -> Self {
        Self {
            chain,
            view,
            pool,
            max_block_txs,
            fill_rounds: DEFAULT_FILL_ROUNDS,
        }
    }

    /// Takes at most `max_block_txs` transactions per block from now on (a dev node's
    /// automine makes a block per transaction).
    pub fn set_max_block_txs(&mut self, max_block_txs: usize) {
        self.max_block_txs = max_block_txs;
    }

    /// The most transactions a block takes.
    pub fn max_block_txs(&self) -> usize {
        self.max_block_txs
    }

    /// The same producer building each block at most `rounds` times (the first build
    /// and refills after selected transactions failed); 0 counts as 1.
    pub fn with_fill_rounds(mut self, rounds: usize) -> Self {
        self.fill_rounds = rounds;
        self
    }

    /// Builds the next block from the pool's best transactions (possibly none: a chain
    /// that keeps producing lets clients waiting for "the next block" make progress) and
    /// commits it.
    pub fn produce(&mut self, timestamp: u64) -> Result<Produced, ImportError> {
        self.produce_edited(timestamp, None)
    }

    /// [`BlockProducer::produce`], with `edits` (if any) made to the head's state first
    /// and committed with the block: a dev node's `anvil_setBalance` and the like (see
    /// [`Chain::prepare_edited`]).
    pub fn produce_edited(
        &mut self,
        timestamp: u64,
        edits: Option<&StateOverride>,
    ) -> Result<Produced, ImportError> {
        let chain = &self.chain;
        // The oldest state layers go to disk while this block executes and commits.
        let (prepared, included, dropped) = std::thread::scope(|scope| {
            let flushing = scope.spawn(|| chain.flush());
            let prepared = self.select_and_prepare(&[], timestamp, edits).and_then(
                |(mut prepared, included, dropped)| {
                    chain
                        .commit(&mut prepared)
                        .map(|_| (prepared, included, dropped))
                },
            );
            let flushed = flushing
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            flushed.and(prepared)
        })?;
        settle(&self.pool, &self.view, &included, prepared.block.number());
        Ok(Produced {
            block: prepared.block,
            receipts: prepared.receipts,
            dropped,
        })
    }

    /// Builds a block from the pool on top of `ancestors` (speculative blocks, oldest first,
    /// the first a child of the head), without committing it: a consensus proposal. The
    /// pool skips the transactions the ancestors carry.
    pub fn propose_on(
        &self,
        ancestors: &[&SpeculativeBlock],
        timestamp: u64,
    ) -> Result<SpeculativeBlock, ImportError> {
        let (prepared, included, _) = self.select_and_prepare(ancestors, timestamp, None)?;
        Ok(SpeculativeBlock::new(prepared, included))
    }

    /// Checks a proposed block on top of `ancestors` through the import pipeline (decode,
    /// verify with the sender cache, execute, header check), without committing it; its
    /// timestamp must not be before its parent's nor after `latest_timestamp`.
    pub fn validate_on<'b>(
        &self,
        ancestors: &[&SpeculativeBlock],
        incoming: impl Into<Incoming<'b>>,
        latest_timestamp: u64,
    ) -> Result<SpeculativeBlock, ImportError> {
        self.chain
            .validate_on(ancestors, incoming, latest_timestamp)
    }

    /// Pins the head's state in the layers (see [`stave_state::StateLayers::pin`]), so
    /// the chain can come back to it; returns the head's number.
    pub fn pin_head(&self) -> Result<u64, ImportError> {
        let layers = self.chain.layers();
        let head = layers.head();
        layers.pin(head)?;
        Ok(head)
    }

    /// Releases a pin [`BlockProducer::pin_head`] took of block `number`.
    pub fn unpin(&self, number: u64) {
        self.chain.layers().unpin(number);
    }

    /// Takes the chain back to block `number`, which must be pinned in the state layers
    /// (a dev chain's `evm_revert`), and empties the pool: its transactions were admitted
    /// against state that is gone. Returns how many blocks went.
    pub fn unwind_to(&mut self, number: u64) -> Result<u64, ImportError> {
        let removed = self.chain.unwind_to(number)?;
        self.pool.clear(stave_txpool::DropReason::Reverted);
        Ok(removed)
    }

    /// Stops producing: writes the state the layers hold to disk, so that the next start
    /// re-executes no block.
    pub fn close(self) -> Result<(), ImportError> {
        self.chain.flush_all()
    }

    /// Commits a speculative block once consensus finalized it (a child of the head).
    pub fn commit_final(&mut self, block: SpeculativeBlock) -> Result<Produced, ImportError> {
        let (prepared, included) = self.chain.commit_speculative(block)?;
        self.chain.flush()?;
        settle(&self.pool, &self.view, &included, prepared.block.number());
        Ok(Produced {
            block: prepared.block,
            receipts: prepared.receipts,
            dropped: 0,
        })
    }

    /// Selects the pool's best transactions for a block on top of `ancestors` and executes
    /// them. A selected transaction that fails leaves the pool and the block is built again
    /// from the rest (at most [`BlockProducer::with_fill_rounds`] times), so one sender's
    /// failing transactions do not leave its slots empty. Returns the block, the
    /// transactions it includes and how many failed.
    fn select_and_prepare(
        &self,
        ancestors: &[&SpeculativeBlock],
        timestamp: u64,
        edits: Option<&StateOverride>,
    ) -> Result<(PreparedBlock, Vec<RecoveredTx>, usize), ImportError> {
        let parent = self.chain.parent_of(ancestors)?;
        let mut next_nonces = HashMap::new();
        for tx in ancestors.iter().flat_map(|block| &block.recovered) {
            let next = next_nonces.entry(tx.sender).or_insert(0);
            *next = (*next).max(tx.tx.envelope().nonce() + 1);
        }
        let mut dropped = 0;
        let mut round = 1;
        loop {
            let selected = self.pool.select_after(
                parent.base_fee_per_gas,
                parent.gas_limit,
                self.max_block_txs,
                &next_nonces,
            );
            let timestamp = timestamp.max(parent.timestamp);
            let prepared = match edits {
                Some(edits) => self.chain.prepare_edited(&selected, timestamp, edits)?,
                None => self.chain.prepare_on(ancestors, &selected, timestamp)?,
            };
            let included: HashSet<B256> = prepared
                .block
                .transactions()
                .iter()
                .map(|tx| tx.hash())
                .collect();
            let (included, failed): (Vec<RecoveredTx>, Vec<RecoveredTx>) = selected
                .into_iter()
                .partition(|tx| included.contains(&tx.tx.hash()));
            let failed = first_failures(&failed);
            dropped += failed.len();
            self.pool.discard(&failed, DropReason::FailedExecution);
            if failed.is_empty() || round >= self.fill_rounds {
                return Ok((prepared, included, dropped));
            }
            round += 1;
        }
    }

    /// Imports consecutive blocks other nodes produced through the whole import pipeline
    /// (block N+1 decodes and verifies while block N executes and commits), and removes
    /// their transactions from the pool. `on_block` sees each new block once it is
    /// committed; blocks already stored are skipped. Stops at the first error, with every
    /// block before it committed. Blocks may come with agreed senders ([`Incoming`]).
    pub fn follow_stream<'b>(
        &mut self,
        blocks: impl IntoIterator<Item = impl Into<Incoming<'b>>>,
        mut on_block: impl FnMut(Produced),
    ) -> Result<(), ImportError> {
        let Self {
            chain, view, pool, ..
        } = self;
        chain.import_stream(blocks, |imported| {
            if imported.new {
                settle(pool, view, &imported.recovered, imported.number);
                on_block(Produced {
                    block: imported.block,
                    receipts: imported.receipts,
                    dropped: 0,
                });
            }
        })
    }

    /// The reads of the chain this producer commits to.
    pub fn view(&self) -> &ChainView<'s> {
        &self.view
    }

    /// The head this producer builds on.
    pub fn head(&self) -> Result<(u64, B256), ImportError> {
        self.chain.head()
    }
}

/// How many times a block is built, by default, when selected transactions keep failing:
/// the first build and refills. Each refill re-executes the block, so the bound keeps a
/// producer that meets failing transactions within a few executions per block.
pub const DEFAULT_FILL_ROUNDS: usize = 3;

/// The hashes of the transactions among `failed` that failed on their own: each sender's
/// lowest nonce. Its later ones failed only because that nonce was missing; they stay in
/// the pool, behind the gap, and are not selected again until it is filled.
fn first_failures(failed: &[RecoveredTx]) -> Vec<B256> {
    let mut first: HashMap<Address, (u64, B256)> = HashMap::new();
    for tx in failed {
        let nonce = tx.tx.envelope().nonce();
        let entry = first.entry(tx.sender).or_insert((nonce, tx.tx.hash()));
        if nonce < entry.0 {
            *entry = (nonce, tx.tx.hash());
        }
    }
    let mut hashes: Vec<B256> = first.into_values().map(|(_, hash)| hash).collect();
    hashes.sort_unstable();
    hashes
}

/// Brings `pool` up to date after block `number` included `included`.
fn settle(pool: &TxPool, view: &ChainView<'_>, included: &[RecoveredTx], number: u64) {
    if let Err(error) = pool.on_block(included, &view.layers.latest()) {
        tracing::warn!(%error, "txpool could not read state after a block");
    }
    metrics::counter!("stave_transactions_total").increment(included.len() as u64);
    metrics::gauge!("stave_head").set(number as f64);
}

/// Seconds since the Unix epoch, as block timestamps count them.
pub fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
