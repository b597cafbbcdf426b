//! The consensus channels on Stave's own network: adapters from commonware-p2p's traits
//! (`Sender` through [`LimitedSender`]/[`CheckedSender`], [`Receiver`], [`Provider`],
//! [`Blocker`](commonware_p2p::Blocker)) to [`stave_net::Network`], which the node's tx gossip shares.
//!
//! A peer is a validator exactly when its TLS certificate holds that validator's ed25519
//! consensus key: its node id is then [`ed25519_node_id`] of the key, so the validator set
//! alone says which connections speak for which validator. A consensus message from any
//! other node (even one with a certificate from the chain's CA) is dropped and the node
//! charged an [`Offence::Unauthorized`]. The set changes with the consensus epochs
//! ([`ConsensusNet::set_validators`]); senders and receivers read the current one.
//!
//! Each commonware channel `c` is module [`MODULE_BASE`]` + c` of group [`GROUP`]. Sends
//! never wait: the engine's senders are synchronous, so frames are queued with
//! [`Network::try_send_each`] and a peer whose queue is full misses them (as with
//! commonware's own network, delivery is best effort; the engine retries what matters).

use std::{
    collections::{HashMap, VecDeque},
    num::NonZeroUsize,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use commonware_actor::{Feedback, Unreliable};
use commonware_cryptography::ed25519::PublicKey;
use commonware_p2p::{
    BlockedSubscription, Channel, CheckedSender, LimitedSender, Message, PeerSetSubscription,
    PeerSetUpdate, Provider, Receiver, Recipients, TrackedPeers,
};
use commonware_runtime::{Clock, IoBuf, IoBufs};
use commonware_utils::{
    channel::{mpsc, ring},
    ordered::Set,
    sync::Mutex,
};
use stave_net::{Inbound, NetError, Network, NodeId, Offence, ProtocolId, ed25519_node_id};

/// The stave-net group of every consensus channel. Gossip uses group
/// [`stave_net::gossip::GROUP`] (0), so consensus frames never reach gossip's handlers.
pub const GROUP: i16 = 1;
/// Module of channel 0; channel `c` is module `MODULE_BASE + c`. Kept apart from gossip's
/// modules (1–5) too, because the per-module byte counters are labelled by module alone.
pub const MODULE_BASE: u16 = 0x10;
/// Channels a [`ConsensusNet`] can carry (modules `0x10..0x20`); the engine uses 0–4.
pub const MAX_CHANNELS: u64 = 16;
/// Largest message on a consensus channel: a whole block (marshal's broadcast and
/// backfill carry them) and some framing.
pub const MAX_MESSAGE_BYTES: usize = crate::block::MAX_BLOCK_BYTES + 64 * 1024;
/// Frames a channel buffers before the network drops arrivals (and counts them).
pub const BACKLOG: usize = 1024;
/// Bytes of one validator's messages a channel holds for the engine; beyond it, that
/// validator's arrivals are dropped (and counted). A frame count alone would let one
/// validator pin [`BACKLOG`] block-sized messages; this leaves room for a few blocks.
pub const BACKLOG_BYTES: usize = 4 * MAX_MESSAGE_BYTES;
/// How often the blocked set is re-read, so that peers whose ban ended are reported
/// unblocked.
const BAN_POLL: Duration = Duration::from_secs(1);

/// Why the consensus channels could not be set up on a network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The validator set names a key (these 32 bytes) twice.
    #[error("validator {} is listed twice", hex::encode(.0))]
    DuplicateValidator([u8; 32]),
    /// The network's frame limits do not admit a block-sized consensus message.
    #[error(
        "the network's frame limits (max_payload {max_payload}, max_frame {max_frame}) do not admit {MAX_MESSAGE_BYTES}-byte consensus messages"
    )]
    FrameLimits {
        /// The network's largest payload.
        max_payload: usize,
        /// The network's largest frame.
        max_frame: usize,
    },
    /// A channel beyond [`MAX_CHANNELS`].
    #[error("consensus channel {0} is out of range (at most {MAX_CHANNELS} channels)")]
    Channel(Channel),
}

/// Why a consensus channel stopped receiving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The network no longer routes this channel (it was registered again, or dropped).
    #[error("the network closed consensus channel {0}")]
    Closed(Channel),
}

