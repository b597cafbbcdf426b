//! The chain behind the engine: proposals built from the txpool, proposals verified
//! through the import pipeline, finalized blocks committed.
//!
//! The engine runs on commonware's async runtime; the chain (LMDB, rayon stages) runs on
//! one thread of its own, [`ChainActor::run`]. [`StaveApp`] is the engine's handle
//! (in `handle`): it implements marshal's
//! [`Application`](commonware_consensus::Application) (propose, verify) and the
//! [`Reporter`](commonware_consensus::Reporter) marshal delivers finalized blocks to, and
//! forwards each as a [`Request`] to the actor.
//!
//! A proposal may build on a notarized parent that is not final yet, so the actor keeps
//! every block it executed but has not committed as a [`SpeculativeBlock`]; a child
//! executes on the head's state plus its uncommitted ancestors' layers. Finalization
//! commits the speculative block (or, for a block this node never saw, imports it
//! through the whole pipeline) and drops the speculative blocks at or below the head.

use std::{
    collections::HashMap,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use alloy_primitives::{Address, B256};
use bytes::Bytes;
use commonware_utils::{Acknowledgement, acknowledgement::Exact};
use futures::channel::oneshot;
use stave_node::{BlockProducer, ImportError, Incoming, Produced, SpeculativeBlock, unix_seconds};
use stave_txpool::TxPool;
use tokio::sync::watch;

use crate::{
    block::ConsensusBlock,
    catch_up::{CatchUpSource, Certified, CertifiedBlock},
    epochs::{EpochError, EpochStart, EpochWatch},
    push::FinalizedPusher,
    validator_sets::ValidatorSets,
};

mod handle;

pub use handle::{CATCHING_UP_BLOCKS, FinalizationRecorder, StaveApp};

/// What the engine asks of the chain.
pub enum Request {
    /// Build a block on top of `ancestors` (blocks above the head, oldest first).
    Propose {
        /// The proposal's unfinalized ancestors, oldest first.
        ancestors: Vec<ConsensusBlock>,
        /// Seconds since the Unix epoch.
        timestamp: u64,
        /// The block, or `None` if it could not be built.
        reply: oneshot::Sender<Option<ConsensusBlock>>,
    },
    /// Check `block` on top of `ancestors`.
    Verify {
        /// The proposed block.
        block: ConsensusBlock,
        /// Its unfinalized ancestors, oldest first.
        ancestors: Vec<ConsensusBlock>,
        /// Whether the block is valid.
        reply: oneshot::Sender<bool>,
    },
    /// `block` is final: commit it, then acknowledge.
    Finalized {
        /// The block.
        block: ConsensusBlock,
        /// Marshal's acknowledgement, sent once the block is durable.
        ack: Exact,
    },
    /// Marshal holds a finalization of the block `hash` (it may deliver the block much
    /// later: in height order, once its archives are synced, after every block below it).
    /// If this node executed it and the blocks between its head and it, they are committed
    /// now; a finalized block's ancestors are final too.
    FinalizedTip {
        /// The finalized block's hash.
        hash: B256,
    },
    /// The finalized tip is far above the head (the node lagged): catch up from the
    /// peers' certified runs before answering anything else.
    CatchUp,
    /// The engine holds a finalization certificate of block `hash`: stored with the block
    /// once it is committed, for peers catching up.
    Certificate {
        /// The finalized block's hash.
        hash: B256,
        /// The certificate, as the engine encodes it.
        certificate: Vec<u8>,
    },
    /// The node is stopping: answer nothing more, write the state to disk and return.
    Stop,
}

/// Whether a validator is catching up, as two of its parts see it: [`StaveApp`] when
/// marshal's finalized tip runs far above the blocks it delivered, the [`ChainActor`]
/// while it imports the certified blocks its peers bring. Each sets only its own
/// half, so neither clears what the other saw. The node ignores transaction gossip
/// while either is set.
#[derive(Debug, Default)]
pub struct CatchingUp {
    tip_ahead: AtomicBool,
    importing: AtomicBool,
}

impl CatchingUp {
    /// True while the node is catching up.
    pub fn get(&self) -> bool {
        self.tip_ahead.load(Ordering::Acquire) || self.importing.load(Ordering::Acquire)
    }
}

/// How far ahead of this node's clock a proposal's timestamp may be, in seconds (clocks
/// of validators drift; go-ethereum allows the same).
const MAX_CLOCK_DRIFT: u64 = 15;
/// How old, in seconds, a finalized block this node never executed is when it tells that
/// the node fell behind (it was paused or cut off, not just slow to verify one proposal).
const BEHIND_AFTER: u64 = 3;
/// How long the chain actor waits for a request before it looks again whether its head
/// has stood still for [`BEHIND_AFTER`] seconds (it also looks before every request).
const IDLE_CHECK: Duration = Duration::from_millis(500);
/// How long a starting chain actor keeps asking its peers before it leaves catching up to
/// the engine (while no peer answers: they are still connecting).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// How soon it asks again when no peer answered.
const CATCH_UP_RETRY: Duration = Duration::from_millis(50);
/// Rounds in a row in which certified blocks never arrived after which a chain actor
/// leaves them to marshal (or, on a full node, to the next round).
const FRUITLESS_ROUNDS: u32 = 3;

/// Since when the head has stood still, for a chain actor that waits for requests.
struct Idle {
    head: u64,
    since: Instant,
    period: Duration,
}

impl Idle {
    /// Watches a head now at `head`, standing still counting after `period`.
    fn new(head: u64, period: Duration) -> Self {
        Self {
            head,
            since: Instant::now(),
            period,
        }
    }

    /// True when the head is still `head` after the period (the wait starts over after
    /// each true, so a stalled chain is asked about once per period).
    fn stalled(&mut self, head: u64) -> bool {
        if head != self.head {
            *self = Self::new(head, self.period);
            return false;
        }
        if self.since.elapsed() < self.period {
            return false;
        }
        self.since = Instant::now();
        true
    }
}

/// The chain's side: owns the producer and the speculative blocks, answers [`Request`]s
/// one at a time on the calling thread.
pub struct ChainActor<'s, F> {
    producer: BlockProducer<'s>,
    speculative: HashMap<B256, SpeculativeBlock>,
    head: Arc<AtomicU64>,
    requests: mpsc::Receiver<Request>,
    on_commit: F,
    catch_up: Option<CatchUp>,
    committed_tip: watch::Sender<u64>,
    epochs: Option<EpochWatch<'s>>,
    /// Certificates of blocks not committed yet, by hash (see [`Request::Certificate`]).
    certificates: HashMap<B256, Vec<u8>>,
    /// How long the head stands still before the actor catches up on its own.
    stall_after: Duration,
    /// Where a validator's committed blocks go, with their certificates, to full nodes.
    pusher: Option<FinalizedPusher>,
}

