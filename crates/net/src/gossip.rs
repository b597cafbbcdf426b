//! Gossip of transactions and blocks over the peer manager, deduplicated by hash.
//!
//! - **Transactions** travel in batches, each an offset-indexed list (docs/wire-formats.md). A
//!   transaction admitted before is dropped; another goes through the node's txpool
//!   admission (which recovers and caches its sender) and, if admitted, on to the other
//!   peers. One refused is looked at again if it comes again: a refusal may not last.
//! - **Blocks** travel compact ([`crate::compact`]): header and short ids. The receiver
//!   rebuilds the body from the transactions gossip has seen, asks the sender for the ones
//!   it lacks (or all of them, if the rebuilt body does not match the header), hands the
//!   block to the node and passes the compact form on.
//! - **Finalized blocks** a validator pushes to the full nodes among its peers as it
//!   commits them ([`FINALIZED`]): the block compact, with its finalization certificate and
//!   senders, rebuilt as a compact block is and handed to the node with both. Nothing is
//!   passed on: each validator pushes to the full nodes it is connected to.
//! - **Catching up**, a node asks a peer for a run of stored headers ending at a block the
//!   peer holds a finalization certificate for, with the senders that peer recovered
//!   ([`CERTIFIED`]), then for the blocks by number ([`BLOCKS`]). Gossip carries the
//!   certificate as opaque bytes: the consensus side checks it.
//!
//! The transactions gossip has sent or admitted stay in a bounded
//! cache by hash: that is what compact blocks are rebuilt from.

use std::{collections::HashSet, sync::Arc, time::Duration};

use alloy_primitives::{Address, B256, keccak256};
use bytes::Bytes;
use parking_lot::Mutex;
use stave_codec::{IndexedList, encode_indexed};
use tokio::sync::{broadcast, mpsc};

use crate::{
    compact::{
        BlockParts, CompactBlock, CompactError, FifoMap, Rebuild, check_block, decode_compact,
    },
    frame::{Frame, ProtocolId},
    peers::{Inbound, NetError, Network, short_id},
    score::{NodeId, Offence},
    tasks::{Task, Tasks},
};

mod serve;

pub use serve::{IN_FLIGHT, RangeRequest, RangeRequestError, RequestError};

/// The group of gossip's modules.
pub const GROUP: i16 = 0;
/// Module of transaction batches.
pub const TXS: u16 = 1;
/// Module of compact blocks.
pub const COMPACT_BLOCK: u16 = 2;
/// Module of requests for some of a block's transactions.
pub const BLOCK_TXS: u16 = 3;
/// Module of requests for whole blocks by number (a node catching up).
pub const BLOCKS: u16 = 4;
/// Module of requests for a certified run of headers and their senders by number (a node
/// catching up).
pub const CERTIFIED: u16 = 5;
/// Module of finalized blocks a validator pushes to the full nodes among its peers.
pub const FINALIZED: u16 = 6;
/// Most blocks one [`BLOCKS`] or [`CERTIFIED`] response carries.
pub const MAX_BLOCKS_PER_REQUEST: u32 = 64;
/// Rebuilt blocks waiting for the node to take them; beyond this, more are dropped
/// (counted) rather than waited on: a node that does not read them (a validator, whose
/// blocks come through consensus) must not pile up tasks holding blocks.
const RECEIVED_BLOCKS: usize = 64;

/// The node's txpool, as gossip sees it.
pub trait TxAdmission: Send + Sync + 'static {
    /// Admits transactions received from a peer (verifying them and caching their senders);
    /// returns, for each, whether it was accepted. Runs on a blocking thread.
    fn admit(&self, txs: &[Bytes]) -> Vec<bool>;

    /// True while the node takes no gossiped transactions (it is catching up: they are
    /// most likely in the blocks it lacks). Gossip then drops what arrives without
    /// remembering it, so a copy sent again later (a full node rebroadcasting what stays
    /// in its pool) is taken. False by default. Runs on a blocking thread.
    fn deferring(&self) -> bool {
        false
    }

    /// The transactions the pool holds, in their wire form, offered to each peer that
    /// connects: a transaction admitted while no peer was connected (a partition, a node
    /// just started) is gossiped only to the peers connected then, and reaches the rest
    /// this way. None by default. Runs on a blocking thread.
    fn held(&self) -> Vec<Bytes> {
        Vec::new()
    }
}

