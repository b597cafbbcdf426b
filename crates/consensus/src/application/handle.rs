//! The engine's side: [`StaveApp`], the handle marshal drives (its [`Application`] and
//! finalized-block [`Reporter`]), forwarding each call as a [`Request`] to the chain actor
//! and tracking how far marshal's finalized tip runs ahead.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use alloy_primitives::B256;
use commonware_actor::Feedback;
use commonware_codec::Encode as _;
use commonware_consensus::{
    Application, Epochable, Heightable, Reporter, Viewable,
    marshal::{Update, ancestry::Ancestry},
    simplex::{
        scheme::ed25519::Scheme,
        types::{Activity, Attributable, Context},
    },
};
use commonware_cryptography::{Digested, Digestible, ed25519::PublicKey, sha256::Digest};
use commonware_runtime::Clock;
use futures::{StreamExt, channel::oneshot};
use stave_node::unix_seconds;
use stave_txpool::TxPool;
use tokio::sync::watch;

use super::{CatchingUp, Request};
use crate::{
    ValidatorSets,
    block::{ConsensusBlock, hash_of},
};

/// The engine's handle on the chain: marshal's application and finalized-block reporter.
#[derive(Clone)]
pub struct StaveApp {
    /// Where the engine's requests go: to the chain actor.
    pub(super) requests: mpsc::Sender<Request>,
    /// The chain actor's head, as it publishes it.
    pub(super) head: Arc<AtomicU64>,
    /// The txpool a leader waits on before proposing.
    pub(super) pool: Arc<TxPool>,
    /// How long a leader with an empty pool waits for transactions.
    pub(super) idle_wait: Duration,
    /// The highest finalized height marshal has reported.
    pub(super) tip: Arc<AtomicU64>,
    /// Set while marshal's tip runs far ahead (see [`StaveApp::with_catching_up`]).
    pub(super) catching_up: Option<Arc<CatchingUp>>,
    /// Finalized tips the chain actor committed (see [`StaveApp::committed_tips`]).
    pub(super) committed_tips: watch::Receiver<u64>,
}

/// How far the finalized tip may run ahead of the blocks marshal has delivered before a
/// node counts as catching up.
pub const CATCHING_UP_BLOCKS: u64 = 4;

/// How often a leader with an empty pool looks again before proposing.
const POOL_POLL: Duration = Duration::from_millis(10);
impl StaveApp {
    /// Keeps its half of `flag` set while the finalized tip marshal reports is more than
    /// [`CATCHING_UP_BLOCKS`] above the blocks it has delivered: the node is catching up,
    /// and may ignore transaction gossip meanwhile (those transactions are most likely in
    /// the blocks it lacks, and admitting them would recover their signatures for
    /// nothing), as go-ethereum's pool does while it syncs. When the flag goes up, the
    /// chain actor is asked to catch up from the other validators
    /// ([`ChainActor::with_catch_up`]) rather than wait for marshal's backfill.
    pub fn with_catching_up(mut self, flag: Arc<CatchingUp>) -> Self {
        self.catching_up = Some(flag);
        self
    }

    /// Keeps the highest finalized height marshal reports in `tip`, which others read
    /// (the node's `eth_syncing`), rather than in an atomic of its own.
    pub fn with_tip(mut self, tip: Arc<AtomicU64>) -> Self {
        tip.fetch_max(self.tip.load(Ordering::Acquire), Ordering::AcqRel);
        self.tip = tip;
        self
    }

    /// Publishes whether `delivered` (the height of the newest delivered block), or the
    /// head if the chain actor imported further on its own, is far below the finalized
    /// tip, and asks the chain actor to catch up when it falls behind.
    fn publish_catching_up(&self, delivered: u64) {
        if let Some(flag) = &self.catching_up {
            let done = delivered.max(self.head.load(Ordering::Acquire));
            let behind = self.tip.load(Ordering::Acquire) > done + CATCHING_UP_BLOCKS;
            if behind && !flag.tip_ahead.swap(behind, Ordering::AcqRel) {
                // An actor that already ended has nothing to catch up.
                let _ = self.requests.send(Request::CatchUp);
            } else {
                flag.tip_ahead.store(behind, Ordering::Release);
            }
        }
    }

    /// Asks the chain actor to take the certified blocks its catch-up source has now (a
    /// full node's, when validators pushed one), rather than when its head has stood
    /// still for a while. Asks queued while it catches up are dropped then.
    pub fn catch_up_now(&self) {
        // An actor that already ended has nothing to catch up.
        let _ = self.requests.send(Request::CatchUp);
    }