/// Certificates kept for blocks not committed yet; beyond this (the chain far ahead of
/// this node), the oldest-looking are dropped: the blocks come with certified runs then.
const PENDING_CERTIFICATES: usize = 256;

/// Where a chain actor catches up from, and the flag it keeps set meanwhile.
struct CatchUp {
    source: Box<dyn CatchUpSource>,
    catching_up: Arc<CatchingUp>,
}

/// A chain actor over `producer` (whose txpool is `pool`) and the engine's handle on it.
/// A leader whose pool is empty waits up to `idle_wait` for transactions before it
/// proposes; `on_commit` sees every block the actor commits.
pub fn chain_actor<'s, F: FnMut(&Produced)>(
    producer: BlockProducer<'s>,
    pool: Arc<TxPool>,
    idle_wait: Duration,
    on_commit: F,
) -> Result<(ChainActor<'s, F>, StaveApp), ImportError> {
    let (number, _) = producer.head()?;
    let head = Arc::new(AtomicU64::new(number));
    let (sender, requests) = mpsc::channel();
    let (committed_tip, committed_tips) = watch::channel(number);
    Ok((
        ChainActor {
            producer,
            speculative: HashMap::new(),
            head: head.clone(),
            requests,
            on_commit,
            catch_up: None,
            committed_tip,
            epochs: None,
            certificates: HashMap::new(),
            stall_after: Duration::from_secs(BEHIND_AFTER),
            pusher: None,
        },
        StaveApp {
            requests: sender,
            head,
            pool,
            idle_wait,
            tip: Arc::new(AtomicU64::new(number)),
            catching_up: None,
            committed_tips,
        },
    ))
}

