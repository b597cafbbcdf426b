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
//! the next epoch ([`EpochStart`]) only once it has committed the boundary block, so the
//! node has the state the next epoch's rules are read from, and a restart enters the same
//! epoch.

use commonware_consensus::{
    marshal::{core::Mailbox as MarshalMailbox, standard::Standard},
    simplex::scheme::ed25519::Scheme,
    types::{Epoch, Epocher, FixedEpocher, Height},
};
use commonware_cryptography::{ed25519, sha256::Digest};
use commonware_p2p::{
    Message, Receiver,
    utils::mux::{self, Builder as _, MuxHandle, Muxer, SubReceiver, SubSender},
};
use commonware_runtime::{Handle, Storage as _, Supervisor as _, tokio};
use commonware_utils::vec::NonEmptyVec;
use stave_primitives::B256;
use std::{
    collections::VecDeque,
    num::{NonZeroU64, NonZeroUsize},
};

use ::tokio::sync::watch;

use crate::{
    block::{ConsensusBlock, digest_of},
    transport::{ChannelReceiver, ChannelSender},
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

/// The chain actor's side: names the next [`EpochStart`] each time the chain commits the
/// last block of an epoch.
pub(crate) struct EpochWatch {
    epocher: FixedEpocher,
    starts: watch::Sender<EpochStart>,
}

impl EpochWatch {
    /// Epochs of `length` blocks for a chain whose committed head is `head`; `hash_at`
    /// reads the hash of a committed block. Returns the watch and what it publishes.
    pub(crate) fn new<E>(
        length: u64,
        head: u64,
        hash_at: impl FnOnce(u64) -> Result<Option<B256>, E>,
    ) -> Result<(Self, watch::Receiver<EpochStart>), EpochError<E>> {
        let length = NonZeroU64::new(length).ok_or(EpochError::ZeroLength)?;
        let epocher = FixedEpocher::new(length);
        let epoch = epoch_after(&epocher, head);
        // Epoch 0 starts on the genesis, every other on the last block of the one before.
        let last = epoch
            .previous()
            .and_then(|previous| epocher.last(previous))
            .map_or(0, Height::get);
        let floor = hash_at(last)
            .map_err(EpochError::Read)?
            .ok_or(EpochError::MissingBoundary { head, last })?;
        let (starts, receiver) = watch::channel(EpochStart { epoch, floor });
        Ok((Self { epocher, starts }, receiver))
    }

    /// The chain committed block `number` with `hash`: if it ends its epoch, the next
    /// epoch starts on it.
    pub(crate) fn committed(&self, number: u64, hash: B256) {
        let epoch = epoch_after(&self.epocher, number);
        if epoch > self.starts.borrow().epoch {
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

/// The epoch a node whose chain has committed up to `head` votes in: the one holding the
/// next height.
pub fn epoch_after(epocher: &FixedEpocher, head: u64) -> Epoch {
    epocher
        .containing(Height::new(head.saturating_add(1)))
        .map_or(Epoch::zero(), |info| info.epoch())
}

/// The engine running now.
struct Active {
    epoch: Epoch,
    handle: Handle<()>,
}

impl Drop for Active {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Runs the epochs on the three consensus channels, entering each epoch `starts` names,
/// until the chain stops (`starts` closes) or an engine fails (that panics, which stops
/// the node).
/// `start_engine(context, epoch, floor, channels)` starts `epoch`'s engine with `floor`
/// (the digest of the block before its first height) as its view-0 parent.
pub(crate) async fn run(
    context: tokio::Context,
    epocher: FixedEpocher,
    channels: [(ChannelSender, ChannelReceiver); 3],
    marshal: MarshalMailbox<Scheme, Standard<ConsensusBlock>>,
    mut starts: watch::Receiver<EpochStart>,
    mut start_engine: impl FnMut(tokio::Context, Epoch, Digest, EpochChannels) -> Handle<()>,
) {
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
            let channels = EpochChannels {
                votes: register(&mut votes, epoch, early_votes.take(epoch)).await,
                certificates: register(&mut certificates, epoch, early_certificates.take(epoch))
                    .await,
                resolver: register(&mut resolver, epoch, VecDeque::new()).await,
            };
            let engine_context = context
                .child("simplex")
                .with_attribute("epoch", epoch.get());
            let handle = start_engine(engine_context, epoch, digest_of(floor), channels);
            active = Some(Active { epoch, handle });
            metrics::gauge!("stave_consensus_epoch").set(epoch.get() as f64);
            tracing::info!(epoch = epoch.get(), floor = %floor, "entered a consensus epoch");
            // Its journal is of no use once the next epoch runs: a restart enters the epoch
            // after the committed head, never an older one.
            if let Some(previous) = left.or(epoch.previous())
                && let Err(error) = context.remove(&partition(previous), None).await
            {
                tracing::debug!(%error, epoch = previous.get(), "no journal of a past epoch to remove");
            }
        }
        let our_epoch = active.as_ref().expect("entered above").epoch;
        let engine = &mut active.as_mut().expect("entered above").handle;
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
            result = engine => {
                panic!("the consensus engine of epoch {our_epoch} stopped: {result:?}");
            }
        }
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
