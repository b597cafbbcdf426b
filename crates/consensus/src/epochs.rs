//! Consensus epochs: one Simplex engine per epoch, the next started once the chain has
//! committed the current epoch's last block.
//!
//! An epoch is a fixed run of heights (commonware's [`FixedEpocher`], its length from the
//! genesis), so every node knows where one ends without asking anyone. Each epoch's engine
//! votes on its own sub-channels of the vote, certificate and resolver channels (commonware's
//! [`Muxer`], keyed by epoch: docs/wire-formats.md), journals in its own partition and starts
//! from the previous epoch's last block as its view-0 parent. A vote or certificate for an
//! epoch this node has not entered says the others are past the boundary: marshal is asked
//! for the boundary's finalization from that peer, so a lagging node reaches it and enters.
//!
//! The engine of an epoch stops when the next one starts. Invariant: the chain actor names
//! the next epoch ([`EpochStart`]) only once it has committed the boundary block and
//! recorded the epoch's validators read from the state after it ([`ValidatorSets`]), so
//! every node enters with the same set and a restart enters the same epoch with it. A node
//! that is not among an epoch's validators runs no engine in it: it follows the chain
//! through marshal until an epoch names it, and its consensus network takes messages from
//! the validators of the epoch it is in and the one before (late votes and requests).

use commonware_consensus::{
    marshal::{core::Mailbox as MarshalMailbox, standard::Standard},
    simplex::scheme::ed25519::Scheme,
    types::{Epoch, Epocher, FixedEpocher, Height},
};
use commonware_cryptography::{certificate::Provider as _, ed25519, sha256::Digest};
use commonware_p2p::{
    Message, Receiver,
    utils::mux::{self, Builder as _, MuxHandle, Muxer, SubReceiver, SubSender},
};
use commonware_runtime::{Handle, Storage as _, Supervisor as _, tokio};
use commonware_utils::{ordered::Set, vec::NonEmptyVec};
use stave_node::ChainView;
use stave_primitives::B256;
use std::{
    collections::VecDeque,
    num::{NonZeroU64, NonZeroUsize},
    sync::Arc,
};

use ::tokio::sync::watch;

use crate::{
    block::{ConsensusBlock, digest_of},
    transport::{ChannelReceiver, ChannelSender, ConsensusNet},
    validator_sets::{EpochSchemes, ValidatorSetError, ValidatorSets},
};

/// One sub-channel of a consensus channel, as an epoch's engine sends and receives on it.
pub(crate) type EpochChannel = (SubSender<ChannelSender>, Replay);

/// Most bytes of messages for later epochs kept per channel until this node enters their
/// epoch: many views' votes and certificates, which are a few hundred bytes each.
const EARLY_BYTES: usize = 1 << 20;

/// Votes or certificates that came for epochs this node has not entered yet. The others
/// enter an epoch a moment before it does (they committed the boundary block first): their
/// first proposal and votes would otherwise be lost to it, and the epoch's first views
/// would wait for their leader timeout to be sent again.
#[derive(Default)]
struct Early {
    messages: VecDeque<(u64, Message<ed25519::PublicKey>)>,
    bytes: usize,
}

impl Early {
    /// Keeps `message`, for `epoch`, unless that goes over [`EARLY_BYTES`].
    fn keep(&mut self, epoch: u64, message: Message<ed25519::PublicKey>) {
        let len = message.1.len();
        if self.bytes + len <= EARLY_BYTES {
            self.bytes += len;
            self.messages.push_back((epoch, message));
        }
    }

    /// The messages kept for `epoch`, in arrival order; those for earlier epochs are
    /// dropped, those for later ones kept.
    fn take(&mut self, epoch: Epoch) -> VecDeque<Message<ed25519::PublicKey>> {
        let mut taken = VecDeque::new();
        let mut kept = VecDeque::new();
        for (at, message) in self.messages.drain(..) {
            match at.cmp(&epoch.get()) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => taken.push_back(message),
                std::cmp::Ordering::Greater => kept.push_back((at, message)),
            }
        }
        self.bytes = kept.iter().map(|(_, message)| message.1.len()).sum();
        self.messages = kept;
        taken
    }
}