/// The node id of the validator with consensus key `key`: the id its certificate (from
/// [`stave_net::ChainCa::issue_for_key`]) gives it.
pub fn validator_node_id(key: &PublicKey) -> NodeId {
    ed25519_node_id(&public_key_bytes(key))
}

/// The 32 bytes of an ed25519 public key.
fn public_key_bytes(key: &PublicKey) -> [u8; 32] {
    let mut bytes = [0; 32];
    // An ed25519 public key is 32 bytes by construction.
    bytes.copy_from_slice(key.as_ref());
    bytes
}

/// The validator set in both key spaces.
#[derive(Debug)]
struct Validators {
    keys: Set<PublicKey>,
    by_id: HashMap<NodeId, PublicKey>,
    ids: HashMap<PublicKey, NodeId>,
}

impl Validators {
    fn new(validators: &[PublicKey]) -> Result<Self, TransportError> {
        let mut by_id = HashMap::with_capacity(validators.len());
        let mut ids = HashMap::with_capacity(validators.len());
        for key in validators {
            let id = validator_node_id(key);
            if ids.insert(key.clone(), id).is_some() {
                return Err(TransportError::DuplicateValidator(public_key_bytes(key)));
            }
            by_id.insert(id, key.clone());
        }
        Ok(Self {
            keys: Set::from_iter_dedup(validators.iter().cloned()),
            by_id,
            ids,
        })
    }
}

/// The validator set as it changes: the current one and how many times it changed.
#[derive(Debug)]
struct SharedValidators {
    current: RwLock<Arc<Validators>>,
    version: AtomicU64,
}

impl SharedValidators {
    /// The current set.
    fn load(&self) -> Arc<Validators> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The blocked set as last reported, and who is listening.
#[derive(Debug, Default)]
struct Blocked {
    reported: Vec<PublicKey>,
    subscribers: Vec<ring::Sender<Set<PublicKey>>>,
}

/// The consensus side of a [`Network`]: registers the channels, and is the engine's
/// [`Provider`] (the peer set is the validators, its index the times they changed) and
/// [`Blocker`](commonware_p2p::Blocker) (a block is a stave-net ban). Clones share
/// everything.
#[derive(Clone)]
pub struct ConsensusNet {
    network: Network,
    validators: Arc<SharedValidators>,
    /// Peer-set subscribers, kept open for the engine's lifetime: the engines stop when
    /// their subscription closes.
    peer_sets: Arc<Mutex<Vec<mpsc::UnboundedSender<PeerSetUpdate<PublicKey>>>>>,
    blocked: Arc<Mutex<Blocked>>,
}

impl std::fmt::Debug for ConsensusNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsensusNet")
            .field("network", &self.network)
            .field("validators", &self.validators.load().keys.len())
            .finish_non_exhaustive()
    }
}

impl ConsensusNet {
    /// Consensus on `network` among `validators` (this node included). Fails if a key is
    /// listed twice or the network's frames are too small for a block.
    pub fn new(network: Network, validators: &[PublicKey]) -> Result<Self, TransportError> {
        let frame = network.frame_config();
        if !frame.admits_payload(MAX_MESSAGE_BYTES) {
            return Err(TransportError::FrameLimits {
                max_payload: frame.max_payload,
                max_frame: frame.max_frame,
            });
        }
        Ok(Self {
            validators: Arc::new(SharedValidators {
                current: RwLock::new(Arc::new(Validators::new(validators)?)),
                version: AtomicU64::new(0),
            }),
            network,
            peer_sets: Arc::default(),
            blocked: Arc::default(),
        })
    }

    /// Makes `validators` the set consensus messages are sent to and taken from, from
    /// now on, and tells the peer-set subscribers. Fails (and changes nothing) if a key is
    /// listed twice.
    pub fn set_validators(&self, validators: &[PublicKey]) -> Result<(), TransportError> {
        let next = Arc::new(Validators::new(validators)?);
        let set = next.keys.clone();
        *self
            .validators
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        let index = self.validators.version.fetch_add(1, Ordering::AcqRel) + 1;
        let tracked = TrackedPeers::primary(set);
        self.peer_sets.lock().retain(|subscriber| {
            subscriber
                .send(PeerSetUpdate {
                    index,
                    latest: tracked.clone(),
                    all: tracked.clone(),
                })
                .is_ok()
        });
        self.publish_blocked();
        Ok(())
    }

