//! The import pipeline and block building over one data dir.
//!
//! Import stages, in order, for every received block: decode (offset-indexed body, on all
//! cores, checked against `transactions_root`) → verify (senders on the check queue, the
//! sender cache first) → execute (speculative parallel revm, against committed state) →
//! check the header's gas used, receipts root and state root → commit (one LMDB write).
//! Stages run one block at a time here; overlapping consecutive blocks is issue 8. Each
//! stage runs in a `stage` tracing span and records its wall time in the
//! [`STAGE_SECONDS`] histogram (through the `metrics` facade: a node installs the
//! Prometheus exporter).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_primitives::{Address, B256, keccak256};
use rayon::prelude::*;
use stave_codec::{
    IndexedList, decode_block, encode_block_parts, encode_transactions, split_block,
};
use stave_exec::StateReader;
use stave_exec::{ExecutionOutcome, Mode, ParallelExecutor};
use stave_primitives::{
    Block, ChainSpec, GlobalPoolLeaves, Header, LeafHasher, Receipt, RecoveredTx, SealedBlock,
    SerialLeaves, StateDiff, merkle_root, state_root,
};
use stave_state::{DEFAULT_CLEAN_CACHE_ENTRIES, Prefetcher, SpeculativeLayer, StateLayers};
use stave_storage::{
    KvStore, StorageError,
    commit::{
        BlockState, BlockToCommit, Committed, DATA_FORMAT, TxPositions, commit_block,
        commit_block_with, encode_receipts,
    },
    read::{data_format, encoded_body, flushed_height, head, header, senders, stored_diff},
};
use stave_verify::{SenderCache, Verifier, VerifyError, verify_serial};

use crate::error::ImportError;

/// Block 0 of a chain and the state it creates.
pub fn genesis(spec: &ChainSpec) -> (SealedBlock, StateDiff) {
    let diff = StateDiff::from_genesis(spec);
    let header = Header {
        number: 0,
        timestamp: spec.genesis().timestamp,
        gas_limit: spec.gas_limit(),
        base_fee_per_gas: spec.base_fee(),
        transactions_root: merkle_root(&[]),
        receipts_root: merkle_root(&[]),
        state_root: state_root(B256::ZERO, &diff, &GlobalPoolLeaves),
        extra_data: spec.genesis().extra_data.clone(),
        ..Header::default()
    };
    (
        Block {
            header,
            transactions: Vec::new(),
        }
        .seal(),
        diff,
    )
}

/// How the stages run: the node always runs [`Parallelism::Parallel`]; the serial mode is
/// the baseline `stave bench pipeline` measures against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// Every stage on the calling thread.
    Serial,
    /// Every stage on all its threads.
    Parallel,
}

/// Wall time each stage spent on one block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Decoding the block and checking its transactions root.
    pub decode: Duration,
    /// Recovering senders.
    pub verify: Duration,
    /// Executing and checking the header's roots.
    pub execute: Duration,
    /// Encoding and writing the block, receipts and state.
    pub commit: Duration,
}

impl std::ops::AddAssign for StageTimes {
    fn add_assign(&mut self, other: Self) {
        self.decode += other.decode;
        self.verify += other.verify;
        self.execute += other.execute;
        self.commit += other.commit;
    }
}

/// An executed block and everything the commit stage writes for it.
#[derive(Debug, Clone)]
pub struct PreparedBlock {
    /// The block, sealed.
    pub block: SealedBlock,
    /// Its body: the offset-indexed transaction list.
    pub body: Vec<u8>,
    /// One receipt per transaction.
    pub receipts: Vec<Receipt>,
    /// One sender per transaction.
    pub senders: Vec<Address>,
    /// Its state changes.
    pub diff: StateDiff,
}

impl PreparedBlock {
    /// A received block once executed: its body's bytes as they came, and the senders of
    /// its `recovered` transactions.
    fn received(
        block: SealedBlock,
        body: &[u8],
        outcome: ExecutionOutcome,
        recovered: &[RecoveredTx],
    ) -> Self {
        Self {
            block,
            body: body.to_vec(),
            receipts: outcome.receipts,
            senders: recovered.iter().map(|tx| tx.sender).collect(),
            diff: outcome.diff,
        }
    }

    /// The commit stage's view of it: the block data, and its state journaled for the
    /// state layers that hold it until they flush.
    pub fn input(&self) -> BlockToCommit<'_> {
        BlockToCommit {
            block: &self.block,
            body: &self.body,
            receipts: &self.receipts,
            senders: &self.senders,
            state: BlockState::Journaled(&self.diff),
        }
    }
}