/// An epoch's receiver: first the messages that came for the epoch before the node entered
/// it, then the sub-channel's own.
pub(crate) struct Replay {
    early: VecDeque<Message<ed25519::PublicKey>>,
    inner: SubReceiver<ed25519::PublicKey>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replay({} early, {:?})", self.early.len(), self.inner)
    }
}

impl Receiver for Replay {
    type Error = mux::Error;
    type PublicKey = ed25519::PublicKey;

    async fn recv(&mut self) -> Result<Message<Self::PublicKey>, Self::Error> {
        match self.early.pop_front() {
            Some(message) => Ok(message),
            None => self.inner.recv().await,
        }
    }

    fn capacity(&self) -> NonZeroUsize {
        self.inner.capacity()
    }
}

/// The channels one epoch's engine runs on.
pub(crate) struct EpochChannels {
    /// Votes.
    pub votes: EpochChannel,
    /// Notarization, nullification and finalization certificates.
    pub certificates: EpochChannel,
    /// Requests for certificates the engine missed.
    pub resolver: EpochChannel,
}

/// Where a node's votes go next: the epoch after its chain's committed head, and the
/// hash of the block before that epoch's first height (the genesis for epoch 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochStart {
    /// The epoch.
    pub epoch: Epoch,
    /// The hash of the last block of the epoch before it: its engine's view-0 parent.
    pub floor: B256,
}

/// The chain actor's side: records each epoch's validators and names the next
/// [`EpochStart`] each time the chain commits the last block of an epoch.
pub(crate) struct EpochWatch<'s> {
    epocher: FixedEpocher,
    starts: watch::Sender<EpochStart>,
    sets: Arc<ValidatorSets>,
    view: ChainView<'s>,
}

impl<'s> EpochWatch<'s> {
    /// Epochs of `length` blocks for the chain `view` reads, whose validator sets go to
    /// `sets`. Returns the watch and what it publishes.
    pub(crate) fn new(
        length: u64,
        view: ChainView<'s>,
        sets: Arc<ValidatorSets>,
    ) -> Result<(Self, watch::Receiver<EpochStart>), EpochError<stave_storage::StorageError>> {
        let length = NonZeroU64::new(length).ok_or(EpochError::ZeroLength)?;
        let epocher = FixedEpocher::new(length);
        let (head, _) = view.head().map_err(EpochError::Read)?;
        let epoch = epoch_after(&epocher, head);
        let last = floor_height(&epocher, epoch);
        let floor = view
            .hash_at(last)
            .map_err(EpochError::Read)?
            .ok_or(EpochError::MissingBoundary { head, last })?;
        // The epoch before too: marshal checks its certificates when a restarted node's
        // floor is the last block of it.
        if let Some(previous) = epoch.previous() {
            sets.enter(&view, previous, floor_height(&epocher, previous))?;
        }
        sets.enter(&view, epoch, last)?;
        let (starts, receiver) = watch::channel(EpochStart { epoch, floor });
        Ok((
            Self {
                epocher,
                starts,
                sets,
                view,
            },
            receiver,
        ))
    }

    /// The chain committed block `number` with `hash`: if it ends its epoch, the next
    /// epoch's validators are recorded and the epoch starts on it. Panics if they cannot
    /// be (the storage failed): the node must not commit the next epoch's blocks without
    /// them, and the chain actor's thread ending stops the node.
    pub(crate) fn committed(&self, number: u64, hash: B256) {
        let epoch = epoch_after(&self.epocher, number);
        if epoch > self.starts.borrow().epoch {
            if let Err(error) = self.sets.enter(&self.view, epoch, number) {
                panic!("recording the validators of epoch {epoch}: {error}");
            }
            self.starts.send_replace(EpochStart { epoch, floor: hash });
        }
    }
}