/// The node's committed blocks, as peers catching up ask for them.
pub trait BlockSource: Send + Sync + 'static {
    /// Block `number` in its wire form, if stored. Runs on a blocking thread.
    fn block(&self, number: u64) -> Option<Vec<u8>>;

    /// Block `number`'s header (RLP, as hashed) and its transactions' senders in block
    /// order, as this node recovered them, if stored. Runs on a blocking thread.
    fn header_senders(&self, number: u64) -> Option<HeaderSenders>;

    /// A finalization certificate of block `number` (the consensus engine's encoding), if
    /// this node holds one. Runs on a blocking thread.
    fn finalization(&self, number: u64) -> Option<Vec<u8>>;
}

/// A block's header and its transactions' senders, as a peer stored them: the header is
/// checked by its hash against a certificate; the senders are a hint a node catching up
/// may use instead of recovering them itself (the block's state root refutes wrong ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSenders {
    /// The header's RLP, exactly as hashed.
    pub header: Bytes,
    /// One sender per transaction, in block order.
    pub senders: Vec<Address>,
}

impl HeaderSenders {
    /// The wire form: the header's length (u32 LE), the header, then 20 bytes per sender.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.header.len() + 20 * self.senders.len());
        out.extend_from_slice(&(self.header.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.header);
        for sender in &self.senders {
            out.extend_from_slice(sender.as_slice());
        }
        out
    }

    /// Reads the wire form (a peer's, so hostile); `None` unless it is a length, that many
    /// header bytes and whole senders.
    pub fn decode(bytes: &Bytes) -> Option<Self> {
        let (length, rest) = bytes.split_first_chunk::<4>()?;
        let length = u32::from_le_bytes(*length) as usize;
        let senders = rest.get(length..)?;
        let (senders, partial) = senders.as_chunks::<20>();
        partial.is_empty().then(|| Self {
            header: bytes.slice(4..4 + length),
            senders: senders.iter().copied().map(Address::from).collect(),
        })
    }
}

/// A peer's answer to a [`CERTIFIED`] request: consecutive headers (with senders) from the
/// height asked for, the last of which the certificate names. Nothing in it is checked
/// yet but its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertifiedRun {
    /// The finalization certificate of the last block (opaque here).
    pub certificate: Bytes,
    /// The headers and senders, oldest first; never empty.
    pub blocks: Vec<HeaderSenders>,
}

/// A block pushed as finalized ([`FINALIZED`]): the block compact, with what a full node
/// needs to import it at once. Only the shape is checked here: the certificate is the
/// consensus side's to verify, and the senders are a hint (the state root refutes wrong
/// ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizedPush {
    /// The block's finalization certificate (opaque here); never empty.
    pub certificate: Bytes,
    /// One sender per transaction, in block order.
    pub senders: Vec<Address>,
    /// The block, compact.
    pub compact: CompactBlock,
}

impl FinalizedPush {
    /// The wire form: an offset-indexed list of the certificate, the senders (20 bytes
    /// each) and the compact block.
    pub fn encode(&self) -> Result<Vec<u8>, CompactError> {
        let senders: Vec<u8> = self.senders.iter().flat_map(|sender| sender.0.0).collect();
        let items = [self.certificate.to_vec(), senders, self.compact.encode()];
        Ok(encode_indexed(&items, |item, out| {
            out.extend_from_slice(item)
        })?)
    }

    /// Reads the wire form (a peer's, so hostile) of a block of at most `max_txs`
    /// transactions: exactly three items, a certificate, whole senders and a compact block
    /// with one short id per sender.
    pub fn decode(bytes: &[u8], max_txs: usize) -> Result<Self, GossipError> {
        let list = IndexedList::parse(bytes).map_err(CompactError::from)?;
        let [certificate, senders, compact] = list.iter().collect::<Vec<_>>()[..] else {
            return Err(GossipError::MalformedPush);
        };
        let compact = decode_compact(compact, max_txs)?;
        let (senders, partial) = senders.as_chunks::<20>();
        if certificate.is_empty() || !partial.is_empty() || senders.len() != compact.short_ids.len()
        {
            return Err(GossipError::MalformedPush);
        }
        Ok(Self {
            certificate: Bytes::copy_from_slice(certificate),
            senders: senders.iter().copied().map(Address::from).collect(),
            compact,
        })
    }
}

