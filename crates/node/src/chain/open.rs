//! The open stage: a data dir's chain, its genesis committed, and the state layers of the
//! blocks after the flushed state rebuilt (replayed from their journaled diffs, or
//! executed again).

use std::{sync::Arc, time::Instant};

use alloy_primitives::{B256, keccak256};
use rayon::prelude::*;
use stave_codec::{IndexedList, decode_block, encode_transactions};
use stave_exec::{BlockInput, Mode, ParallelExecutor};
use stave_primitives::{
    ChainSpec, GlobalPoolLeaves, RecoveredTx, SealedBlock, StateDiff, state_root,
};
use stave_state::{StateLayers, StateOptions};
use stave_storage::{
    KvStore, StorageError,
    commit::{BlockState, BlockToCommit, DATA_FORMAT, TxPositions, commit_block},
    read::{data_format, encoded_body, flushed_height, head, header, senders, stored_diff},
};
use stave_verify::{SenderCache, Verifier};

use super::{Chain, Parallelism, encoded_block, execute::ExecuteOn, genesis};
use crate::error::ImportError;

/// How opening a chain rebuilt the state layers of its blocks after the flushed state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Blocks whose journaled state diff was read back and matched their state root.
    pub journaled: u64,
    /// Blocks executed again (no usable journaled diff).
    pub executed: u64,
}

/// What a state layer needs of a stored block: its hash, where its transactions are, and
/// the state changes it made.
struct JournaledBlock {
    hash: B256,
    positions: TxPositions,
    diff: StateDiff,
}

impl JournaledBlock {
    /// Block `number` with its journaled diff, if it has one that decodes and gives the
    /// state root its header claims. Its transactions are only hashed, not decoded: they
    /// were checked when the block was imported.
    fn read(store: &dyn KvStore, number: u64) -> Result<Option<Self>, ImportError> {
        let diff = match stored_diff(store, number) {
            Ok(Some(diff)) => diff,
            Ok(None) => return Ok(None),
            Err(error @ StorageError::Corrupt { .. }) => {
                tracing::warn!(number, %error, "executing the block again");
                return Ok(None);
            }
            Err(error) => return Err(error.into()),
        };
        let header = header(store, number)?.ok_or(ImportError::NoGenesis)?;
        if state_root_after(store, number, &diff)? != header.state_root {
            tracing::warn!(
                number,
                "journaled state diff does not give the block's state root; executing the block again"
            );
            return Ok(None);
        }
        let body = encoded_body(store, number)?.unwrap_or_default();
        let txs = IndexedList::parse(&body)?;
        Ok(Some(Self {
            hash: header.hash_slow(),
            positions: TxPositions::new(txs.iter().map(keccak256)),
            diff,
        }))
    }
}

/// The state root stored block `number` has when its changes are `diff`: its parent's
/// root hashed with `diff`.
fn state_root_after(
    store: &dyn KvStore,
    number: u64,
    diff: &StateDiff,
) -> Result<B256, ImportError> {
    let parent = header(store, number - 1)?.ok_or(ImportError::NoGenesis)?;
    Ok(state_root(parent.state_root, diff, &GlobalPoolLeaves))
}

/// Stored block `number`, decoded.
fn stored_block(store: &dyn KvStore, number: u64) -> Result<SealedBlock, ImportError> {
    let bytes = encoded_block(store, number)?.ok_or(ImportError::NoGenesis)?;
    Ok(decode_block(&bytes)?)
}

impl<'s> Chain<'s> {
    /// Opens the chain in `store`, committing the genesis block if the store is empty
    /// (and checking it is this genesis otherwise). Stages run on `threads` threads.
    pub fn open(
        store: &'s dyn KvStore,
        spec: &ChainSpec,
        threads: usize,
    ) -> Result<Self, ImportError> {
        Self::open_with(store, spec, threads, Parallelism::Parallel, None)
    }

    /// [`Chain::open`] with a choice of parallelism and a sender cache (filled by txpool
    /// admission) that the verify stage consults.
    pub fn open_with(
        store: &'s dyn KvStore,
        spec: &ChainSpec,
        threads: usize,
        parallelism: Parallelism,
        cache: Option<Arc<SenderCache>>,
    ) -> Result<Self, ImportError> {
        let executor = ParallelExecutor::new(threads).map_err(ImportError::Threads)?;
        Self::open_on(
            store,
            spec,
            executor,
            parallelism,
            cache,
            StateOptions::default(),
        )
    }