/// Why the epoch a node votes in could not be worked out.
#[derive(Debug, thiserror::Error)]
pub enum EpochError<E> {
    /// The genesis's epoch length is zero.
    #[error("the epoch length is zero")]
    ZeroLength,
    /// The chain's storage could not be read.
    #[error("reading the last block of the previous epoch: {0}")]
    Read(E),
    /// The epoch's validator set could not be read or recorded.
    #[error(transparent)]
    ValidatorSet(#[from] ValidatorSetError),
    /// The chain holds a head but not the block its epoch starts on.
    #[error("the chain's head is block {head} but block {last}, its epoch's start, is missing")]
    MissingBoundary {
        /// The committed head.
        head: u64,
        /// The missing block's height.
        last: u64,
    },
}

/// The journal partition of `epoch`'s engine. Epoch 0 keeps the name of the days before
/// epochs, so a data dir from then opens as it was.
pub(crate) fn partition(epoch: Epoch) -> String {
    match epoch.get() {
        0 => "stave-simplex".to_string(),
        n => format!("stave-simplex-{n}"),
    }
}

/// The height of the block `epoch`'s engine starts on: the last of the epoch before, the
/// genesis for epoch 0.
fn floor_height(epocher: &FixedEpocher, epoch: Epoch) -> u64 {
    epoch
        .previous()
        .and_then(|previous| epocher.last(previous))
        .map_or(0, Height::get)
}

/// The epoch a node whose chain has committed up to `head` votes in: the one holding the
/// next height.
pub fn epoch_after(epocher: &FixedEpocher, head: u64) -> Epoch {
    epocher
        .containing(Height::new(head.saturating_add(1)))
        .map_or(Epoch::zero(), |info| info.epoch())
}

/// The epoch this node is in, and its engine there if it is one of the validators.
struct Active {
    epoch: Epoch,
    engine: Option<Handle<()>>,
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(engine) = &self.engine {
            engine.abort();
        }
    }
}

/// What an epoch's engine is started with besides its channels.
pub(crate) struct EpochEngine {
    /// Its context.
    pub context: tokio::Context,
    /// The epoch.
    pub epoch: Epoch,
    /// The digest of the block before its first height: its view-0 parent.
    pub floor: Digest,
    /// This node's signing scheme for the epoch's validators.
    pub scheme: Scheme,
}

/// What [`run`] drives: the validator sets, the network they are admitted on, and
/// marshal (told where a peer has gone on).
pub(crate) struct EpochParts {
    /// The schemes of the epochs this node knows.
    pub schemes: EpochSchemes,
    /// Each epoch's validators.
    pub sets: Arc<ValidatorSets>,
    /// The consensus network, whose validator set follows the epochs.
    pub net: ConsensusNet,
    /// Marshal.
    pub marshal: MarshalMailbox<Scheme, Standard<ConsensusBlock>>,
    /// This node's consensus key.
    pub me: ed25519::PublicKey,
}