    /// The engine's reporter that hands each finalization certificate to the chain actor,
    /// which stores it with its block for peers catching up. `sets` names the signers of
    /// the votes it sees (for each validator's last vote).
    pub fn finalizations(&self, sets: Arc<ValidatorSets>) -> FinalizationRecorder {
        FinalizationRecorder {
            requests: self.requests.clone(),
            views: Arc::default(),
            sets,
        }
    }

    /// The newest finalized tip marshal reported that the chain actor committed before
    /// marshal delivered it (see [`Request::FinalizedTip`]); marshal holds its
    /// finalization. [`crate::ValidatorConfig::committed_tips`] moves marshal's floor up to
    /// it when marshal is far below it.
    pub fn committed_tips(&self) -> watch::Receiver<u64> {
        self.committed_tips.clone()
    }

    /// The chain actor's proposal on top of `ancestors` (the unfinalized blocks above the
    /// head, oldest first), stamped now; `None` if the actor is gone or proposed nothing.
    pub(super) async fn proposal_on(
        &self,
        ancestors: Vec<ConsensusBlock>,
    ) -> Option<ConsensusBlock> {
        let (reply, block) = oneshot::channel();
        self.requests
            .send(Request::Propose {
                ancestors,
                timestamp: unix_seconds(),
                reply,
            })
            .ok()?;
        block.await.ok()?
    }

    /// Asks the chain actor to stop once the request it is answering is done: it writes
    /// the state layers to disk and [`ChainActor::run`] returns. For a node shutting down.
    pub fn stop_chain(&self) {
        // An actor that already ended has nothing left to write.
        let _ = self.requests.send(Request::Stop);
    }

    /// Blocks from `ancestry` (newest first) down to the first one at or below the head,
    /// oldest first.
    async fn unfinalized(
        &self,
        mut ancestry: impl Ancestry<ConsensusBlock>,
    ) -> Vec<ConsensusBlock> {
        let head = self.head.load(Ordering::Acquire);
        let mut blocks = Vec::new();
        while let Some(block) = ancestry.next().await {
            if block.height().get() <= head {
                break;
            }
            blocks.push(block.inner().clone());
        }
        blocks.reverse();
        blocks
    }
}

impl<E: Clock + Send + 'static> Application<E> for StaveApp {
    type SigningScheme = Scheme;
    type Context = Context<Digest, PublicKey>;
    type Block = ConsensusBlock;
    type Input = ();

    async fn propose(
        &mut self,
        (clock, _): (E, Self::Context),
        ancestry: impl Ancestry<Self::Block>,
        _input: (),
    ) -> Option<Digested<Self::Block>> {
        // An idle chain makes an empty block only every `idle_wait`.
        let deadline = clock.current() + self.idle_wait;
        while self.pool.status().pending == 0 && clock.current() < deadline {
            clock.sleep(POOL_POLL).await;
        }
        let ancestors = self.unfinalized(ancestry).await;
        let block = self.proposal_on(ancestors).await?;
        let digest = block.digest();
        Some(Digested::precomputed(block, digest))
    }

    async fn verify(
        &mut self,
        _context: (E, Self::Context),
        ancestry: impl Ancestry<Self::Block>,
    ) -> bool {
        let mut chain = self.unfinalized(ancestry).await;
        let Some(block) = chain.pop() else {
            // At or below the head: already final, nothing to vote for.
            return false;
        };
        let (reply, valid) = oneshot::channel();
        if self
            .requests
            .send(Request::Verify {
                block,
                ancestors: chain,
                reply,
            })
            .is_err()
        {
            return false;
        }
        valid.await.unwrap_or(false)
    }
}

impl Reporter for StaveApp {
    type Activity = Update<ConsensusBlock>;

    fn report(&mut self, activity: Self::Activity) -> Feedback {
        match activity {
            Update::Tip(_, height, digest) => {
                self.tip.fetch_max(height.get(), Ordering::AcqRel);
                self.publish_catching_up(self.head.load(Ordering::Acquire));
                let hash = hash_of(&digest);
                match self.requests.send(Request::FinalizedTip { hash }) {
                    Ok(()) => Feedback::Ok,
                    Err(_) => Feedback::Closed,
                }
            }
            Update::Block(block, ack) => {
                let block = block.inner().clone();
                self.publish_catching_up(block.number());
                match self.requests.send(Request::Finalized { block, ack }) {
                    Ok(()) => Feedback::Ok,
                    Err(_) => Feedback::Closed,
                }
            }
        }
    }
}