    /// The network underneath.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Registers commonware channel `channel` on the network (replacing an earlier
    /// registration): its sender and receiver.
    pub fn register(
        &self,
        channel: Channel,
    ) -> Result<(ChannelSender, ChannelReceiver), TransportError> {
        let module = module(channel)?;
        let inbound = self.network.register(GROUP, module, BACKLOG);
        let sender = ChannelSender {
            network: self.network.clone(),
            validators: self.validators.clone(),
            protocol_id: ProtocolId::request(GROUP, module),
        };
        let mut receiver = ChannelReceiver {
            channel,
            inbound,
            network: self.network.clone(),
            validators: self.validators.clone(),
            version: u64::MAX,
            waiting: HashMap::new(),
            order: Vec::new(),
            next: 0,
            capacity: NonZeroUsize::new(BACKLOG).unwrap_or(NonZeroUsize::MIN),
        };
        receiver.refresh();
        Ok((sender, receiver))
    }

    /// Reports the blocked set again whenever it changes, in particular when a ban ends
    /// (stave-net lifts bans lazily, so nothing else would say so). Runs until every
    /// subscriber is gone and no clone of this can add one; spawn it on the engine's runtime.
    pub async fn report_unblocks(self, clock: impl Clock) {
        loop {
            clock.sleep(BAN_POLL).await;
            self.publish_blocked();
            // Only this loop's clone left, and nobody listening: nothing to report to.
            if Arc::strong_count(&self.blocked) == 1 && self.blocked.lock().subscribers.is_empty() {
                return;
            }
        }
    }

    /// The validators stave-net bans now.
    fn banned(&self) -> Vec<PublicKey> {
        let validators = self.validators.load();
        validators
            .keys
            .iter()
            .filter(|key| {
                validators
                    .ids
                    .get(*key)
                    .is_some_and(|id| self.network.is_banned(id))
            })
            .cloned()
            .collect()
    }

    /// Sends the blocked set to every subscriber if it changed since the last report.
    fn publish_blocked(&self) {
        let banned = self.banned();
        let mut blocked = self.blocked.lock();
        if blocked.reported == banned {
            return;
        }
        let set = Set::from_iter_dedup(banned.iter().cloned());
        blocked
            .subscribers
            .retain(|subscriber| subscriber.send_lossy(set.clone()));
        blocked.reported = banned;
    }
}

/// The stave-net module of commonware channel `channel`.
pub fn module(channel: Channel) -> Result<u16, TransportError> {
    if channel >= MAX_CHANNELS {
        return Err(TransportError::Channel(channel));
    }
    // In range by the check above.
    Ok(MODULE_BASE + channel as u16)
}

impl Provider for ConsensusNet {
    type PublicKey = PublicKey;

    /// The current validators, under the index of their set; older sets are not kept.
    async fn peer_set(&mut self, id: u64) -> Option<TrackedPeers<PublicKey>> {
        let version = self.validators.version.load(Ordering::Acquire);
        (id == version).then(|| TrackedPeers::primary(self.validators.load().keys.clone()))
    }

    /// Yields the current set, then each new one ([`ConsensusNet::set_validators`]).
    async fn subscribe(&mut self) -> PeerSetSubscription<PublicKey> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let index = self.validators.version.load(Ordering::Acquire);
        let set = TrackedPeers::primary(self.validators.load().keys.clone());
        // The receiver is in hand, so this cannot fail.
        let _ = sender.send(PeerSetUpdate {
            index,
            latest: set.clone(),
            all: set,
        });
        self.peer_sets.lock().push(sender);
        receiver
    }
}

impl commonware_p2p::Blocker for ConsensusNet {
    type PublicKey = PublicKey;

    /// Bans the peer in stave-net ([`Offence::Blocked`]): it is disconnected and refused
    /// (on every stave-net module, gossip too) until the ban ends.
    fn block(&mut self, peer: PublicKey) -> Feedback {
        if self.network.is_shut_down() {
            return Feedback::Closed;
        }
        let id = validator_node_id(&peer);
        tracing::warn!(peer = %peer, "consensus blocks peer");
        self.network.penalize(id, Offence::Blocked);
        self.publish_blocked();
        Feedback::Ok
    }

    /// The validators banned now, then the set again whenever it changes.
    fn blocked(&mut self) -> BlockedSubscription<PublicKey> {
        let (sender, receiver) = ring::channel(NonZeroUsize::MIN);
        let current = Set::from_iter_dedup(self.banned());
        if sender.send_lossy(current) {
            self.blocked.lock().subscribers.push(sender);
        }
        receiver
    }
}