/// Runs the epochs on the three consensus channels, entering each epoch `starts` names,
/// until the chain stops (`starts` closes) or an engine fails (that panics, which stops
/// the node). In each epoch whose validators hold this node, `start_engine` starts the
/// epoch's engine.
pub(crate) async fn run(
    context: tokio::Context,
    epocher: FixedEpocher,
    channels: [(ChannelSender, ChannelReceiver); 3],
    parts: EpochParts,
    mut starts: watch::Receiver<EpochStart>,
    mut start_engine: impl FnMut(EpochEngine, EpochChannels) -> Handle<()>,
) {
    let EpochParts {
        schemes,
        sets,
        net,
        marshal,
        me,
    } = parts;
    let [
        (vote_sender, vote_receiver),
        (cert_sender, cert_receiver),
        (resolver_sender, resolver_receiver),
    ] = channels;
    let (mux, mut votes, mut vote_backup) =
        Muxer::builder(context.child("vote_mux"), vote_sender, vote_receiver)
            .with_backup()
            .build();
    mux.start();
    let (mux, mut certificates, mut cert_backup) =
        Muxer::builder(context.child("certificate_mux"), cert_sender, cert_receiver)
            .with_backup()
            .build();
    mux.start();
    let (mux, mut resolver) = Muxer::new(
        context.child("resolver_mux"),
        resolver_sender,
        resolver_receiver,
    );
    mux.start();

    let (mut early_votes, mut early_certificates) = (Early::default(), Early::default());
    let mut active: Option<Active> = None;
    loop {
        let EpochStart { epoch, floor } = *starts.borrow_and_update();
        if active.as_ref().is_none_or(|active| active.epoch < epoch) {
            // The old engine stops before the new one registers its sub-channels.
            let left = active.take().map(|active| active.epoch);
            admit(&net, &sets, epoch);
            let (early_v, early_c) = (early_votes.take(epoch), early_certificates.take(epoch));
            let engine = match schemes.scheme(epoch) {
                Some(scheme) => {
                    let channels = EpochChannels {
                        votes: register(&mut votes, epoch, early_v).await,
                        certificates: register(&mut certificates, epoch, early_c).await,
                        resolver: register(&mut resolver, epoch, VecDeque::new()).await,
                    };
                    let engine = EpochEngine {
                        context: context
                            .child("simplex")
                            .with_attribute("epoch", epoch.get()),
                        epoch,
                        floor: digest_of(floor),
                        scheme: (*scheme).clone(),
                    };
                    Some(start_engine(engine, channels))
                }
                None => None,
            };
            let voting = engine.is_some();
            if voting {
                fetch_floor(&epocher, &sets, &marshal, &me, epoch);
            }
            active = Some(Active { epoch, engine });
            metrics::gauge!("stave_consensus_epoch").set(epoch.get() as f64);
            metrics::gauge!("stave_consensus_voting").set(f64::from(u8::from(voting)));
            tracing::info!(epoch = epoch.get(), floor = %floor, voting, "entered a consensus epoch");
            // Its journal is of no use once the next epoch runs: a restart enters the epoch
            // after the committed head, never an older one.
            if let Some(previous) = left.or(epoch.previous())
                && let Err(error) = context.remove(&partition(previous), None).await
            {
                tracing::debug!(%error, epoch = previous.get(), "no journal of a past epoch to remove");
            }
        }
        let our_epoch = active.as_ref().expect("entered above").epoch;
        let engine = active.as_mut().expect("entered above").engine.as_mut();
        let running = engine.is_some();
        ::tokio::select! {
            changed = starts.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            Some((their_epoch, message)) = vote_backup.recv() => {
                if their_epoch > our_epoch.get() {
                    hint_boundary(&epocher, &marshal, our_epoch, message.0.clone());
                    early_votes.keep(their_epoch, message);
                }
            }
            Some((their_epoch, message)) = cert_backup.recv() => {
                if their_epoch > our_epoch.get() {
                    hint_boundary(&epocher, &marshal, our_epoch, message.0.clone());
                    early_certificates.keep(their_epoch, message);
                }
            }
            result = async { engine.expect("polled only when running").await }, if running => {
                panic!("the consensus engine of epoch {our_epoch} stopped: {result:?}");
            }
        }
    }
}

/// Has marshal fetch the finalization of the block `epoch`'s engine starts on (the last of
/// the epoch before) from that epoch's validators, unless it holds it. Proposals of the
/// epoch's first views build on that block, and marshal must have it to verify them; a
/// node whose chain took the block from the other validators' catch-up
/// ([`crate::catch_up`]) rather than through marshal would otherwise wait for it forever.
fn fetch_floor(
    epocher: &FixedEpocher,
    sets: &ValidatorSets,
    marshal: &MarshalMailbox<Scheme, Standard<ConsensusBlock>>,
    me: &ed25519::PublicKey,
    epoch: Epoch,
) {
    let Some(set) = epoch.previous().and_then(|previous| sets.get(previous)) else {
        return;
    };
    let peers: Vec<ed25519::PublicKey> = set.iter().filter(|key| *key != me).cloned().collect();
    if !peers.is_empty() {
        let last = Height::new(floor_height(epocher, epoch));
        marshal.hint_finalized(last, NonEmptyVec::from_unchecked(peers));
    }
}