impl<F: FnMut(&Produced)> ChainActor<'_, F> {
    /// Takes finalized blocks this node never executed from `source`'s certified runs,
    /// with their senders as a hint, rather than waiting for marshal to deliver the blocks
    /// and recovering every signature. `catching_up` is set while the actor
    /// imports blocks before it answers the engine (see [`StaveApp::with_catching_up`]).
    pub fn with_catch_up(
        mut self,
        source: Box<dyn CatchUpSource>,
        catching_up: Arc<CatchingUp>,
    ) -> Self {
        self.catch_up = Some(CatchUp {
            source,
            catching_up,
        });
        self
    }

    /// Makes the actor catch up from its source whenever its head has stood still for
    /// `period` rather than [`BEHIND_AFTER`] seconds: a full node, which has no engine to
    /// tell it of new blocks, follows the chain so, asking its peers every `period` while
    /// nothing new comes.
    pub fn polling(mut self, period: Duration) -> Self {
        self.stall_after = period;
        self
    }

    /// Pushes each block it commits, once it holds the block's finalization certificate,
    /// through `pusher` (a validator's, to the full nodes among its peers).
    pub fn pushing(mut self, pusher: FinalizedPusher) -> Self {
        self.pusher = Some(pusher);
        self
    }

    /// Publishes the consensus epoch the node votes in, for epochs of `length` blocks: it
    /// moves on each time this actor commits an epoch's last block, once the next epoch's
    /// validators (read from the governance contract then) are recorded in `sets`.
    pub fn with_epochs(
        mut self,
        length: u64,
        sets: Arc<ValidatorSets>,
    ) -> Result<(Self, watch::Receiver<EpochStart>), EpochError<stave_storage::StorageError>> {
        let (epochs, starts) = EpochWatch::new(length, self.producer.view().clone(), sets)?;
        self.epochs = Some(epochs);
        Ok((self, starts))
    }

    /// Answers requests until [`StaveApp::stop_chain`] or until every [`StaveApp`] handle
    /// is dropped, then writes the state layers to disk (a restart re-executes nothing);
    /// stops at the first block that cannot be committed (the node must not go on
    /// without it).
    pub fn run(mut self) -> Result<(), ImportError> {
        let mut queued = self.catch_up()?;
        let mut idle = Idle::new(self.head.load(Ordering::Acquire), self.stall_after);
        let idle_check = IDLE_CHECK.min(self.stall_after);
        loop {
            // The head has not moved for long: the node may have been paused while the
            // others went on (they finalize a block every few hundred ms under load). The
            // engine tells it only block by block, after replaying what it missed (its
            // requests meanwhile are for views long gone); its peers' certified runs bring
            // the blocks at once.
            if queued.is_none() && idle.stalled(self.head.load(Ordering::Acquire)) {
                queued = self.catch_up()?;
            }
            let request = match queued.take() {
                Some(request) => request,
                None => match self.requests.recv_timeout(idle_check) {
                    Ok(request) => request,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
            };
            match request {
                Request::Stop => break,
                Request::Certificate { hash, certificate } => {
                    if self.certificates.len() >= PENDING_CERTIFICATES {
                        self.certificates.clear();
                    }
                    self.certificates.insert(hash, certificate);
                }
                Request::CatchUp => queued = self.catch_up()?,
                Request::FinalizedTip { hash } => self.finalized_tip(hash)?,
                Request::Propose {
                    ancestors,
                    timestamp,
                    reply,
                } => {
                    let block = self.propose(&ancestors, timestamp);
                    if let Err(error) = &block {
                        tracing::warn!(%error, "could not build a proposal");
                    }
                    let _ = reply.send(block.ok());
                }
                Request::Verify {
                    block,
                    ancestors,
                    reply,
                } => {
                    let started = Instant::now();
                    let verdict = self.verify(&ancestors, &block);
                    if let Err(error) = &verdict {
                        tracing::warn!(number = block.number(), hash = %block.hash(), %error, "refused a proposal");
                    }
                    tracing::debug!(
                        number = block.number(),
                        ancestors = ancestors.len(),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "verified a proposal"
                    );
                    let _ = reply.send(verdict.is_ok());
                }
                Request::Finalized { block, ack } => {
                    // Executed here, it is committed now. Committed already: at its
                    // finalized tip, or imported while catching up.
                    self.commit_executed_up_to(block.hash())?;
                    if block.number() <= self.head.load(Ordering::Acquire) {
                        ack.acknowledge();
                        continue;
                    }
                    // A block this node never executed: it is catching up, and marshal
                    // hands over several without waiting for acks. If the block is new
                    // here and old, the node was away (paused, cut off): it takes its
                    // peers' certified runs at once. Then the blocks already
                    // queued go through the pipeline as one stream (those imported
                    // meanwhile are only acknowledged).
                    let behind = block.number() > self.head.load(Ordering::Acquire)
                        && unix_seconds().saturating_sub(block.header().timestamp) >= BEHIND_AFTER;
                    if behind {
                        tracing::debug!(number = block.number(), "an old finalized block arrived");
                        queued = self.catch_up()?;
                    }
                    let mut run = vec![(block, ack)];
                    while queued.is_none()
                        && let Ok(request) = self.requests.try_recv()
                    {
                        match request {
                            Request::Finalized { block, ack }
                                if !self.speculative.contains_key(&block.hash()) =>
                            {
                                run.push((block, ack));
                            }
                            other => {
                                queued = Some(other);
                                break;
                            }
                        }
                    }
                    let (first, blocks, started) = (run[0].0.number(), run.len(), Instant::now());
                    self.follow(run)?;
                    tracing::debug!(
                        first,
                        blocks,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "imported finalized blocks it never executed"
                    );
                }
            }
            self.store_committed_certificates()?;
        }
        self.producer.close()
    }

    /// Stores the pending certificates whose blocks are committed now, in one write.
    fn store_committed_certificates(&mut self) -> Result<(), ImportError> {
        if self.certificates.is_empty() {
            return Ok(());
        }
        let store = self.producer.view().store();
        let mut ready = Vec::new();
        for hash in self.certificates.keys() {
            if let Some(number) = stave_storage::read::block_number(store, *hash)? {
                ready.push((*hash, number));
            }
        }
        if ready.is_empty() {
            return Ok(());
        }
        let mut certificates: Vec<(u64, Vec<u8>)> = ready
            .into_iter()
            .filter_map(|(hash, number)| Some((number, self.certificates.remove(&hash)?)))
            .collect();
        if let Err(error) = stave_storage::commit::store_finalizations(store, &certificates) {
            tracing::warn!(%error, "could not store finalization certificates");
        }
        if let Some(pusher) = &self.pusher {
            certificates.sort_unstable_by_key(|(number, _)| *number);
            for (number, certificate) in &certificates {
                pusher.push(*number, certificate);
            }
        }
        Ok(())
    }

    /// Marshal holds a finalization of block `hash` ([`Request::FinalizedTip`]): commits
    /// the executed blocks up to it and publishes the new head as a committed tip.
    /// Marshal delivers a finalized block only after every block below it and once its
    /// own archives are synced: a validator that rejoined after a catch-up would otherwise
    /// wait for marshal to fetch and hand over every block it imported meanwhile before it
    /// commits the one it just voted for. Marshal's later delivery of a block committed
    /// here is only acknowledged.
    fn finalized_tip(&mut self, hash: B256) -> Result<(), ImportError> {
        if self.commit_executed_up_to(hash)? {
            self.committed_tip
                .send_replace(self.head.load(Ordering::Acquire));
        }
        Ok(())
    }

    /// Commits the executed blocks from the head's child up to the finalized block `hash`,
    /// if this node executed all of them (verified or proposed them); otherwise does
    /// nothing, and they come with marshal's deliveries. True if it committed any.
    fn commit_executed_up_to(&mut self, hash: B256) -> Result<bool, ImportError> {
        let (_, head) = self.producer.head()?;
        let mut executed = Vec::new();
        let mut at = hash;
        while at != head {
            let Some(block) = self.speculative.get(&at) else {
                return Ok(false);
            };
            executed.push(at);
            at = block.prepared.block.header().parent_hash;
        }
        let any = !executed.is_empty();
        for hash in executed.into_iter().rev() {
            let block = self.speculative.remove(&hash).expect("walked through it");
            let produced = self.producer.commit_final(block)?;
            committed(
                &mut self.speculative,
                &self.head,
                self.epochs.as_ref(),
                &mut self.on_commit,
                &produced,
            );
        }
        Ok(any)
    }

    /// Before answering the engine: imports the certified blocks above the head that the
    /// catch-up source brings, round after round until it has none newer. A
    /// restarted validator so catches up while its engine is still restoring its
    /// journals, rather than once marshal delivers the blocks; the engine's requests wait
    /// meanwhile (the views they are for pass without this validator, as they would).
    /// A request that comes while no peer answers ends the catching up (the engine is
    /// ahead of it) and is returned, to be answered first.
    fn catch_up(&mut self) -> Result<Option<Request>, ImportError> {
        let Some(mut catch_up) = self.catch_up.take() else {
            return Ok(None);
        };
        let started = Instant::now();
        let mut imported = 0;
        let mut fruitless = 0;
        // Transactions peers gossip meanwhile are most likely in the blocks it lacks.
        catch_up
            .catching_up
            .importing
            .store(true, Ordering::Release);
        let result = loop {
            let (head, head_hash) = self.producer.head()?;
            match catch_up.source.certified(head + 1, head_hash) {
                Some(None) => break Ok(None),
                Some(Some(run)) => {
                    let before = imported;
                    if let Err(error) =
                        self.import_certified(&*catch_up.source, head + 1, &run, &mut imported)
                    {
                        break Err(error);
                    }
                    // Certified, but never delivered: leave them to marshal.
                    fruitless = if imported == before { fruitless + 1 } else { 0 };
                    if fruitless == FRUITLESS_ROUNDS {
                        break Ok(None);
                    }
                }
                None if started.elapsed() < CATCH_UP_WAIT => {
                    match self.requests.recv_timeout(CATCH_UP_RETRY) {
                        // Marshal learned of a newer finalization: no reason to stop asking.
                        Ok(Request::FinalizedTip { hash }) => {
                            if let Err(error) = self.finalized_tip(hash) {
                                break Err(error);
                            }
                        }
                        Ok(request) => break Ok(Some(request)),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(None),
                    }
                }
                None => break Ok(None),
            }
        };
        catch_up
            .catching_up
            .importing
            .store(false, Ordering::Release);
        // Asks queued meanwhile (marshal's tip rose as blocks came) are answered: it went
        // on until no peer had a certified block newer.
        let result = match result {
            Ok(None) => Ok(self.skip_catch_ups()),
            other => other,
        };
        metrics::counter!("stave_caught_up_blocks_total").increment(imported as u64);
        let elapsed_ms = started.elapsed().as_millis() as u64;
        // A full node follows block by block this way: only a real catch-up is news.
        if imported > 1 {
            tracing::info!(
                blocks = imported,
                elapsed_ms,
                "imported the certified blocks its peers brought"
            );
        } else {
            tracing::debug!(
                blocks = imported,
                elapsed_ms,
                "imported the certified blocks its peers brought"
            );
        }
        self.catch_up = Some(catch_up);
        result
    }

    /// Drops the [`Request::CatchUp`]s at the front of the queue; returns the first other
    /// request, if one is queued.
    fn skip_catch_ups(&self) -> Option<Request> {
        loop {
            match self.requests.try_recv() {
                Ok(Request::CatchUp) => {}
                Ok(other) => return Some(other),
                Err(_) => return None,
            }
        }
    }

    /// Imports the blocks of the certified `run` (consecutive from height `from`, the
    /// head's child) as `source` fetches them: each goes into the pipeline as soon as it
    /// and the ones before it have arrived, up to the first that could not be had. Counts
    /// them in `imported`; stores the run's certificate once its last block is committed,
    /// so this node can serve the run to peers behind it.
    fn import_certified(
        &mut self,
        source: &dyn CatchUpSource,
        from: u64,
        run: &Certified,
        imported: &mut usize,
    ) -> Result<(), ImportError> {
        let blocks: &[CertifiedBlock] = &run.blocks;
        let slots: Vec<OnceLock<Option<Bytes>>> = blocks.iter().map(|_| OnceLock::new()).collect();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // However fetching ends, no slot is left for the import to wait on.
                let _unblock = FillEmpty(&slots);
                source.fetch(from, blocks, &slots);
            });
            let incoming = slots.iter().zip(blocks).map_while(|(slot, block)| {
                let bytes = slot.wait().as_deref()?;
                Some(Incoming {
                    bytes,
                    agreed_senders: Some(&block.senders),
                })
            });
            self.import_final(incoming, || *imported += 1)
        })?;
        let last = blocks.last().map_or(0, |block| block.number);
        if self.head.load(Ordering::Acquire) >= last {
            self.store_finalization(last, &run.certificate);
        }
        Ok(())
    }

    /// Stores `certificate` as block `number`'s finalization certificate. A failure is
    /// only logged: the certificate serves peers, and one missing makes them check the
    /// block against a descendant's.
    fn store_finalization(&self, number: u64, certificate: &[u8]) {
        let store = self.producer.view().store();
        let certificates = [(number, certificate.to_vec())];
        if let Err(error) = stave_storage::commit::store_finalizations(store, &certificates) {
            tracing::warn!(number, %error, "could not store a finalization certificate");
        }
    }

    /// The senders of `blocks` (consecutive, oldest first) the catch-up source's peers
    /// recovered, one entry per block; none without a source.
    fn peer_senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>> {
        match &mut self.catch_up {
            Some(catch_up) if !blocks.is_empty() => catch_up.source.senders(blocks),
            _ => Vec::new(),
        }
    }

    /// Makes sure every block of `chain` (oldest first, the first a child of the head;
    /// blocks already committed are skipped) is executed, and returns their hashes.
    fn execute_ancestors(&mut self, chain: &[ConsensusBlock]) -> Result<Vec<B256>, ImportError> {
        let (head, head_hash) = self.producer.head()?;
        let chain: Vec<&ConsensusBlock> = chain.iter().filter(|b| b.number() > head).collect();
        if let Some(oldest) = chain.first()
            && oldest.header().parent_hash != head_hash
        {
            return Err(ImportError::NotChild {
                number: oldest.number(),
                head_number: head,
                head: head_hash,
            });
        }
        // More than one block to execute: this node is behind, and the older of them are
        // probably final already; its peers may have recovered their senders.
        let missing: Vec<ConsensusBlock> = chain
            .iter()
            .filter(|block| !self.speculative.contains_key(&block.hash()))
            .map(|block| (*block).clone())
            .collect();
        let mut agreed = if missing.len() > 1 {
            self.peer_senders(&missing)
        } else {
            Vec::new()
        }
        .into_iter();
        let mut hashes: Vec<B256> = Vec::with_capacity(chain.len());
        for block in chain {
            // The blocks `missing` holds, in the same order.
            if !self.speculative.contains_key(&block.hash()) {
                let senders = agreed.next().flatten();
                let executed = {
                    let ancestors: Vec<&SpeculativeBlock> =
                        hashes.iter().map(|hash| &self.speculative[hash]).collect();
                    let incoming = Incoming {
                        bytes: block.bytes(),
                        agreed_senders: senders.as_deref(),
                    };
                    self.producer.validate_on(
                        &ancestors,
                        incoming,
                        unix_seconds() + MAX_CLOCK_DRIFT,
                    )?
                };
                self.speculative.insert(block.hash(), executed);
            }
            hashes.push(block.hash());
        }
        Ok(hashes)
    }

    fn propose(
        &mut self,
        ancestors: &[ConsensusBlock],
        timestamp: u64,
    ) -> Result<ConsensusBlock, ImportError> {
        let hashes = self.execute_ancestors(ancestors)?;
        let proposal = {
            let ancestors: Vec<&SpeculativeBlock> =
                hashes.iter().map(|hash| &self.speculative[hash]).collect();
            self.producer.propose_on(&ancestors, timestamp)?
        };
        let bytes = stave_codec::encode_block_parts(
            proposal.prepared.block.header(),
            &proposal.prepared.body,
        );
        let block = ConsensusBlock::new(&proposal.prepared.block, bytes);
        tracing::debug!(
            number = block.number(),
            txs = proposal.recovered.len(),
            "proposed"
        );
        self.speculative.insert(block.hash(), proposal);
        Ok(block)
    }

    fn verify(
        &mut self,
        ancestors: &[ConsensusBlock],
        block: &ConsensusBlock,
    ) -> Result<(), ImportError> {
        let mut chain = ancestors.to_vec();
        chain.push(block.clone());
        self.execute_ancestors(&chain).map(|_| ())
    }

    /// Imports consecutive finalized blocks this node never executed through the whole
    /// pipeline, acknowledging each once it is committed (or was already, after a restart).
    fn follow(&mut self, run: Vec<(ConsensusBlock, Exact)>) -> Result<(), ImportError> {
        let (head_number, _) = self.producer.head()?;
        let (stored, run): (Vec<_>, Vec<_>) = run
            .into_iter()
            .partition(|(block, _)| block.number() <= head_number);
        for (_, ack) in stored {
            ack.acknowledge();
        }
        let (blocks, acks): (Vec<ConsensusBlock>, Vec<Exact>) = run.into_iter().unzip();
        let agreed = self.peer_senders(&blocks);
        let incoming = blocks.iter().enumerate().map(|(i, block)| Incoming {
            bytes: block.bytes(),
            agreed_senders: agreed.get(i).and_then(Option::as_deref),
        });
        let mut acks = acks.into_iter();
        self.import_final(incoming, || {
            if let Some(ack) = acks.next() {
                ack.acknowledge();
            }
        })
    }

    /// Imports finalized blocks (consecutive, oldest first, all above the head) through
    /// the whole pipeline; `each` runs once a block is committed, in order.
    fn import_final<'b>(
        &mut self,
        incoming: impl IntoIterator<Item = Incoming<'b>>,
        mut each: impl FnMut(),
    ) -> Result<(), ImportError> {
        // Every block is above the head, so each is new and reaches the callback in order.
        let Self {
            producer,
            speculative,
            head,
            epochs,
            on_commit,
            ..
        } = self;
        producer.follow_stream(incoming, |produced| {
            committed(speculative, head, epochs.as_ref(), on_commit, &produced);
            each();
        })
    }
}