/// Simplex's reporter for finalization certificates: each goes to the chain actor as a
/// [`Request::Certificate`]. All activity also moves the consensus metrics: the highest
/// view seen (`stave_consensus_view`) and, per finalized view, the time from the first
/// activity this node saw in it to its finalization certificate
/// (`stave_consensus_finalization_seconds`), and each validator's last vote
/// (`stave_consensus_validator_last_view` and `_last_epoch`, labelled with its consensus
/// public key, so an operator sees which one lags). Views count from 0 again in each
/// epoch, so every comparison is of (epoch, view) rounds.
#[derive(Clone)]
pub struct FinalizationRecorder {
    requests: mpsc::Sender<Request>,
    views: Arc<std::sync::Mutex<ViewClock>>,
    sets: Arc<ValidatorSets>,
}

/// A consensus round as (epoch, view): ordered as the engine moves through them.
type RoundKey = (u64, u64);

/// When this node first saw activity in each round not finalized yet, the highest round
/// seen, the highest finalized, and the highest round each validator voted in.
#[derive(Debug, Default)]
struct ViewClock {
    first_seen: BTreeMap<RoundKey, Instant>,
    highest: RoundKey,
    finalized: Option<RoundKey>,
    last_votes: BTreeMap<B256, RoundKey>,
}

impl ViewClock {
    /// Notes activity in `round`; returns the highest round seen. Late votes of
    /// finalized rounds start no clock.
    fn saw(&mut self, round: RoundKey) -> RoundKey {
        if self.finalized.is_none_or(|finalized| round > finalized) {
            self.first_seen.entry(round).or_insert_with(Instant::now);
        }
        self.highest = self.highest.max(round);
        self.highest
    }

    /// `round` is finalized: how long since it was first seen; every round up to it is
    /// forgotten (the ones it skipped are settled too).
    fn finalized(&mut self, round: RoundKey) -> Option<Duration> {
        let started = self.first_seen.get(&round).map(Instant::elapsed);
        self.first_seen = self.first_seen.split_off(&(round.0, round.1 + 1));
        self.finalized = Some(
            self.finalized
                .map_or(round, |finalized| finalized.max(round)),
        );
        started
    }

    /// `validator` voted in `round`; returns the highest round it has voted in (votes
    /// arrive out of order, so a late one does not move it back).
    fn voted(&mut self, validator: B256, round: RoundKey) -> RoundKey {
        let last = self.last_votes.entry(validator).or_default();
        *last = (*last).max(round);
        *last
    }
}

impl FinalizationRecorder {
    /// Who signed `activity`, if it is one validator's vote: its key in its epoch's set.
    fn voter(&self, activity: &Activity<Scheme, Digest>) -> Option<B256> {
        let signer = match activity {
            Activity::Notarize(vote) => vote.signer(),
            Activity::Nullify(vote) => vote.signer(),
            Activity::Finalize(vote) => vote.signer(),
            _ => return None,
        };
        let set = self.sets.get(activity.epoch())?;
        let key = set.get(usize::from(signer))?;
        Some(B256::from_slice(key.as_ref()))
    }
}

impl Reporter for FinalizationRecorder {
    type Activity = Activity<Scheme, Digest>;