/// Sends on one consensus channel. Rate limiting is a no-op: [`LimitedSender::check`] keeps
/// every recipient (stave-net bounds each peer by its send queue instead). `priority` is
/// ignored: a peer's frames go in order.
#[derive(Clone, Debug)]
pub struct ChannelSender {
    network: Network,
    validators: Arc<SharedValidators>,
    protocol_id: ProtocolId,
}

impl LimitedSender for ChannelSender {
    type PublicKey = PublicKey;
    type Checked<'a> = CheckedChannelSender<'a>;

    /// `All` is every connected validator; `Some`/`One` keep the validators among them.
    fn check(
        &mut self,
        recipients: Recipients<PublicKey>,
    ) -> Result<CheckedChannelSender<'_>, std::time::SystemTime> {
        let validators = self.validators.load();
        let recipients: Vec<(PublicKey, NodeId)> = match recipients {
            Recipients::All => self
                .network
                .peers()
                .into_iter()
                .filter_map(|id| validators.by_id.get(&id).map(|key| (key.clone(), id)))
                .collect(),
            Recipients::Some(keys) => keys
                .into_iter()
                .filter_map(|key| validators.ids.get(&key).map(|id| (key, *id)))
                .collect(),
            Recipients::One(key) => validators
                .ids
                .get(&key)
                .map(|id| (key, *id))
                .into_iter()
                .collect(),
        };
        Ok(CheckedChannelSender {
            sender: self,
            recipients,
        })
    }
}

/// A send to recipients [`ChannelSender::check`] kept.
#[derive(Debug)]
pub struct CheckedChannelSender<'a> {
    sender: &'a ChannelSender,
    recipients: Vec<(PublicKey, NodeId)>,
}

impl CheckedSender for CheckedChannelSender<'_> {
    type PublicKey = PublicKey;

    fn recipients(&self) -> Vec<PublicKey> {
        self.recipients.iter().map(|(key, _)| key.clone()).collect()
    }

    /// Queues the message for every recipient without waiting. Feedback: `Closed` once the
    /// network is shut down; `Rejected` if no recipient took it (none connected, every queue
    /// full, or the message too large: a bug, logged); `Backoff` if some queues were full;
    /// otherwise `Ok` (a recipient not connected misses it). A request sent to one peer that
    /// is not connected is thus `Rejected`, and commonware's resolver asks another peer at
    /// once instead of waiting out its fetch timeout for an answer that cannot come.
    fn send(self, message: impl Into<IoBufs> + Send, _priority: bool) -> Unreliable<Feedback> {
        let network = &self.sender.network;
        if network.is_shut_down() {
            return Unreliable::new(Feedback::Closed);
        }
        let payload = bytes::Bytes::from(message.into().coalesce());
        let frame = network.frame(self.sender.protocol_id, 0, payload);
        let ids: Vec<NodeId> = self.recipients.iter().map(|(_, id)| *id).collect();
        let outcomes = match network.try_send_each(&ids, &frame) {
            Ok(outcomes) => outcomes,
            Err(error) => {
                tracing::error!(%error, module = self.sender.protocol_id.module(), "consensus message not sent");
                return Unreliable::Rejected;
            }
        };
        let (mut queued, mut full) = (0, 0);
        for outcome in outcomes {
            match outcome {
                Ok(()) => queued += 1,
                Err(NetError::QueueFull(_)) => full += 1,
                Err(_) => {}
            }
        }
        match (queued, full) {
            (0, _) => Unreliable::Rejected,
            (_, 0) => Unreliable::new(Feedback::Ok),
            _ => Unreliable::new(Feedback::Backoff),
        }
    }
}

/// One validator's messages drained from the network and not yet handed to the engine.
struct Waiting {
    key: PublicKey,
    messages: VecDeque<IoBuf>,
    /// Their bytes, at most [`BACKLOG_BYTES`] (or one larger message alone).
    bytes: usize,
}