/// A block executed on top of the stored head, or of other speculative blocks, but not
/// committed: a consensus proposal that may still be abandoned. Blocks built on it read its
/// state through its layer; [`Chain::commit_speculative`] commits it once it is final.
#[derive(Clone)]
pub struct SpeculativeBlock {
    /// The block and what the commit stage writes for it (its state is in `layer`).
    pub prepared: PreparedBlock,
    /// Its transactions with their senders, for the txpool once it commits.
    pub recovered: Vec<RecoveredTx>,
    layer: SpeculativeLayer,
}

impl SpeculativeBlock {
    /// Holds `prepared`'s state changes in a layer later blocks can execute on.
    pub fn new(mut prepared: PreparedBlock, recovered: Vec<RecoveredTx>) -> Self {
        let diff = std::mem::take(&mut prepared.diff);
        let layer = SpeculativeLayer::new(prepared.block.number(), prepared.block.hash(), diff);
        Self {
            prepared,
            recovered,
            layer,
        }
    }
}

/// Whether committing a block also flushes the oldest state layers (or something else
/// flushes them, in the background).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    Now,
    Later,
}

/// A block for [`Chain::import_stream`]: its wire form and, for a finalized block a node
/// catches up on, the senders of its transactions as enough validators agree on them.
/// Agreed senders skip recovery; the header's gas used and roots still check the outcome,
/// and a block that fails them is verified again from its signatures.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'b> {
    /// The block's wire form (DESIGN.md §3.2).
    pub bytes: &'b [u8],
    /// One sender per transaction, in block order, if agreed on.
    pub agreed_senders: Option<&'b [Address]>,
}

impl<'b> From<&'b [u8]> for Incoming<'b> {
    fn from(bytes: &'b [u8]) -> Self {
        Self {
            bytes,
            agreed_senders: None,
        }
    }
}

/// A decoded block and, unless it was already stored, its transactions with senders.
struct Received<'b> {
    block: SealedBlock,
    /// Its body's bytes as received: the commit stage stores them as they are.
    body: &'b [u8],
    recovered: Option<Vec<RecoveredTx>>,
    /// Signatures the verify stage recovered (the rest came from the sender cache).
    recoveries: u64,
    /// Whether the senders are agreed ones rather than recovered (see [`Incoming`]).
    agreed: bool,
    times: StageTimes,
}

/// The threads a block's execute stage runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExecuteOn {
    /// The chain's executor, on all its threads: the block runs alone, or beside stages
    /// that leave cores free.
    AllThreads,
    /// The calling thread only: the next block's signature recovery holds every core, and
    /// executing chunks beside it only takes its time. Measured in `stave bench pipeline`
    /// (transfer, cold cache, 5 interleaved runs, the chunk executor): speedup
    /// 1.876-2.059 on one thread, against 1.856-1.981 on all.
    OneThread,
}

impl ExecuteOn {
    /// Where `block` executes when `more` blocks follow it in the pipeline. A block whose
    /// signatures had to be recovered (most of them not in the sender cache) is probably
    /// followed by another like it, whose recovery will hold the cores meanwhile.
    fn beside(block: &Received<'_>, more: bool) -> Self {
        Self::for_counts(block.recoveries, block.block.transactions().len(), more)
    }

    fn for_counts(recoveries: u64, txs: usize, more: bool) -> Self {
        if more && recoveries * 2 > txs as u64 {
            Self::OneThread
        } else {
            Self::AllThreads
        }
    }
}

/// Name of the histogram (seconds per block) each stage records into, labelled
/// `stage` = decode | verify | execute | commit (and prefetch, when it runs).
pub const STAGE_SECONDS: &str = "stave_stage_seconds";

/// Runs `work` as stage `stage` of block `number`: inside a tracing span, with its wall
/// time recorded in the [`STAGE_SECONDS`] histogram and returned.
fn stage<T>(stage: &'static str, number: u64, work: impl FnOnce() -> T) -> (T, Duration) {
    let span = tracing::info_span!("stage", stage, number);
    let _entered = span.enter();
    let clock = Instant::now();
    let result = work();
    let elapsed = clock.elapsed();
    metrics::histogram!(STAGE_SECONDS, "stage" => stage).record(elapsed.as_secs_f64());
    tracing::debug!(elapsed_us = elapsed.as_micros() as u64, "stage done");
    (result, elapsed)
}