    fn report(&mut self, activity: Self::Activity) -> Feedback {
        let round = (activity.epoch().get(), activity.view().get());
        let voter = self.voter(&activity);
        let latency = {
            let mut views = self
                .views
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (_, highest) = views.saw(round);
            metrics::gauge!("stave_consensus_view").set(highest as f64);
            if let Some(voter) = voter {
                let (epoch, view) = views.voted(voter, round);
                let validator = voter.to_string();
                metrics::gauge!("stave_consensus_validator_last_view", "validator" => validator.clone())
                    .set(view as f64);
                metrics::gauge!("stave_consensus_validator_last_epoch", "validator" => validator)
                    .set(epoch as f64);
            }
            match &activity {
                Activity::Finalization(_) => views.finalized(round),
                _ => None,
            }
        };
        if let Some(latency) = latency {
            metrics::histogram!("stave_consensus_finalization_seconds")
                .record(latency.as_secs_f64());
        }
        let Activity::Finalization(finalization) = activity else {
            return Feedback::Ok;
        };
        let hash = hash_of(&finalization.proposal.payload);
        let certificate = finalization.encode().to_vec();
        match self
            .requests
            .send(Request::Certificate { hash, certificate })
        {
            Ok(()) => Feedback::Ok,
            Err(_) => Feedback::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use commonware_consensus::types::{Epoch, Height, Round, View};

    #[test]
    fn a_view_is_timed_from_its_first_activity_and_late_votes_start_no_clock() {
        let mut clock = super::ViewClock::default();
        assert_eq!(clock.saw((0, 3)), (0, 3));
        assert_eq!(clock.saw((0, 4)), (0, 4));
        std::thread::sleep(Duration::from_millis(5));
        let latency = clock.finalized((0, 3)).expect("seen");
        assert!(latency >= Duration::from_millis(5));
        // View 4 is still timed; view 3's late votes start nothing.
        assert_eq!(clock.saw((0, 3)), (0, 4));
        assert_eq!(clock.finalized((0, 3)), None);
        assert!(clock.finalized((0, 4)).is_some());
        assert!(clock.first_seen.is_empty());
        // A new epoch's views start again from 0 and are still later.
        assert_eq!(clock.saw((1, 0)), (1, 0));
        assert!(clock.finalized((1, 0)).is_some());
    }

    #[test]
    fn a_validators_last_vote_never_moves_back() {
        let mut clock = super::ViewClock::default();
        let (a, b) = (B256::repeat_byte(1), B256::repeat_byte(2));
        assert_eq!(clock.voted(a, (0, 5)), (0, 5));
        assert_eq!(clock.voted(b, (0, 2)), (0, 2));
        assert_eq!(clock.voted(a, (0, 4)), (0, 5), "a late vote");
        assert_eq!(clock.voted(a, (1, 1)), (1, 1), "the next epoch's view 1");
        assert_eq!(clock.last_votes[&b], (0, 2));
    }
    use commonware_utils::{Acknowledgement, acknowledgement::Exact};
    use stave_primitives::{Block, Header};

    use super::*;

    fn app(head: u64) -> (StaveApp, Arc<CatchingUp>, mpsc::Receiver<Request>) {
        let (requests, received) = mpsc::channel();
        let cache = Arc::new(stave_verify::SenderCache::new(16));
        let pool = TxPool::new(stave_txpool::PoolConfig::new(1, 30_000_000), cache);
        let flag = Arc::new(CatchingUp::default());
        let app = StaveApp {
            requests,
            head: Arc::new(AtomicU64::new(head)),
            pool: Arc::new(pool),
            idle_wait: Duration::ZERO,
            tip: Arc::new(AtomicU64::new(head)),
            catching_up: None,
            committed_tips: watch::channel(head).1,
        }
        .with_catching_up(flag.clone());
        (app, flag, received)
    }

    fn tip(height: u64) -> Update<ConsensusBlock> {
        let round = Round::new(Epoch::zero(), View::new(height));
        Update::Tip(round, Height::new(height), Digest([0; 32]))
    }

    fn block(number: u64) -> Update<ConsensusBlock> {
        let header = Header {
            number,
            ..Header::default()
        };
        let sealed = Block {
            header,
            transactions: Vec::new(),
        }
        .seal();
        let block = ConsensusBlock::new(&sealed, Vec::new());
        let digest = block.digest();
        Update::Block(Digested::precomputed(block, digest), Exact::handle().0)
    }

    #[test]
    fn a_node_far_below_the_finalized_tip_catches_up_until_its_blocks_arrive() {
        let (mut app, flag, requests) = app(10);
        let catching_up = || flag.get();
        // The chain actor is asked to catch up each time the node falls behind, once.
        let catch_ups = || {
            requests
                .try_iter()
                .filter(|request| matches!(request, Request::CatchUp))
                .count()
        };
        app.report(tip(10 + CATCHING_UP_BLOCKS));
        assert!(!catching_up(), "a few blocks behind is not catching up");
        assert_eq!(catch_ups(), 0);
        app.report(tip(11 + CATCHING_UP_BLOCKS));
        assert!(catching_up());
        // A tip reported out of order does not lower the tip.
        app.report(tip(12));
        assert!(catching_up());
        assert_eq!(catch_ups(), 1);
        // Blocks delivered: once within reach of the tip, the node has caught up.
        app.report(block(10));
        assert!(catching_up());
        app.report(block(11));
        assert!(!catching_up());
        assert_eq!(catch_ups(), 0);
        app.report(tip(20 + CATCHING_UP_BLOCKS));
        assert!(catching_up());
        assert_eq!(catch_ups(), 1);
        // The chain actor imported up to the tip on its own: marshal's deliveries of those
        // blocks, far below the tip, do not count as falling behind again.
        app.head.store(20 + CATCHING_UP_BLOCKS, Ordering::Release);
        app.report(block(12));
        assert!(!catching_up());
        app.report(block(13));
        app.report(tip(21 + CATCHING_UP_BLOCKS));
        assert!(!catching_up());
        assert_eq!(catch_ups(), 0);
    }

    #[test]
    fn marshal_clearing_its_half_leaves_the_chain_actors_catching_up_set() {
        let (mut app, flag, _requests) = app(10);
        flag.importing.store(true, Ordering::Release);
        // Marshal sees the node within reach of the tip while the actor still imports.
        app.report(block(11));
        assert!(flag.get());
        flag.importing.store(false, Ordering::Release);
        assert!(!flag.get());
        app.report(tip(12 + CATCHING_UP_BLOCKS));
        assert!(flag.get(), "either half is enough");
    }
}