/// Fills the slots still empty with `None` when dropped.
struct FillEmpty<'a>(&'a [OnceLock<Option<Bytes>>]);

impl Drop for FillEmpty<'_> {
    fn drop(&mut self) {
        for slot in self.0 {
            let _ = slot.set(None);
        }
    }
}

/// Publishes a committed block (the head the engine's handle reads, the epoch it may
/// end, `on_commit`) and drops the speculative blocks at or below it: they can no longer
/// be finalized.
fn committed(
    speculative: &mut HashMap<B256, SpeculativeBlock>,
    head: &AtomicU64,
    epochs: Option<&EpochWatch<'_>>,
    on_commit: &mut impl FnMut(&Produced),
    produced: &Produced,
) {
    let number = produced.block.number();
    speculative.retain(|_, executed| executed.prepared.block.number() > number);
    head.store(number, Ordering::Release);
    if let Some(epochs) = epochs {
        epochs.committed(number, produced.block.hash());
    }
    on_commit(produced);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_counts_as_stalled_once_per_period_it_stands_still() {
        let period = Duration::from_millis(40);
        let mut idle = Idle::new(7, period);
        assert!(!idle.stalled(7), "not before the period");
        std::thread::sleep(period);
        assert!(idle.stalled(7));
        assert!(!idle.stalled(7), "the period starts over");
        std::thread::sleep(period);
        // A head that moved starts the wait over.
        assert!(!idle.stalled(8));
        assert!(!idle.stalled(8));
        std::thread::sleep(period);
        assert!(idle.stalled(8));
    }

    /// A catch-up source with nothing newer, counting how often it is asked.
    struct NothingNewer(Arc<AtomicU64>);

    impl CatchUpSource for NothingNewer {
        fn senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>> {
            vec![None; blocks.len()]
        }

        fn certified(&mut self, _from: u64, _parent: B256) -> Option<Option<Certified>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Some(None)
        }

        fn fetch(&self, _: u64, _: &[CertifiedBlock], _: &[OnceLock<Option<Bytes>>]) {}
    }

    #[test]
    fn catch_up_requests_queued_while_it_caught_up_are_answered_by_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (actor, app) = actor_on_a_new_chain(dir.path(), |_| {});
        let asked = Arc::new(AtomicU64::new(0));
        let actor = actor.with_catch_up(
            Box::new(NothingNewer(asked.clone())),
            Arc::new(CatchingUp::default()),
        );
        for _ in 0..5 {
            app.requests.send(Request::CatchUp).expect("queued");
        }
        app.stop_chain();
        actor.run().expect("runs");
        // Once as it starts, which answers the five queued before it.
        assert_eq!(asked.load(Ordering::Relaxed), 1);
    }

    /// A chain actor and its handle on a new dev chain stored under `dir`.
    fn actor_on_a_new_chain<F: FnMut(&Produced)>(
        dir: &std::path::Path,
        on_commit: F,
    ) -> (ChainActor<'static, F>, StaveApp) {
        let store: &'static stave_storage::LmdbStore = Box::leak(Box::new(
            stave_storage::LmdbStore::open(dir, 64 << 20).expect("opens"),
        ));
        let spec = stave_primitives::ChainSpec::dev(1, 1);
        let cache = Arc::new(stave_verify::SenderCache::new(16));
        let chain = stave_node::Chain::open_with(
            store,
            &spec,
            1,
            stave_node::Parallelism::Serial,
            Some(cache.clone()),
        )
        .expect("opens");
        let view = Arc::new(stave_node::ChainView::new(&chain, spec.clone()));
        let pool = Arc::new(TxPool::new(
            stave_txpool::PoolConfig::new(1, spec.gas_limit()),
            cache,
        ));
        let producer = BlockProducer::new(chain, view, pool.clone(), 10);
        chain_actor(producer, pool, Duration::ZERO, on_commit).expect("actor")
    }

    #[test]
    fn a_finalized_tip_commits_the_executed_blocks_up_to_it_before_marshal_delivers_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let commits = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = commits.clone();
        let (actor, app) = actor_on_a_new_chain(dir.path(), move |produced| {
            recorded.lock().expect("lock").push(produced.block.number());
        });
        let tips = app.committed_tips();
        let actor = std::thread::spawn(move || actor.run());
        let propose =
            |ancestors| futures::executor::block_on(app.proposal_on(ancestors)).expect("a block");
        let one = propose(Vec::new());
        let two = propose(vec![one.clone()]);
        // A tip this node never executed: nothing to commit (marshal delivers it).
        let unknown = B256::repeat_byte(7);
        app.requests
            .send(Request::FinalizedTip { hash: unknown })
            .expect("queued");
        // Block two is final, so block one is too: both are committed, in order.
        app.requests
            .send(Request::FinalizedTip { hash: two.hash() })
            .expect("queued");
        app.stop_chain();
        actor.join().expect("no panic").expect("runs");
        assert_eq!(*commits.lock().expect("lock"), vec![1, 2]);
        assert_eq!(*tips.borrow(), 2);
        assert_eq!(app.head.load(Ordering::Acquire), 2);
    }
}