/// A data dir's chain: its store, its chain id, and the verify and execute stages.
pub struct Chain<'s> {
    store: &'s dyn KvStore,
    chain_id: u64,
    parallelism: Parallelism,
    verifier: parking_lot::Mutex<Verifier>,
    cache: Option<Arc<SenderCache>>,
    executor: ParallelExecutor,
    layers: Arc<StateLayers<'s>>,
    replayed: Replayed,
}

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

/// What [`Chain::import`] did.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The block's number.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// False when the block was already stored (a redelivery).
    pub new: bool,
    /// Time per stage.
    pub times: StageTimes,
    /// Signatures the parallel verify stage recovered for it (the other senders came from
    /// the sender cache or were agreed, see [`Incoming`]); 0 in serial mode.
    pub recoveries: u64,
    /// The block.
    pub block: SealedBlock,
    /// Its transactions with their senders (none for a redelivery).
    pub recovered: Vec<RecoveredTx>,
    /// Its receipts (none for a redelivery).
    pub receipts: Vec<Receipt>,
}

/// Block `number` of `store` in its wire form (DESIGN.md §3.2): what `stave export` writes
/// and what peers syncing from this node receive.
pub fn encoded_block(store: &dyn KvStore, number: u64) -> Result<Option<Vec<u8>>, ImportError> {
    let Some(header) = header(store, number)? else {
        return Ok(None);
    };
    let body = encoded_body(store, number)?.unwrap_or_default();
    Ok(Some(encode_block_parts(&header, &body)))
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
        Self::open_on(store, spec, executor, parallelism, cache)
    }

    /// [`Chain::open_with`] on an executor made before (a clone shares its threads, its
    /// kept buffers and what it learned of earlier blocks), so chains opened one after
    /// another execute on warm threads, as one node's blocks do; stages run on the
    /// executor's count of threads.
    pub fn open_on(
        store: &'s dyn KvStore,
        spec: &ChainSpec,
        executor: ParallelExecutor,
        parallelism: Parallelism,
        cache: Option<Arc<SenderCache>>,
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
        let (head_number, _) = head(store)?.ok_or(ImportError::NoGenesis)?;
        // Data dirs from before the state layers stored the state with every block.
        let flushed = flushed_height(store)?.unwrap_or(head_number);
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
            layers: Arc::new(StateLayers::new(
                store,
                flushed,
                DEFAULT_CLEAN_CACHE_ENTRIES,
            )),
            replayed: Replayed::default(),
        };
        chain.replay(flushed, head_number)?;
        Ok(chain)
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
            &self.layers.latest(),
            block.header(),
            &recovered,
            Mode::Validate,
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

    /// How the last [`Chain::open`] rebuilt the state layers of the blocks after the
    /// flushed state.
    pub fn replayed(&self) -> Replayed {
        self.replayed
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

    /// The store the chain lives in.
    pub fn store(&self) -> &'s dyn KvStore {
        self.store
    }

    /// The chain's state: diff layers over the flushed state on disk.
    pub fn layers(&self) -> Arc<StateLayers<'s>> {
        self.layers.clone()
    }

    /// The stored head: number and hash.
    pub fn head(&self) -> Result<(u64, B256), ImportError> {
        head(self.store)?.ok_or(ImportError::NoGenesis)
    }

    fn head_header(&self) -> Result<Header, ImportError> {
        let (number, _) = self.head()?;
        header(self.store, number)?.ok_or(ImportError::NoGenesis)
    }

    fn execute(
        &self,
        state: &dyn StateReader,
        header: &Header,
        txs: &[RecoveredTx],
        mode: Mode,
        on: ExecuteOn,
    ) -> Result<ExecutionOutcome, ImportError> {
        if self.on_executor(on) {
            self.executor
                .execute(state, self.chain_id, header, txs, mode)
        } else {
            self.executor
                .execute_one_thread(state, self.chain_id, header, txs, mode)
        }
        .map_err(|source| ImportError::Execute {
            number: header.number,
            source: Box::new(source),
        })
    }

    fn parallel(&self) -> bool {
        self.parallelism == Parallelism::Parallel
    }

    /// Whether a block executed `on` these threads runs on the executor's threads.
    fn on_executor(&self, on: ExecuteOn) -> bool {
        self.parallel() && on == ExecuteOn::AllThreads
    }

    /// Where the roots of a block executed `on` these threads are hashed: on the
    /// executor's threads with it, else on this thread.
    fn leaf_hasher(&self, on: ExecuteOn) -> &dyn LeafHasher {
        if self.on_executor(on) {
            &self.executor
        } else {
            &SerialLeaves
        }
    }

    /// Executes `txs` as the next block (invalid ones are left out) and returns it with
    /// everything the commit stage writes, without committing it.
    pub fn prepare(
        &self,
        txs: &[RecoveredTx],
        timestamp: u64,
    ) -> Result<PreparedBlock, ImportError> {
        self.prepare_on(&[], txs, timestamp)
    }

    /// The parent header and the state a block on top of `ancestors` (speculative blocks,
    /// oldest first, the first a child of the stored head) executes on.
    fn tip(
        &self,
        ancestors: &[&SpeculativeBlock],
    ) -> Result<(Header, stave_state::Snapshot<'_, 's>), ImportError> {
        let state = self.layers.latest();
        if ancestors.is_empty() {
            return Ok((self.head_header()?, state));
        }
        let (head_number, head_hash) = self.head()?;
        let mut parent = (head_number, head_hash);
        for ancestor in ancestors {
            let block = &ancestor.prepared.block;
            if block.number() != parent.0 + 1 || block.header().parent_hash != parent.1 {
                return Err(ImportError::NotChild {
                    number: block.number(),
                    head_number: parent.0,
                    head: parent.1,
                });
            }
            parent = (block.number(), block.hash());
        }
        let layers: Vec<SpeculativeLayer> = ancestors.iter().map(|b| b.layer.clone()).collect();
        Ok((self.parent_of(ancestors)?, state.with_speculative(&layers)))
    }

    /// The header a block on top of `ancestors` (speculative blocks, oldest first; none:
    /// the stored head) has as its parent.
    pub fn parent_of(&self, ancestors: &[&SpeculativeBlock]) -> Result<Header, ImportError> {
        match ancestors.last() {
            Some(newest) => Ok(newest.prepared.block.header().clone()),
            None => self.head_header(),
        }
    }

    /// [`Chain::prepare`] on top of `ancestors`: speculative blocks, oldest first, the
    /// first a child of the stored head (none: on the head itself).
    pub fn prepare_on(
        &self,
        ancestors: &[&SpeculativeBlock],
        txs: &[RecoveredTx],
        timestamp: u64,
    ) -> Result<PreparedBlock, ImportError> {
        let (parent, state) = self.tip(ancestors)?;
        let mut header = Header {
            parent_hash: parent.hash_slow(),
            number: parent.number + 1,
            timestamp,
            gas_limit: parent.gas_limit,
            base_fee_per_gas: parent.base_fee_per_gas,
            ..Header::default()
        };
        let (outcome, _) = stage("execute", header.number, || {
            self.execute(&state, &header, txs, Mode::Build, ExecuteOn::AllThreads)
        });
        let outcome = outcome?;
        let (transactions, senders) = outcome
            .included
            .iter()
            .map(|&i| (txs[i].tx.clone(), txs[i].sender))
            .unzip();
        header.gas_used = outcome.gas_used;
        (header.receipts_root, header.state_root) =
            outcome.roots(parent.state_root, self.leaf_hasher(ExecuteOn::AllThreads));
        let mut block = Block {
            header,
            transactions,
        };
        block.header.transactions_root = block.compute_transactions_root();
        let body = encode_transactions(&block.transactions)?;
        Ok(PreparedBlock {
            block: block.seal(),
            body,
            receipts: outcome.receipts,
            senders,
            diff: outcome.diff,
        })
    }

    /// Decodes, verifies and executes an encoded block on top of `ancestors` (speculative
    /// blocks, oldest first, the first a child of the stored head) and checks its header,
    /// without committing it: a consensus engine's verification of a proposal (or of a
    /// finalized ancestor it lacks, which may come with agreed senders). Its timestamp
    /// must lie between its parent's and `latest_timestamp`.
    pub fn validate_on<'b>(
        &self,
        ancestors: &[&SpeculativeBlock],
        incoming: impl Into<Incoming<'b>>,
        latest_timestamp: u64,
    ) -> Result<SpeculativeBlock, ImportError> {
        let (parent, state) = self.tip(ancestors)?;
        let Received {
            block,
            body,
            recovered,
            agreed,
            mut times,
            ..
        } = self.receive(incoming.into())?;
        let number = block.number();
        if number != parent.number + 1 || block.header().parent_hash != parent.hash_slow() {
            return Err(ImportError::NotChild {
                number,
                head_number: parent.number,
                head: parent.hash_slow(),
            });
        }
        let timestamp = block.header().timestamp;
        if timestamp < parent.timestamp || timestamp > latest_timestamp {
            return Err(ImportError::BadTimestamp {
                number,
                timestamp,
                earliest: parent.timestamp,
                latest: latest_timestamp,
            });
        }
        // A block already stored at this height is final: nothing may replace it.
        let mut recovered = recovered.ok_or(ImportError::NotChild {
            number,
            head_number: parent.number,
            head: parent.hash_slow(),
        })?;
        let (outcome, _) = self.execute_or_recover(
            &state,
            &block,
            &mut recovered,
            agreed,
            &parent,
            ExecuteOn::AllThreads,
            &mut times,
        )?;
        Ok(SpeculativeBlock::new(
            PreparedBlock::received(block, body, outcome, &recovered),
            recovered,
        ))
    }

    /// Commits a speculative block once it is final (it must be a child of the head) and
    /// hands back the block (its state now in the layers) and its transactions.
    pub fn commit_speculative(
        &self,
        block: SpeculativeBlock,
    ) -> Result<(PreparedBlock, Vec<RecoveredTx>), ImportError> {
        let SpeculativeBlock {
            mut prepared,
            recovered,
            layer,
        } = block;
        prepared.diff = layer.into_diff();
        let (committed, _) = stage("commit", prepared.block.number(), || {
            self.commit_parts(&mut prepared, Flush::Later)
        });
        committed.map(|_| (prepared, recovered))
    }

    /// Commits a block [`Chain::prepare`] made (the commit stage), moving its state diff
    /// into the state layers. It does not flush them: call [`Chain::flush`], which may run
    /// on another thread while the next block is prepared and committed.
    pub fn commit(&self, prepared: &mut PreparedBlock) -> Result<Committed, ImportError> {
        let number = prepared.block.number();
        let (committed, _) = stage("commit", number, || {
            self.commit_parts(prepared, Flush::Later)
        });
        committed
    }

    /// Writes the oldest state layers to disk if enough have piled up (see
    /// [`StateLayers::flush`]); safe beside [`Chain::prepare`] and [`Chain::commit`].
    pub fn flush(&self) -> Result<(), ImportError> {
        self.layers.flush(self.parallel())?;
        Ok(())
    }

    /// Writes every state layer to disk, for a node that stops cleanly: its next start
    /// re-executes nothing. Not to be called while blocks are still being committed.
    pub fn flush_all(&self) -> Result<(), ImportError> {
        self.layers.flush_all(self.parallel())?;
        Ok(())
    }

    /// Writes the block with its state journaled, then moves its state diff into the
    /// layers and flushes the oldest ones if enough piled up. A block already stored
    /// changes nothing.
    ///
    /// The stage's two halves are independent until the layer is published: in parallel
    /// the block's layer (bloom filter, account index, transaction positions) is prepared
    /// on the executor's thread while this one encodes and writes the block, and is
    /// published once the block is stored; serially the layer is prepared after the
    /// write, only for a new block.
    ///
    /// In parallel the executor's thread first encodes the receipts' part of the batch
    /// and hands it to this thread, which meanwhile encodes the rest and puts it in the
    /// write transaction (or encodes them too, if the other thread has not started on
    /// them by then): the write's two fsyncs (1–2 ms on the test machine's disk) make
    /// this thread's half the longer, and an ERC-20 block's receipts (a log each) take
    /// ~0.3–0.4 ms to encode. The batch is not encoded on rayon's pool: with the other
    /// core preparing the layer, that put three threads on two cores (`stave bench
    /// commit`: 0.88–1.12x serial, against 1.29–1.71x).
    fn commit_parts(
        &self,
        prepared: &mut PreparedBlock,
        flush: Flush,
    ) -> Result<Committed, ImportError> {
        let block = &prepared.block;
        let input = prepared.input();
        let prepare = || {
            self.layers
                .prepare(block.number(), &prepared.diff, TxPositions::of(block))
        };
        let (committed, layer) = if self.parallel() {
            // Whichever thread comes to the receipts first encodes them: the executor's
            // thread, unless it was woken so late that this one has put the rest already.
            let receipts_taken = AtomicBool::new(false);
            let take_receipts = || !receipts_taken.swap(true, Ordering::AcqRel);
            let (receipts_sender, receipts) = std::sync::mpsc::sync_channel(1);
            let input = &input;
            let (layer, committed) = self.executor.join(
                // The sender moves in, so a panic over there drops it and ends the wait here.
                move || {
                    if take_receipts() {
                        // Buffered: sent even if the writer no longer waits for it.
                        let _ = receipts_sender.send(encode_receipts(input));
                    }
                    prepare()
                },
                || {
                    commit_block_with(self.store, input, false, &mut || {
                        if take_receipts() {
                            return encode_receipts(input);
                        }
                        // An error only if the other thread panicked before it sent them.
                        receipts.recv().unwrap_or_else(|_| encode_receipts(input))
                    })
                },
            );
            (committed, Some(layer))
        } else {
            (commit_block(self.store, &input, false), None)
        };
        if !matches!(committed, Ok(Committed::New)) {
            if let Some(Ok(layer)) = layer {
                self.layers.discard(layer, &prepared.diff);
            }
            return Ok(committed?);
        }
        let layer = match layer {
            Some(layer) => layer?,
            None => prepare()?,
        };
        let hash = block.hash();
        self.layers
            .publish(layer, hash, std::mem::take(&mut prepared.diff))?;
        if flush == Flush::Now {
            self.layers.flush(self.parallel())?;
        }
        Ok(Committed::New)
    }

    /// Builds the next block from `txs` (invalid ones are left out), commits it, and
    /// returns it encoded (DESIGN.md §3.2).
    pub fn build(&mut self, txs: Vec<RecoveredTx>, timestamp: u64) -> Result<Vec<u8>, ImportError> {
        let mut prepared = self.prepare(&txs, timestamp)?;
        self.commit(&mut prepared)?;
        self.flush()?;
        Ok(encode_block_parts(prepared.block.header(), &prepared.body))
    }

    /// Block `number` in its wire form (DESIGN.md §3.2), as `stave export` writes it.
    pub fn encoded_block(&self, number: u64) -> Result<Option<Vec<u8>>, ImportError> {
        encoded_block(self.store, number)
    }

    /// Runs an encoded block through decode, verify, execute and commit. A block already
    /// stored is accepted again without effect.
    pub fn import(&mut self, bytes: &[u8]) -> Result<Imported, ImportError> {
        let received = self.receive(bytes.into())?;
        self.apply(received, Flush::Now, ExecuteOn::AllThreads)
    }

    /// Imports consecutive encoded blocks, overlapping stages across blocks when parallel:
    /// block N+1 is decoded, verified and (with a `prefetcher`) prefetched while block N
    /// executes and commits. Calls `on_block` after each block; stops at the first error
    /// (every block before it is committed).
    pub fn import_stream<'b>(
        &mut self,
        blocks: impl IntoIterator<Item = impl Into<Incoming<'b>>>,
        prefetcher: Option<&Prefetcher>,
        mut on_block: impl FnMut(Imported),
    ) -> Result<(), ImportError> {
        let mut blocks = blocks.into_iter().map(Into::into);
        let Some(first) = blocks.next() else {
            return Ok(());
        };
        if !self.parallel() {
            for incoming in std::iter::once(first).chain(blocks) {
                let received = self.receive(incoming)?;
                on_block(self.apply(received, Flush::Now, ExecuteOn::AllThreads)?);
            }
            return Ok(());
        }
        let this = &*self;
        let mut pending = this.receive(first)?;
        loop {
            let next = blocks.next();
            let on = ExecuteOn::beside(&pending, next.is_some());
            // Set once block N is applied: block N+1 is about to execute and reads for
            // itself what the prefetch has not loaded by then.
            let stop_prefetch = AtomicBool::new(false);
            let (applied, received) = std::thread::scope(|scope| {
                let stop_prefetch = &stop_prefetch;
                let ahead = next.map(|bytes| {
                    scope.spawn(move || {
                        let received = this.receive(bytes)?;
                        if let (Some(prefetcher), Some(recovered)) =
                            (prefetcher, &received.recovered)
                        {
                            let (_, elapsed) = stage("prefetch", received.block.number(), || {
                                prefetcher.prefetch(
                                    &this.layers.latest(),
                                    this.chain_id,
                                    received.block.header(),
                                    recovered,
                                    stop_prefetch,
                                );
                            });
                            tracing::debug!(prefetch_us = elapsed.as_micros() as u64, "prefetched");
                        }
                        Ok::<_, ImportError>(received)
                    })
                });
                // The oldest state layers go to disk in the background.
                let flushing = scope.spawn(|| this.layers.flush(true));
                let applied = this.apply(pending, Flush::Later, on);
                stop_prefetch.store(true, Ordering::Relaxed);
                let flushed = flushing.join();
                (
                    applied.and_then(|imported| match flushed {
                        Ok(result) => result.map(|_| imported).map_err(ImportError::from),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }),
                    ahead.map(|handle| handle.join()),
                )
            });
            on_block(applied?);
            match received {
                None => return Ok(()),
                Some(Ok(received)) => pending = received?,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
            }
        }
    }

    /// The decode and verify stages: they need no state, so they can run ahead of the
    /// blocks before. A block already stored skips verification; agreed senders skip
    /// recovery (the stateless rules still apply).
    fn receive<'b>(&self, incoming: Incoming<'b>) -> Result<Received<'b>, ImportError> {
        let mut times = StageTimes::default();
        let (head_number, _) = self.head()?;
        // Spans and metrics carry the height the block should have; apply checks it.
        let expected = head_number + 1;
        let (decoded, elapsed) = stage("decode", expected, || {
            let parts = split_block(incoming.bytes)?;
            let body = parts.body;
            let block = if self.parallel() {
                parts.seal()
            } else {
                parts.seal_serial()
            };
            block.map(|block| (block, body))
        });
        times.decode = elapsed;
        let (block, body) = decoded?;
        let number = block.number();
        let stored = header(self.store, number)?.map(|h| h.hash_slow());
        if stored == Some(block.hash()) {
            return Ok(Received {
                block,
                body,
                recovered: None,
                recoveries: 0,
                agreed: false,
                times,
            });
        }
        let agreed = incoming
            .agreed_senders
            .filter(|senders| senders.len() == block.transactions().len());
        let ((recovered, recoveries), elapsed) = stage("verify", number, || match agreed {
            Some(senders) => (self.with_senders(&block, senders), 0),
            None => self.recover(&block),
        });
        times.verify = elapsed;
        Ok(Received {
            block,
            body,
            recovered: Some(recovered?),
            recoveries,
            agreed: agreed.is_some(),
            times,
        })
    }

    /// Checks `block`'s transactions and recovers their senders (the sender cache
    /// first); also returns how many signatures it recovered.
    fn recover(&self, block: &SealedBlock) -> (Result<Vec<RecoveredTx>, ImportError>, u64) {
        let txs = block.transactions().to_vec();
        let mut recoveries = 0;
        let recovered = if self.parallel() {
            let mut verifier = self.verifier.lock();
            let before = verifier.recoveries();
            let recovered = verifier.verify(txs);
            recoveries = verifier.recoveries() - before;
            recovered
        } else {
            verify_serial(txs, self.chain_id, self.cache.as_deref())
        };
        let recovered = recovered.map_err(|source| ImportError::Verify {
            number: block.number(),
            source: Box::new(source),
        });
        (recovered, recoveries)
    }

    /// `block`'s transactions with `senders` (one each), checked against the stateless
    /// rules but not recovered.
    fn with_senders(
        &self,
        block: &SealedBlock,
        senders: &[Address],
    ) -> Result<Vec<RecoveredTx>, ImportError> {
        metrics::counter!("stave_agreed_senders_total").increment(senders.len() as u64);
        block
            .transactions()
            .iter()
            .zip(senders)
            .enumerate()
            .map(|(index, (tx, &sender))| {
                tx.check_stateless(Some(self.chain_id))
                    .map_err(|source| ImportError::Verify {
                        number: block.number(),
                        source: Box::new(VerifyError::Invalid { index, source }),
                    })?;
                Ok(RecoveredTx {
                    tx: tx.clone(),
                    sender,
                })
            })
            .collect()
    }

    /// Executes `block` on `state` (the state after `parent`) and checks the header's gas
    /// used, receipts root and state root against the outcome.
    fn execute_checked(
        &self,
        state: &dyn StateReader,
        block: &SealedBlock,
        recovered: &[RecoveredTx],
        parent: &Header,
        on: ExecuteOn,
    ) -> Result<ExecutionOutcome, ImportError> {
        let outcome = self.execute(state, block.header(), recovered, Mode::Validate, on)?;
        let header = block.header();
        let (receipts_root, state_root) = outcome.roots(parent.state_root, self.leaf_hasher(on));
        let claims = [
            (
                "gas_used",
                header.gas_used.to_string(),
                outcome.gas_used.to_string(),
            ),
            (
                "receipts_root",
                header.receipts_root.to_string(),
                receipts_root.to_string(),
            ),
            (
                "state_root",
                header.state_root.to_string(),
                state_root.to_string(),
            ),
        ];
        match claims
            .into_iter()
            .find(|(_, claimed, computed)| claimed != computed)
        {
            Some((field, claimed, computed)) => Err(ImportError::HeaderMismatch {
                number: header.number,
                field,
                claimed,
                computed,
            }),
            None => Ok(outcome),
        }
    }

    /// [`Chain::execute_checked`], timed into `times`. Senders that were agreed rather than
    /// recovered (see [`Incoming`]) and fail the header's checks give way to the
    /// signatures: they are recovered into `recovered` and the block runs once more. Also
    /// returns how many signatures that recovered.
    #[allow(clippy::too_many_arguments)]
    fn execute_or_recover(
        &self,
        state: &dyn StateReader,
        block: &SealedBlock,
        recovered: &mut Vec<RecoveredTx>,
        agreed: bool,
        parent: &Header,
        on: ExecuteOn,
        times: &mut StageTimes,
    ) -> Result<(ExecutionOutcome, u64), ImportError> {
        let number = block.number();
        let execute = |recovered: &[RecoveredTx]| {
            stage("execute", number, || {
                self.execute_checked(state, block, recovered, parent, on)
            })
        };
        let (outcome, elapsed) = execute(recovered);
        times.execute += elapsed;
        match outcome {
            Err(error) if agreed => {
                // The validators who agreed were wrong: signatures decide, not them.
                tracing::warn!(number, %error, "agreed senders do not hold; recovering them");
                metrics::counter!("stave_agreed_senders_refuted_total").increment(1);
                let ((verified, recoveries), elapsed) =
                    stage("verify", number, || self.recover(block));
                times.verify += elapsed;
                *recovered = verified?;
                let (outcome, elapsed) = execute(recovered);
                times.execute += elapsed;
                Ok((outcome?, recoveries))
            }
            outcome => Ok((outcome?, 0)),
        }
    }

    /// The execute and commit stages of a received block, on top of the stored head.
    fn apply(
        &self,
        received: Received<'_>,
        flush: Flush,
        on: ExecuteOn,
    ) -> Result<Imported, ImportError> {
        let Received {
            block,
            body,
            recovered,
            mut recoveries,
            agreed,
            mut times,
        } = received;
        let number = block.number();
        let Some(mut recovered) = recovered else {
            return Ok(Imported {
                number,
                hash: block.hash(),
                new: false,
                times,
                recoveries,
                block,
                recovered: Vec::new(),
                receipts: Vec::new(),
            });
        };
        let (head_number, head_hash) = self.head()?;
        if number != head_number + 1 || block.header().parent_hash != head_hash {
            return Err(ImportError::NotChild {
                number,
                head_number,
                head: head_hash,
            });
        }
        let parent = header(self.store, head_number)?.ok_or(ImportError::NoGenesis)?;
        let (outcome, recovered_now) = self.execute_or_recover(
            &self.layers.latest(),
            &block,
            &mut recovered,
            agreed,
            &parent,
            on,
            &mut times,
        )?;
        recoveries += recovered_now;

        let (committed, elapsed) = stage("commit", number, || {
            let mut prepared = PreparedBlock::received(block, body, outcome, &recovered);
            let committed = self.commit_parts(&mut prepared, flush)?;
            Ok::<_, ImportError>((committed, prepared))
        });
        let (committed, prepared) = committed?;
        times.commit = elapsed;
        Ok(Imported {
            number,
            hash: prepared.block.hash(),
            new: committed == Committed::New,
            times,
            recoveries,
            block: prepared.block,
            recovered,
            receipts: prepared.receipts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ExecuteOn;

    #[test]
    fn execution_leaves_the_cores_to_recovery_only_while_another_block_recovers_beside_it() {
        use ExecuteOn::{AllThreads, OneThread};
        // (signatures recovered, transactions, another block follows) → threads.
        let cases = [
            // Senders recovered, another block follows: one thread.
            ((2_500, 2_500, true), OneThread),
            ((1_251, 2_500, true), OneThread),
            // The last block runs alone.
            ((2_500, 2_500, false), AllThreads),
            // Senders mostly from the cache: the next block's verify leaves cores free.
            ((1_250, 2_500, true), AllThreads),
            ((0, 2_500, true), AllThreads),
            ((0, 0, true), AllThreads),
        ];
        for ((recoveries, txs, more), expected) in cases {
            assert_eq!(
                ExecuteOn::for_counts(recoveries, txs, more),
                expected,
                "{recoveries} of {txs} recovered, more: {more}"
            );
        }
    }
}