    /// [`Chain::open_with`] on an executor made before (a clone shares its threads, its
    /// kept buffers and what it learned of earlier blocks), so chains opened one after
    /// another execute on warm threads, as one node's blocks do; stages run on the
    /// executor's count of threads. The state layers are made with `state`: the clean
    /// cache's size, and the history of past blocks' state kept on disk (started, or
    /// removed, as it says).
    pub fn open_on(
        store: &'s dyn KvStore,
        spec: &ChainSpec,
        executor: ParallelExecutor,
        parallelism: Parallelism,
        cache: Option<Arc<SenderCache>>,
        state: StateOptions,
    ) -> Result<Self, ImportError> {
        if let Some(found) = data_format(store)?
            && found != DATA_FORMAT
        {
            return Err(ImportError::DataFormat {
                found,
                expected: DATA_FORMAT,
            });
        }
        let threads = executor.threads();
        if let Some(generated) = spec.generated_state()
            && head(store)?.is_none()
        {
            return Err(ImportError::NotGenerated {
                accounts: generated.accounts(),
            });
        }
        commit_genesis(store, spec)?;
        let (head_number, _) = head(store)?.ok_or(ImportError::NoGenesis)?;
        // Data dirs from before the state layers stored the state with every block.
        let flushed = flushed_height(store)?.unwrap_or(head_number);
        let mut layers = StateLayers::new(store, flushed, state.cache_entries);
        layers.keep_history(state.history)?;
        let mut chain = Self {
            store,
            chain_id: spec.chain_id(),
            parallelism,
            verifier: parking_lot::Mutex::new(Verifier::new(
                spec.chain_id(),
                threads,
                cache.clone(),
            )),
            cache,
            executor,
            layers: Arc::new(layers),
            replayed: Replayed::default(),
            prefetcher: None,
        };
        chain.replay(flushed, head_number)?;
        Ok(chain)
    }

    /// How the last [`Chain::open`] rebuilt the state layers of the blocks after the
    /// flushed state.
    pub fn replayed(&self) -> Replayed {
        self.replayed
    }

    /// Rebuilds the state layers of the blocks after the flushed height (stored; their
    /// state changes were in memory when the node stopped). A block's journaled diff is
    /// enough when it gives the state root its header claims; a block without one (a data
    /// dir from before the journal, or a damaged entry) is executed again.
    fn replay(&mut self, flushed: u64, head_number: u64) -> Result<(), ImportError> {
        if head_number == flushed {
            return Ok(());
        }
        let clock = Instant::now();
        // Journaled blocks need no state to be read and checked: all of them at once.
        let store = self.store;
        let journaled: Vec<Option<JournaledBlock>> = (flushed + 1..=head_number)
            .into_par_iter()
            .map(|number| JournaledBlock::read(store, number))
            .collect::<Result<_, _>>()?;
        for (number, journaled) in (flushed + 1..).zip(journaled) {
            let JournaledBlock {
                hash,
                positions,
                diff,
            } = match journaled {
                Some(journaled) => {
                    self.replayed.journaled += 1;
                    journaled
                }
                None => {
                    self.replayed.executed += 1;
                    self.execute_stored(number)?
                }
            };
            self.layers.push(number, hash, diff, positions)?;
        }
        tracing::info!(
            from = flushed + 1,
            to = head_number,
            journaled = self.replayed.journaled,
            executed = self.replayed.executed,
            elapsed_ms = clock.elapsed().as_millis() as u64,
            "rebuilt the state layers of the blocks after the flushed state"
        );
        Ok(())
    }

    /// Executes stored block `number` again on the layers below it, and checks the state
    /// root its header claims.
    fn execute_stored(&mut self, number: u64) -> Result<JournaledBlock, ImportError> {
        let block = stored_block(self.store, number)?;
        let recovered = self.stored_senders(&block)?;
        let outcome = self.execute(
            BlockInput::new(
                &self.layers.latest(),
                self.env(block.header()),
                &recovered,
                Mode::Validate,
            ),
            ExecuteOn::AllThreads,
        )?;
        let root = state_root_after(self.store, number, &outcome.diff)?;
        if root != block.header().state_root {
            return Err(ImportError::HeaderMismatch {
                number,
                field: "state_root",
                claimed: block.header().state_root.to_string(),
                computed: root.to_string(),
            });
        }
        Ok(JournaledBlock {
            hash: block.hash(),
            positions: TxPositions::of(&block),
            diff: outcome.diff,
        })
    }

    /// A stored block's transactions with the senders recorded when it was imported;
    /// recovered again only for blocks stored without them (data dirs from before the
    /// `Senders` table).
    fn stored_senders(&mut self, block: &SealedBlock) -> Result<Vec<RecoveredTx>, ImportError> {
        let number = block.number();
        let txs = block.transactions().to_vec();
        match senders(self.store, number)? {
            Some(senders) if senders.len() == txs.len() => Ok(txs
                .into_iter()
                .zip(senders)
                .map(|(tx, sender)| RecoveredTx { tx, sender })
                .collect()),
            _ => self
                .verifier
                .get_mut()
                .verify(txs)
                .map_err(|source| ImportError::Verify {
                    number,
                    source: Box::new(source),
                }),
        }
    }
}

/// Commits block 0 of `spec` into `store` with the state it creates; a store that holds
/// it already is left as it is, one that holds another block 0 refuses it.
pub(crate) fn commit_genesis(store: &dyn KvStore, spec: &ChainSpec) -> Result<(), ImportError> {
    let (block, diff) = genesis(spec);
    let body = encode_transactions(&[])?;
    let input = BlockToCommit {
        block: &block,
        body: &body,
        receipts: &[],
        senders: &[],
        state: BlockState::Applied(&diff),
    };
    commit_block(store, &input, true)?;
    Ok(())
}