/// Makes the consensus network take messages from the validators of `epoch` and of the
/// epoch before it (whose late votes and requests still come).
fn admit(net: &ConsensusNet, sets: &ValidatorSets, epoch: Epoch) {
    let current = sets.get(epoch);
    let before = epoch.previous().and_then(|previous| sets.get(previous));
    let both = current.iter().chain(before.iter());
    let keys: Vec<ed25519::PublicKey> =
        Set::from_iter_dedup(both.flat_map(|set| set.iter().cloned()))
            .iter()
            .cloned()
            .collect();
    if let Err(error) = net.set_validators(&keys) {
        // `keys` holds each key once, which is all the network checks.
        tracing::error!(%error, "the consensus network kept its validators");
    }
}

/// The sub-channel of `epoch` on a muxed channel, `early` first. Each epoch registers
/// once, and only a stopped muxer (the node is stopping) refuses.
async fn register(
    mux: &mut MuxHandle<ChannelSender>,
    epoch: Epoch,
    early: VecDeque<Message<ed25519::PublicKey>>,
) -> EpochChannel {
    let (sender, inner) = mux
        .register(epoch.get())
        .await
        .expect("the consensus channel muxer runs while the node does");
    (sender, Replay { early, inner })
}

/// A message for a later epoch than `our_epoch` came from `from`: `from` has the
/// finalization of our epoch's last block; marshal fetches it (and checks it) so the
/// chain gets there.
fn hint_boundary(
    epocher: &FixedEpocher,
    marshal: &MarshalMailbox<Scheme, Standard<ConsensusBlock>>,
    our_epoch: Epoch,
    from: ed25519::PublicKey,
) {
    // An endless epoch (a genesis without epochs) has no last block anyone could hold.
    if let Some(last) = epocher
        .last(our_epoch)
        .filter(|last| last.get() < u64::MAX - 1)
    {
        tracing::debug!(
            our_epoch = our_epoch.get(),
            "a peer is in a later epoch: fetching our epoch's last finalization"
        );
        marshal.hint_finalized(last, NonEmptyVec::new(from));
    }
}

#[cfg(test)]
mod tests {
    use commonware_cryptography::Signer as _;
    use commonware_utils::NZU64;

    use super::*;

    #[test]
    fn a_node_votes_in_the_epoch_after_its_committed_head() {
        let epocher = FixedEpocher::new(NZU64!(10));
        // Epoch 0 holds heights 0..=9: a head below 9 still votes in it.
        assert_eq!(epoch_after(&epocher, 0), Epoch::zero());
        assert_eq!(epoch_after(&epocher, 8), Epoch::zero());
        // Block 9 is epoch 0's last: once it is committed, the node moves on.
        assert_eq!(epoch_after(&epocher, 9), Epoch::new(1));
        assert_eq!(epoch_after(&epocher, 19), Epoch::new(2));
        let endless = FixedEpocher::new(NZU64!(u64::MAX));
        assert_eq!(epoch_after(&endless, 1 << 40), Epoch::zero());
    }

    #[test]
    fn early_messages_go_to_their_epoch_within_a_byte_budget() {
        let from = ed25519::PrivateKey::from_seed(1).public_key();
        let message = |byte: u8, len: usize| (from.clone(), vec![byte; len].into());
        let mut early = Early::default();
        early.keep(2, message(2, 10));
        early.keep(3, message(3, 10));
        early.keep(2, message(4, 10));
        early.keep(5, message(5, EARLY_BYTES));
        assert_eq!(early.bytes, 30, "over the budget is dropped");
        let taken: Vec<u8> = early
            .take(Epoch::new(2))
            .iter()
            .map(|m| m.1.as_ref()[0])
            .collect();
        assert_eq!(taken, vec![2, 4], "epoch 2's, in arrival order");
        assert_eq!(early.bytes, 10, "epoch 3's is kept");
        assert!(
            early.take(Epoch::new(4)).is_empty(),
            "epoch 3's is now past"
        );
        assert_eq!(early.bytes, 0);
    }

    #[test]
    fn epoch_zero_keeps_the_journal_it_had_before_epochs() {
        assert_eq!(partition(Epoch::zero()), "stave-simplex");
        assert_eq!(partition(Epoch::new(3)), "stave-simplex-3");
    }
}