/// What came with a block pushed as finalized ([`FINALIZED`]), unchecked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    /// The block's finalization certificate.
    pub certificate: Bytes,
    /// The senders the pushing peer recovered, one per transaction.
    pub senders: Vec<Address>,
}

/// Batching and cache sizes, and who may send blocks.
#[derive(Debug, Clone)]
pub struct GossipConfig {
    /// A batch is sent once it holds this many transactions...
    pub batch_txs: usize,
    /// ... or this many bytes ...
    pub batch_bytes: usize,
    /// ... or its first transaction has waited this long.
    pub batch_delay: Duration,
    /// Transactions remembered by hash (for dedup and for rebuilding blocks).
    pub known_txs: usize,
    /// Recent blocks kept to answer peers' requests for their transactions.
    pub kept_blocks: usize,
    /// Most transactions a block may carry.
    pub max_block_txs: usize,
    /// Frames a module's queue holds before dropping.
    pub backlog: usize,
    /// The peers whose compact blocks are taken (the producer, or the validators);
    /// `None` takes them from any peer. A compact block from another peer is dropped and
    /// the peer charged [`Offence::Unauthorized`].
    pub block_sources: Option<HashSet<NodeId>>,
}

impl GossipConfig {
    /// True when a batch of `txs` transactions and `bytes` bytes is to be sent now.
    fn batch_full(&self, txs: usize, bytes: usize) -> bool {
        txs >= self.batch_txs || bytes >= self.batch_bytes
    }
}

impl Default for GossipConfig {
    fn default() -> Self {
        Self {
            batch_txs: 1_000,
            batch_bytes: 256 << 10,
            batch_delay: Duration::from_millis(20),
            known_txs: 200_000,
            kept_blocks: 64,
            max_block_txs: 100_000,
            backlog: 1_024,
            block_sources: None,
        }
    }
}

/// A block rebuilt from a peer's compact block, checked against its transactions root.
#[derive(Debug, Clone)]
pub struct ReceivedBlock {
    /// The peer it came from.
    pub from: NodeId,
    /// The block in its wire form, ready for the import pipeline.
    pub bytes: Bytes,
    /// Its hash.
    pub hash: B256,
    /// Its number.
    pub number: u64,
    /// How many of its transactions had to be fetched from the peer.
    pub fetched: usize,
    /// For a block pushed as finalized, its certificate and senders.
    pub finalized: Option<Finalized>,
}

struct State {
    known: FifoMap<B256, Bytes>,
    blocks: FifoMap<B256, Arc<BlockParts>>,
    seen_blocks: FifoMap<B256, ()>,
    seen_pushes: FifoMap<B256, ()>,
}

struct Inner {
    network: Network,
    config: GossipConfig,
    admission: Arc<dyn TxAdmission>,
    source: Option<Arc<dyn BlockSource>>,
    state: Mutex<State>,
    batches: mpsc::UnboundedSender<(Option<NodeId>, Vec<Bytes>)>,
    blocks_out: mpsc::Sender<ReceivedBlock>,
    /// Its loops and request servers, until handed out.
    tasks: Tasks,
}

/// Gossip on a [`Network`]; clones share it.
#[derive(Clone)]
pub struct Gossip {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gossip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gossip").finish_non_exhaustive()
    }
}

