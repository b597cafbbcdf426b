//! Block production for a single-validator chain (`stave node --dev`), and the read side
//! RPC queries go through.
//!
//! [`BlockProducer`] takes the txpool's best transactions, runs them through the import
//! pipeline's execute and commit stages ([`Chain::prepare`], [`Chain::commit`]), records
//! the block's undo layer, and tells the pool what was included. [`ChainView`] serves
//! reads: the latest state, or an earlier block's through the undo layers; a commit waits
//! for reads in progress, so no query sees half a block.

use std::sync::Arc;

use alloy_primitives::B256;
use parking_lot::RwLock;
use stave_exec::StateReader;
use stave_primitives::{ChainSpec, Header, Receipt, RecoveredTx, SealedBlock};
use stave_storage::{KvStore, StorageError, commit};
use stave_txpool::{DropReason, TxPool};

use crate::{
    chain::Chain,
    disk_state::DiskState,
    error::ImportError,
    history::{HISTORY_DEPTH, HistoricalState, StateHistory, UndoLayer},
};

/// Why a state query could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The block exists but its state is no longer (or not yet) kept.
    #[error(
        "state not available for block {number}: only the last {depth} blocks' states are kept"
    )]
    StateNotAvailable {
        /// The block asked for.
        number: u64,
        /// How many recent blocks are kept.
        depth: usize,
    },
    /// No block with this number.
    #[error("block {0} not found")]
    UnknownBlock(u64),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Reads of a chain's state and blocks, consistent with the commits of its producer.
pub struct ChainView<'s> {
    store: &'s dyn KvStore,
    spec: ChainSpec,
    history: RwLock<StateHistory>,
}

impl<'s> ChainView<'s> {
    /// A view of the chain in `store`, keeping the last [`HISTORY_DEPTH`] blocks' states.
    pub fn new(store: &'s dyn KvStore, spec: ChainSpec) -> Self {
        Self {
            store,
            spec,
            history: RwLock::new(StateHistory::new(HISTORY_DEPTH)),
        }
    }

    /// The store blocks and receipts are read from.
    pub fn store(&self) -> &'s dyn KvStore {
        self.store
    }

    /// The chain's genesis and rules.
    pub fn spec(&self) -> &ChainSpec {
        &self.spec
    }

    /// The head's number and hash.
    pub fn head(&self) -> Result<(u64, B256), StorageError> {
        Ok(commit::head(self.store)?.unwrap_or_default())
    }

    /// Runs `query` on the state after block `number` (the head when `None`) and that
    /// block's header. Commits wait until it returns.
    pub fn with_state<R>(
        &self,
        number: Option<u64>,
        query: impl FnOnce(&dyn StateReader, &Header) -> R,
    ) -> Result<R, ViewError> {
        let history = self.history.read();
        let (head, _) = self.head()?;
        let number = number.unwrap_or(head);
        let header = commit::header(self.store, number)?.ok_or(ViewError::UnknownBlock(number))?;
        let layers = history
            .layers_after(number, head)
            .ok_or(ViewError::StateNotAvailable {
                number,
                depth: HISTORY_DEPTH,
            })?;
        let current = DiskState::new(self.store);
        let state = HistoricalState::new(&current, layers);
        Ok(query(&state, &header))
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

/// Builds and commits blocks from the txpool.
pub struct BlockProducer<'s> {
    chain: Chain<'s>,
    view: Arc<ChainView<'s>>,
    pool: Arc<TxPool>,
    max_block_txs: usize,
}

impl<'s> BlockProducer<'s> {
    /// A producer committing through `chain`, publishing through `view`, taking at most
    /// `max_block_txs` transactions per block from `pool`.
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
        }
    }

    /// Builds the next block from the pool's best transactions (possibly none: a chain
    /// that keeps producing lets clients waiting for "the next block" make progress) and
    /// commits it.
    pub fn produce(&mut self, timestamp: u64) -> Result<Produced, ImportError> {
        let store = self.view.store;
        let (head, _) = self.chain.head()?;
        let parent = commit::header(store, head)?.ok_or(ImportError::NoGenesis)?;
        let selected = self.pool.select(
            parent.base_fee_per_gas,
            parent.gas_limit,
            self.max_block_txs,
        );
        let prepared = self
            .chain
            .prepare(&selected, timestamp.max(parent.timestamp))?;
        let disk = DiskState::new(store);
        let undo = UndoLayer::capture(&disk, prepared.block.number(), &prepared.diff).map_err(
            |source| ImportError::Execute {
                number: prepared.block.number(),
                source: Box::new(source.into()),
            },
        )?;
        {
            let mut history = self.view.history.write();
            self.chain.commit(&prepared)?;
            history.push(undo);
        }
        let included: std::collections::HashSet<B256> = prepared
            .block
            .transactions()
            .iter()
            .map(|tx| tx.hash())
            .collect();
        let (included, failed): (Vec<RecoveredTx>, Vec<RecoveredTx>) = selected
            .into_iter()
            .partition(|tx| included.contains(&tx.tx.hash()));
        let failed: Vec<B256> = failed.iter().map(|tx| tx.tx.hash()).collect();
        self.pool.discard(&failed, DropReason::FailedExecution);
        if let Err(error) = self.pool.on_block(&included, &disk) {
            tracing::warn!(%error, "txpool could not read state after a block");
        }
        metrics::counter!("stave_transactions_total").increment(included.len() as u64);
        metrics::gauge!("stave_head").set(prepared.block.number() as f64);
        Ok(Produced {
            block: prepared.block,
            receipts: prepared.receipts,
            dropped: failed.len(),
        })
    }
}