/// Receives on one consensus channel: messages from validators only, each validator
/// served in turn.
///
/// Fairness: every `recv` first drains whatever the network has queued for the channel
/// (cheap: no message is decoded or verified here) into one queue per validator, each
/// bounded by [`BACKLOG`] messages and [`BACKLOG_BYTES`] bytes, and then takes the oldest message of the next validator in
/// turn. A validator that floods the channel overflows only its own queue, so the
/// others' votes still reach the engine, and the network's shared backlog stays short
/// because it is emptied on every call.
pub struct ChannelReceiver {
    channel: Channel,
    inbound: mpsc::Receiver<Inbound>,
    network: Network,
    validators: Arc<SharedValidators>,
    /// The version of the set `waiting` and `order` were made for.
    version: u64,
    /// Messages drained from the network and not yet handed to the engine, per
    /// validator's node id.
    waiting: HashMap<NodeId, Waiting>,
    /// The validators' node ids in the order they are served.
    order: Vec<NodeId>,
    /// Index into `order` of the validator served next.
    next: usize,
    capacity: NonZeroUsize,
}

impl std::fmt::Debug for ChannelReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelReceiver")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl ChannelReceiver {
    /// Follows a change of the validator set: a new validator gets a queue, a removed
    /// one's queue and its waiting messages are dropped, the others keep theirs.
    fn refresh(&mut self) {
        let version = self.validators.version.load(Ordering::Acquire);
        if version == self.version {
            return;
        }
        let validators = self.validators.load();
        let mut waiting = std::mem::take(&mut self.waiting);
        self.waiting = validators
            .by_id
            .iter()
            .map(|(id, key)| {
                let kept = waiting.remove(id).unwrap_or_else(|| Waiting {
                    key: key.clone(),
                    messages: VecDeque::new(),
                    bytes: 0,
                });
                (*id, kept)
            })
            .collect();
        self.order = validators.by_id.keys().copied().collect();
        self.next = 0;
        self.version = version;
    }

    /// Queues a message from the network under its sender. One from a node that is not a
    /// validator is dropped and the node charged [`Offence::Unauthorized`]; one from a
    /// peer banned since it was received is dropped (commonware's network likewise stops
    /// reading a blocked peer); one beyond its sender's [`BACKLOG`] or [`BACKLOG_BYTES`]
    /// is dropped.
    fn queue(&mut self, Inbound { peer, frame, .. }: Inbound) {
        match self.waiting.get_mut(&peer) {
            Some(_) if self.network.is_banned(&peer) => {}
            Some(waiting)
                if waiting.messages.len() >= BACKLOG
                    || (!waiting.messages.is_empty()
                        && waiting.bytes + frame.payload.len() > BACKLOG_BYTES) =>
            {
                metrics::counter!("stave_consensus_dropped_messages_total", "reason" => "peer_backlog")
                    .increment(1);
            }
            Some(waiting) => {
                waiting.bytes += frame.payload.len();
                waiting.messages.push_back(IoBuf::from(frame.payload));
            }
            None => {
                tracing::debug!(peer = %stave_net::short_id(&peer), channel = self.channel, "consensus message from a non-validator dropped");
                self.network.penalize(peer, Offence::Unauthorized);
            }
        }
    }

    /// The oldest waiting message of the next validator in turn that has one.
    fn take_next(&mut self) -> Option<Message<PublicKey>> {
        for step in 0..self.order.len() {
            let index = (self.next + step) % self.order.len();
            if let Some(waiting) = self.waiting.get_mut(&self.order[index])
                && let Some(message) = waiting.messages.pop_front()
            {
                waiting.bytes -= message.len();
                self.next = index + 1;
                return Some((waiting.key.clone(), message));
            }
        }
        None
    }
}

impl Receiver for ChannelReceiver {
    type Error = RecvError;
    type PublicKey = PublicKey;

    /// The next message from a validator, the validators taking turns (see
    /// [`ChannelReceiver`]).
    async fn recv(&mut self) -> Result<Message<PublicKey>, RecvError> {
        loop {
            self.refresh();
            while let Ok(inbound) = self.inbound.try_recv() {
                self.queue(inbound);
            }
            if let Some(message) = self.take_next() {
                return Ok(message);
            }
            let inbound = self
                .inbound
                .recv()
                .await
                .ok_or(RecvError::Closed(self.channel))?;
            // The set may have changed while this waited.
            self.refresh();
            self.queue(inbound);
        }
    }

    /// The network's backlog for the channel: beyond it, arrivals are dropped.
    fn capacity(&self) -> NonZeroUsize {
        self.capacity
    }
}