impl Gossip {
    /// Starts gossip on `network`, admitting received transactions through `admission`
    /// and serving peers that catch up from `source` (if any); rebuilt blocks arrive on
    /// the returned channel.
    pub fn start(
        network: Network,
        admission: Arc<dyn TxAdmission>,
        source: Option<Arc<dyn BlockSource>>,
        config: GossipConfig,
    ) -> (Gossip, mpsc::Receiver<ReceivedBlock>) {
        let (batches, batch_queue) = mpsc::unbounded_channel();
        let (blocks_out, blocks) = mpsc::channel(RECEIVED_BLOCKS);
        let connected = network.connected_peers();
        let txs = network.register(GROUP, TXS, config.backlog);
        let compact = network.register(GROUP, COMPACT_BLOCK, config.backlog);
        let requests = network.register(GROUP, BLOCK_TXS, config.backlog);
        let block_requests = network.register(GROUP, BLOCKS, config.backlog);
        let certified_requests = network.register(GROUP, CERTIFIED, config.backlog);
        let pushes = network.register(GROUP, FINALIZED, config.backlog);
        let gossip = Gossip {
            inner: Arc::new(Inner {
                network,
                state: Mutex::new(State {
                    known: FifoMap::new(config.known_txs),
                    blocks: FifoMap::new(config.kept_blocks),
                    seen_blocks: FifoMap::new(config.kept_blocks * 16),
                    seen_pushes: FifoMap::new(config.kept_blocks * 16),
                }),
                config,
                admission,
                source,
                batches,
                blocks_out,
                tasks: Tasks::default(),
            }),
        };
        let tasks = &gossip.inner.tasks;
        tasks.spawn("gossip batcher", gossip.clone().batch_loop(batch_queue));
        tasks.spawn("gossip transaction loop", gossip.clone().tx_loop(txs));
        tasks.spawn("gossip greeter", gossip.clone().greet_loop(connected));
        tasks.spawn("gossip block loop", gossip.clone().compact_loop(compact));
        tasks.spawn("gossip push loop", gossip.clone().push_loop(pushes));
        gossip.serve(requests, block_requests, certified_requests);
        (gossip, blocks)
    }

    /// The long-lived tasks it started and has not handed out yet (see [`Task`]), for a
    /// watcher: each runs as long as the network.
    pub fn take_tasks(&self) -> Vec<Task> {
        self.inner.tasks.take()
    }

    /// Gossips transactions this node admitted itself (from RPC): those not seen before go
    /// out in the next batch.
    pub fn announce_txs(&self, txs: Vec<Bytes>) {
        let fresh = self.remember(txs);
        if !fresh.is_empty() {
            let _ = self.inner.batches.send((None, fresh));
        }
    }

    /// Sends a block (in its wire form) to every peer as a compact block, and keeps it to
    /// answer their requests for its transactions.
    pub fn announce_block(&self, block: &[u8]) -> Result<B256, GossipError> {
        let parts = Arc::new(BlockParts::from_block(block)?);
        let hash = parts.hash;
        {
            let mut state = self.inner.state.lock();
            state.seen_blocks.insert(hash, ());
            for (tx, tx_hash) in parts.txs.iter().zip(&parts.tx_hashes) {
                state.known.insert(*tx_hash, tx.clone());
            }
            state.blocks.insert(hash, parts.clone());
        }
        self.send_compact(&parts, None)?;
        Ok(hash)
    }

    /// Pushes committed block `number`, finalized by `certificate`, to `peers` (the full
    /// nodes among this validator's peers) as a [`FinalizedPush`], and keeps it to answer
    /// their requests for its transactions. A peer whose queue is full misses it (it asks
    /// for the block later). Returns how many peers it was queued for.
    pub async fn push_finalized(
        &self,
        number: u64,
        certificate: Bytes,
        peers: &[NodeId],
    ) -> Result<usize, GossipError> {
        let source = self
            .inner
            .source
            .clone()
            .ok_or(GossipError::NotStored(number))?;
        let stored = tokio::task::spawn_blocking(move || {
            Some((
                source.block(number)?,
                source.header_senders(number)?.senders,
            ))
        })
        .await
        .ok()
        .flatten();
        let (block, senders) = stored.ok_or(GossipError::NotStored(number))?;
        let parts = Arc::new(BlockParts::from_block(&block)?);
        let push = FinalizedPush {
            certificate,
            senders,
            compact: parts.compact(),
        };
        let frame = self.inner.network.frame(
            ProtocolId::request(GROUP, FINALIZED),
            0,
            Bytes::from(push.encode()?),
        );
        self.inner.state.lock().blocks.insert(parts.hash, parts);
        let outcomes = self.inner.network.try_send_each(peers, &frame)?;
        Ok(outcomes.iter().filter(|outcome| outcome.is_ok()).count())
    }

    /// How many transactions gossip remembers.
    pub fn known_txs(&self) -> usize {
        self.inner.state.lock().known.len()
    }

    fn send_compact(&self, parts: &BlockParts, except: Option<NodeId>) -> Result<(), NetError> {
        let network = &self.inner.network;
        let frame = network.frame(
            ProtocolId::request(GROUP, COMPACT_BLOCK),
            0,
            Bytes::from(parts.compact().encode()),
        );
        network.broadcast(&frame, except)?;
        Ok(())
    }

    /// Remembers `txs`; returns the ones not seen before.
    fn remember(&self, txs: Vec<Bytes>) -> Vec<Bytes> {
        let hashes: Vec<B256> = txs.iter().map(keccak256).collect();
        let mut state = self.inner.state.lock();
        txs.into_iter()
            .zip(hashes)
            .filter(|(tx, hash)| state.known.insert(*hash, tx.clone()))
            .map(|(tx, _)| tx)
            .collect()
    }

    async fn batch_loop(self, mut queue: mpsc::UnboundedReceiver<(Option<NodeId>, Vec<Bytes>)>) {
        let config = &self.inner.config;
        // One pending batch per origin, so a batch never goes back to the peer it came from.
        let mut pending: Vec<(Option<NodeId>, Vec<Bytes>, usize)> = Vec::new();
        loop {
            let next = if pending.is_empty() {
                queue.recv().await
            } else {
                match tokio::time::timeout(config.batch_delay, queue.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        for (origin, txs, _) in pending.drain(..) {
                            self.send_batch(origin, &txs);
                        }
                        continue;
                    }
                }
            };
            let Some((origin, txs)) = next else { return };
            let index = match pending.iter().position(|(o, _, _)| *o == origin) {
                Some(index) => index,
                None => {
                    pending.push((origin, Vec::new(), 0));
                    pending.len() - 1
                }
            };
            let (_, batch, bytes) = &mut pending[index];
            for tx in txs {
                *bytes += tx.len();
                batch.push(tx);
                if config.batch_full(batch.len(), *bytes) {
                    self.send_batch(origin, batch);
                    batch.clear();
                    *bytes = 0;
                }
            }
            pending.retain(|(_, batch, _)| !batch.is_empty());
        }
    }

    /// `txs` as one gossip frame; `None` (logged) when they cannot be encoded.
    fn batch_frame(&self, txs: &[Bytes]) -> Option<Frame> {
        match encode_indexed(txs, |tx, out| out.extend_from_slice(tx)) {
            Ok(payload) => Some(self.inner.network.frame(
                ProtocolId::request(GROUP, TXS),
                0,
                Bytes::from(payload),
            )),
            Err(error) => {
                tracing::warn!(%error, "tx batch not encodable");
                None
            }
        }
    }

    fn send_batch(&self, origin: Option<NodeId>, txs: &[Bytes]) {
        let Some(frame) = self.batch_frame(txs) else {
            return;
        };
        if let Err(error) = self.inner.network.broadcast_bulk(&frame, origin) {
            tracing::warn!(%error, "tx batch not sent");
        }
        metrics::counter!("stave_gossip_txs_sent_total").increment(txs.len() as u64);
    }

    /// Offers each peer that connects the transactions the pool holds
    /// ([`TxAdmission::held`]), in batches of the configured size.
    async fn greet_loop(self, mut connected: broadcast::Receiver<NodeId>) {
        loop {
            let peer = match connected.recv().await {
                Ok(peer) => peer,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "connections not greeted with the pool");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let admission = self.inner.admission.clone();
            let Ok(held) = tokio::task::spawn_blocking(move || admission.held()).await else {
                continue;
            };
            let config = &self.inner.config;
            let mut rest = &held[..];
            while !rest.is_empty() {
                let mut bytes = 0;
                let count = rest
                    .iter()
                    .enumerate()
                    .position(|(index, tx)| {
                        bytes += tx.len();
                        config.batch_full(index + 1, bytes)
                    })
                    .map_or(rest.len(), |last| last + 1);
                let (batch, after) = rest.split_at(count);
                rest = after;
                let Some(frame) = self.batch_frame(batch) else {
                    break;
                };
                if let Err(error) = self.inner.network.send_bulk(peer, &frame).await {
                    tracing::debug!(%error, "pool not offered to a new peer");
                    break;
                }
                metrics::counter!("stave_gossip_txs_sent_total").increment(batch.len() as u64);
            }
        }
    }

    async fn tx_loop(self, mut inbound: mpsc::Receiver<Inbound>) {
        while let Some(message) = inbound.recv().await {
            let txs = match IndexedList::parse(&message.frame.payload) {
                Ok(list) => list
                    .iter()
                    .map(|tx| message.frame.payload.slice_ref(tx))
                    .collect::<Vec<_>>(),
                Err(error) => {
                    self.offence(message.peer, Offence::BadMessage, &error);
                    continue;
                }
            };
            metrics::counter!("stave_gossip_txs_received_total").increment(txs.len() as u64);
            let fresh = self.unknown(txs);
            if fresh.is_empty() {
                continue;
            }
            // Remembered only once admission has taken them (this loop takes one message
            // at a time, so no copy slips in between): what a deferring node dropped is
            // looked at when it comes again.
            let admission = self.inner.admission.clone();
            let verdicts = tokio::task::spawn_blocking(move || {
                let verdicts = (!admission.deferring()).then(|| {
                    let txs: Vec<Bytes> = fresh.iter().map(|(_, tx)| tx.clone()).collect();
                    admission.admit(&txs)
                });
                (fresh, verdicts)
            })
            .await;
            let Ok((fresh, verdicts)) = verdicts else {
                continue;
            };
            let Some(verdicts) = verdicts else {
                metrics::counter!("stave_gossip_txs_ignored_total").increment(fresh.len() as u64);
                continue;
            };
            // Only what the pool took is remembered: a refusal may not last (a nonce
            // gap that later transactions close), and a copy sent again (a full node's
            // rebroadcast) is then looked at afresh. Peers forward only what they admitted,
            // so honest peers do not resend what is invalid for good.
            let admitted: Vec<Bytes> = {
                let mut state = self.inner.state.lock();
                fresh
                    .into_iter()
                    .zip(verdicts)
                    .filter(|(_, ok)| *ok)
                    .map(|((hash, tx), _)| {
                        state.known.insert(hash, tx.clone());
                        tx
                    })
                    .collect()
            };
            if !admitted.is_empty() {
                metrics::counter!("stave_gossip_txs_admitted_total")
                    .increment(admitted.len() as u64);
                let _ = self.inner.batches.send((Some(message.peer), admitted));
            }
        }
    }

    /// `txs` this node has not seen yet, with their hashes (not remembered yet).
    fn unknown(&self, txs: Vec<Bytes>) -> Vec<(B256, Bytes)> {
        let hashes: Vec<B256> = txs.iter().map(keccak256).collect();
        let state = self.inner.state.lock();
        hashes
            .into_iter()
            .zip(txs)
            .filter(|(hash, _)| !state.known.contains(hash))
            .collect()
    }

    /// Sends `txs` to every peer again, whether or not gossip sent them before: a full
    /// node's pool rebroadcasts what stays unincluded, since a validator that was catching
    /// up when they first came dropped them.
    pub fn rebroadcast(&self, txs: &[Bytes]) {
        let config = &self.inner.config;
        for batch in txs.chunks(config.batch_txs.max(1)) {
            self.send_batch(None, batch);
        }
    }

    async fn compact_loop(self, mut inbound: mpsc::Receiver<Inbound>) {
        while let Some(message) = inbound.recv().await {
            if let Some(sources) = &self.inner.config.block_sources
                && !sources.contains(&message.peer)
            {
                self.offence(
                    message.peer,
                    Offence::Unauthorized,
                    &"compact block from a peer that may not send blocks",
                );
                continue;
            }
            let compact =
                match decode_compact(&message.frame.payload, self.inner.config.max_block_txs) {
                    Ok(compact) => compact,
                    Err(error) => {
                        self.offence(message.peer, Offence::BadMessage, &error);
                        continue;
                    }
                };
            let rebuild = {
                let mut state = self.inner.state.lock();
                if !state.seen_blocks.insert(compact.hash, ()) {
                    continue;
                }
                Rebuild::new(compact, &state.known)
            };
            // Fetching may take a round trip: do not hold up the next block's arrival.
            tokio::spawn(self.clone().complete(message.peer, rebuild, None));
        }
    }

    /// Takes the first push of each block (every validator pushes it), and rebuilds it as
    /// a compact block is.
    async fn push_loop(self, mut inbound: mpsc::Receiver<Inbound>) {
        while let Some(message) = inbound.recv().await {
            let push = match FinalizedPush::decode(
                &message.frame.payload,
                self.inner.config.max_block_txs,
            ) {
                Ok(push) => push,
                Err(error) => {
                    self.offence(message.peer, Offence::BadMessage, &error);
                    continue;
                }
            };
            let rebuild = {
                let mut state = self.inner.state.lock();
                if !state.seen_pushes.insert(push.compact.hash, ()) {
                    continue;
                }
                Rebuild::new(push.compact, &state.known)
            };
            let finalized = Finalized {
                certificate: push.certificate,
                senders: push.senders,
            };
            tokio::spawn(
                self.clone()
                    .complete(message.peer, rebuild, Some(finalized)),
            );
        }
    }

    /// Fetches what `rebuild` lacks from `peer` (everything, if the body turns out not to
    /// match), then hands the block on, with what came with it if it was pushed as
    /// `finalized`. A compact block is passed on to the other peers; a push is not.
    async fn complete(self, peer: NodeId, mut rebuild: Rebuild, finalized: Option<Finalized>) {
        let mut fetched = 0;
        let mut fetched_all = false;
        let parts = loop {
            let missing = rebuild.missing();
            fetched_all |= missing.len() == rebuild.slots.len();
            if !missing.is_empty() {
                match self.fetch(peer, rebuild.compact.hash, &missing).await {
                    Ok(txs) if txs.len() == missing.len() => {
                        fetched += txs.len();
                        rebuild.fill(&missing, txs);
                    }
                    // The peer no longer keeps the block (it evicted it for newer ones):
                    // no fault of its own; the block comes by number if needed.
                    Ok(txs) if txs.is_empty() => {
                        tracing::debug!(peer = %short_id(&peer), "peer no longer keeps the block");
                        return;
                    }
                    Ok(_) => {
                        self.offence(peer, Offence::BadMessage, &"wrong number of txs");
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(peer = %short_id(&peer), %error, "block txs not fetched");
                        return;
                    }
                }
            }
            match rebuild.clone().finish() {
                Ok(parts) => break parts,
                // A short-id collision filled a slot wrongly: fetch the whole body once.
                Err(CompactError::RootMismatch { .. }) if !fetched_all => {
                    rebuild.slots.iter_mut().for_each(|slot| *slot = None);
                }
                Err(error) => {
                    self.offence(peer, Offence::BadMessage, &error);
                    return;
                }
            }
        };
        let bytes = match parts.encode() {
            Ok(bytes) => Bytes::from(bytes),
            Err(error) => {
                tracing::warn!(%error, "rebuilt block not encodable");
                return;
            }
        };
        metrics::counter!("stave_gossip_blocks_received_total").increment(1);
        metrics::counter!("stave_gossip_block_txs_fetched_total").increment(fetched as u64);
        let parts = Arc::new(parts);
        {
            let mut state = self.inner.state.lock();
            for (tx, hash) in parts.txs.iter().zip(&parts.tx_hashes) {
                state.known.insert(*hash, tx.clone());
            }
            state.blocks.insert(parts.hash, parts.clone());
        }
        if finalized.is_none()
            && let Err(error) = self.send_compact(&parts, Some(peer))
        {
            tracing::warn!(%error, "compact block not passed on");
        }
        let received = ReceivedBlock {
            from: peer,
            bytes,
            hash: parts.hash,
            number: parts.header.number,
            fetched,
            finalized,
        };
        if self.inner.blocks_out.try_send(received).is_err() {
            metrics::counter!("stave_gossip_blocks_dropped_total").increment(1);
        }
    }

    /// Asks `peer` for the transactions at `indexes` of block `hash`.
    async fn fetch(
        &self,
        peer: NodeId,
        hash: B256,
        indexes: &[u32],
    ) -> Result<Vec<Bytes>, GossipError> {
        let mut request = Vec::with_capacity(32 + 4 * indexes.len());
        request.extend_from_slice(hash.as_slice());
        for index in indexes {
            request.extend_from_slice(&index.to_le_bytes());
        }
        self.request_list(peer, BLOCK_TXS, request).await
    }

    /// Sends `request` to `peer`'s `module` and splits the offset-indexed list it answers.
    async fn request_list(
        &self,
        peer: NodeId,
        module: u16,
        request: Vec<u8>,
    ) -> Result<Vec<Bytes>, GossipError> {
        let response = self
            .inner
            .network
            .request(
                peer,
                ProtocolId::request(GROUP, module),
                0,
                Bytes::from(request),
            )
            .await?;
        let list = IndexedList::parse(&response).map_err(CompactError::from)?;
        Ok(list.iter().map(|item| response.slice_ref(item)).collect())
    }

    /// Asks `peer` for up to `count` consecutive blocks from `from` (at most
    /// [`MAX_BLOCKS_PER_REQUEST`]); a peer that has fewer sends fewer. Each block's
    /// framing and transaction count are checked ([`check_block`]) before it is handed on.
    pub async fn fetch_blocks(
        &self,
        peer: NodeId,
        from: u64,
        count: u32,
    ) -> Result<Vec<Bytes>, GossipError> {
        let blocks = self
            .request_list(peer, BLOCKS, range_request(from, count))
            .await?;
        if let Err(error) = blocks.iter().try_for_each(|block| check_block(block)) {
            self.offence(peer, Offence::BadMessage, &error);
            return Err(error.into());
        }
        Ok(blocks)
    }

    /// Asks `peer` for the headers and senders of up to `count` consecutive blocks from
    /// `from` (at most [`MAX_BLOCKS_PER_REQUEST`]), ending at the highest of them it holds
    /// a finalization certificate for: `None` when it holds none there. A malformed answer
    /// is an error and an offence; the certificate and the headers are the caller's to
    /// check.
    pub async fn fetch_certified(
        &self,
        peer: NodeId,
        from: u64,
        count: u32,
    ) -> Result<Option<CertifiedRun>, GossipError> {
        let items = self
            .request_list(peer, CERTIFIED, range_request(from, count))
            .await?;
        let Some((certificate, blocks)) = items.split_first() else {
            return Ok(None);
        };
        let blocks: Option<Vec<HeaderSenders>> = blocks.iter().map(HeaderSenders::decode).collect();
        match blocks {
            Some(blocks) if !blocks.is_empty() && !certificate.is_empty() => {
                Ok(Some(CertifiedRun {
                    certificate: certificate.clone(),
                    blocks,
                }))
            }
            _ => {
                self.offence(peer, Offence::BadMessage, &GossipError::MalformedCertified);
                Err(GossipError::MalformedCertified)
            }
        }
    }

    fn offence(&self, peer: NodeId, offence: Offence, error: &dyn std::fmt::Display) {
        tracing::debug!(peer = %short_id(&peer), %error, "bad gossip message");
        self.inner.network.penalize(peer, offence);
    }
}

/// Why gossip could not handle a block or a fetch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GossipError {
    /// The block or a response does not decode or match.
    #[error(transparent)]
    Compact(#[from] CompactError),
    /// The network refused.
    #[error(transparent)]
    Net(#[from] NetError),
    /// A peer's certified-run answer is not a certificate followed by headers with
    /// whole senders.
    #[error("malformed certified-run response")]
    MalformedCertified,
    /// A pushed finalized block is not a certificate, whole senders and a compact block
    /// with one transaction per sender.
    #[error("malformed finalized-block push")]
    MalformedPush,
    /// The block to push is not stored (or no block source was given).
    #[error("block {0} is not stored")]
    NotStored(u64),
}

/// A request for `count` blocks from `from`.
fn range_request(from: u64, count: u32) -> Vec<u8> {
    RangeRequest { from, count }.encode().to_vec()
}
