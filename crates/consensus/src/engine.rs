//! Wiring of one validator: the consensus channels on Stave's network (through
//! [`crate::transport`]), Simplex, its marshal (block dissemination, backfill, ordered
//! delivery of finalized blocks) and Stave's application, on commonware's tokio runtime.

use std::{
    num::{NonZeroU16, NonZeroU64, NonZeroUsize},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use ::tokio::sync::watch;
use commonware_broadcast::buffered;
use commonware_consensus::{
    Application, Reporter, Reporters,
    marshal::{
        self, Update,
        core::Actor as Marshal,
        resolver::p2p as marshal_resolver,
        standard::{Inline, Standard},
    },
    simplex::{self, elector::RoundRobin, scheme::ed25519::Scheme, types::Context},
    types::{FixedEpocher, Height, ViewDelta},
};
use commonware_cryptography::{
    Digested, Digestible, Signer as _,
    certificate::Verifier as _,
    ed25519,
    sha256::{Digest, Sha256},
};
use commonware_parallel::Sequential;
use commonware_runtime::{
    Runner as _, Spawner as _, Supervisor as _, buffer::paged::CacheRef, tokio,
};
use commonware_storage::{archive::prunable, translator::TwoCap};
use commonware_utils::{NZDuration, NZU16, NZU64, NZUsize};

use crate::{
    application::{CATCHING_UP_BLOCKS, FinalizationRecorder},
    block::ConsensusBlock,
    epochs::{self, EpochChannels, EpochEngine, EpochParts, EpochStart},
    transport::{ConsensusNet, validator_node_id},
    validator_sets::{EpochSchemes, ValidatorSets},
};

/// Channels on the consensus network.
const VOTES: u64 = 0;
const CERTIFICATES: u64 = 1;
const RESOLVER: u64 = 2;
const BROADCAST: u64 = 3;
const BACKFILL: u64 = 4;

/// How much longer than the certification timeout and the retry interval a leader must be
/// silent before the views it leads are skipped without waiting.
const SKIP_MARGIN: Duration = Duration::from_secs(5);

const MAILBOX: NonZeroUsize = NZUsize!(1024);
const IO_BUFFER: NonZeroUsize = NZUsize!(1 << 20);
/// Page size of the engine's journals and archives (part of their on-disk format).
const JOURNAL_PAGE_SIZE: NonZeroU16 = NZU16!(16_384);
/// Pages of those journals kept in memory. commonware allocates and zeroes every page
/// when the node starts, so this is memory paid up front: 512 pages are 8 MiB, ample for
/// the archives' key indexes. (10,000 pages, 164 MB, took ~1.5 s of a restarting
/// validator's start on the shared test machine.)
const JOURNAL_CACHE_PAGES: NonZeroUsize = NZUsize!(512);
/// Finalized blocks marshal hands to the chain before the first is acknowledged: a node
/// catching up gets them as a run its import pipeline overlaps (decode and verify of one
/// block beside the execution and commit of the one before).
const MAX_PENDING_ACKS: NonZeroUsize = NZUsize!(16);
/// Views below the finalized tip simplex keeps in memory and in its journal, for votes
/// that arrive late. A restarting validator replays every kept view into marshal, one
/// synced archive write each, before it takes part again; nothing reads those views once
/// their block is final (the chain syncs through marshal's finalizations).
const SIMPLEX_VIEW_RETENTION: ViewDelta = ViewDelta::new(2);

/// One validator's keys, network and storage.
pub struct ValidatorConfig {
    /// This validator's consensus key; also the key of this node's TLS certificate
    /// (`stave_net::ChainCa::issue_for_key`), which is how peers know it is this validator.
    pub key: ed25519::PrivateKey,
    /// Each epoch's validators, as the chain actor records them
    /// ([`ChainActor::with_epochs`](crate::ChainActor::with_epochs)). This node votes in
    /// the epochs whose set holds its key and follows the others.
    pub sets: Arc<ValidatorSets>,
    /// The node's network, already started (on any tokio runtime) with the certificate
    /// holding `key`, and shared with tx gossip; it dials the other validators itself.
    pub network: stave_net::Network,
    /// Directory for the engine's own journals (votes, finalized block archive).
    pub storage: PathBuf,
    /// Chain-specific namespace (a node derives it from the genesis hash, the chain id and
    /// the validator set), so nodes of different chains do not accept each other's votes.
    pub namespace: Vec<u8>,
    /// The chain's block 0.
    pub genesis: ConsensusBlock,
    /// How long a view waits for its leader's proposal.
    pub leader_timeout: Duration,
    /// Blocks per consensus epoch (the genesis's `epochLength`).
    pub epoch_length: NonZeroU64,
    /// The epoch to vote in, as the chain actor names it
    /// ([`ChainActor::with_epochs`](crate::ChainActor::with_epochs)).
    pub epoch_starts: watch::Receiver<EpochStart>,
    /// The finalized tips the chain committed before marshal delivered them
    /// ([`crate::StaveApp::committed_tips`]). When marshal is far below one, it is
    /// redelivering blocks the chain imported on its own while it caught up (fetching each
    /// from the other validators and syncing it to its archive first, a synced write per
    /// block), and the chain's next blocks wait behind them: marshal's floor is
    /// then moved up to the tip, so it delivers from there on.
    pub committed_tips: watch::Receiver<u64>,
    /// Where the engine's finalization certificates go, to be stored with their blocks
    /// ([`StaveApp::finalizations`](crate::StaveApp::finalizations)).
    pub finalizations: FinalizationRecorder,
}

/// The namespace the engine's signing schemes sign votes and certificates under, for a
/// chain whose namespace is `chain` ([`ValidatorConfig::namespace`]): what a
/// certificate is checked under ([`crate::RunChecker`]).
pub fn scheme_namespace(chain: &[u8]) -> Vec<u8> {
    [chain, b"_CONSENSUS"].concat()
}

fn archive<C>(name: &str, page_cache: CacheRef, codec_config: C) -> prunable::Config<TwoCap, C> {
    prunable::Config {
        translator: TwoCap,
        metadata_partition: format!("stave-{name}-metadata"),
        key_partition: format!("stave-{name}-key"),
        key_page_cache: page_cache,
        value_partition: format!("stave-{name}-value"),
        compression: None,
        codec_config,
        items_per_section: NZU64!(1024),
        key_write_buffer: IO_BUFFER,
        value_write_buffer: IO_BUFFER,
        replay_buffer: IO_BUFFER,
    }
}

/// Runs a validator until its runtime stops: blocks come to `app` to propose, verify and
/// commit. A node passes its [`StaveApp`](crate::StaveApp); tests wrap it (a proposer that
/// forges blocks, say) to check what the other validators do. Blocks the calling thread
/// (commonware's runtime runs on it; the network keeps running on its own). Panics if
/// the configuration cannot work: the network's certificate not holding `key`, or its
/// frames too small.
pub fn run_validator<A>(config: ValidatorConfig, app: A)
where
    A: Application<
            tokio::Context,
            SigningScheme = Scheme,
            Context = Context<Digest, ed25519::PublicKey>,
            Block = ConsensusBlock,
            Input = (),
        > + Reporter<Activity = Update<ConsensusBlock>>
        + Clone
        + Send
        + Sync
        + 'static,
{
    let runner = tokio::Runner::new(tokio::Config::new().with_storage_directory(&config.storage));
    runner.start(|context| async move {
        let public = config.key.public_key();
        assert_eq!(
            config.network.local_id(),
            validator_node_id(&public),
            "the network's TLS certificate must hold this validator's consensus key"
        );
        // The set of the epoch the chain actor names first; each epoch entered replaces it.
        let first: Vec<ed25519::PublicKey> = config
            .sets
            .get(config.epoch_starts.borrow().epoch)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        // Channels are registered before the engines start, so nothing sent to this node
        // once they run is routed to "unknown module".
        let net = ConsensusNet::new(config.network.clone(), &first)
            .expect("the network carries consensus");
        let channel = |channel| net.register(channel).expect("a consensus channel");
        let votes = channel(VOTES);
        let certificates = channel(CERTIFICATES);
        let resolver = channel(RESOLVER);
        let broadcast = channel(BROADCAST);
        let backfill = channel(BACKFILL);
        let unblocks = net.clone();
        context
            .child("unblocks")
            .spawn(move |context| unblocks.report_unblocks(context));

        let namespace = scheme_namespace(&config.namespace);
        let schemes = EpochSchemes::new(config.sets.clone(), &namespace, config.key.clone());
        let page_cache = CacheRef::new(JOURNAL_PAGE_SIZE, JOURNAL_CACHE_PAGES);

        let backfill_resolver = marshal_resolver::init(
            context.child("marshal_resolver"),
            marshal_resolver::Config {
                public_key: public.clone(),
                peer_provider: net.clone(),
                blocker: net.clone(),
                mailbox_size: MAILBOX,
                fetch_timeout: NZDuration!(Duration::from_secs(2)),
                fetch_retry_delay: Duration::from_millis(100),
                priority_requests: false,
                priority_responses: false,
            },
            backfill,
        );
        let (broadcast_engine, buffer) = buffered::Engine::new(
            context.child("broadcast"),
            buffered::Config {
                public_key: public.clone(),
                mailbox_size: MAILBOX,
                deque_size: 16,
                priority: false,
                codec_config: (),
                peer_provider: net.clone(),
                strategy: Sequential,
            },
        );
        broadcast_engine.start(broadcast);

        let finalizations = prunable::Archive::init(
            context.child("finalizations_by_height"),
            archive(
                "finalizations",
                page_cache.clone(),
                Scheme::certificate_codec_config_unbounded(),
            ),
        )
        .await
        .expect("finalizations archive");
        let blocks = prunable::Archive::init(
            context.child("finalized_blocks"),
            archive("blocks", page_cache.clone(), ()),
        )
        .await
        .expect("blocks archive");

        let epocher = FixedEpocher::new(config.epoch_length);
        let genesis_digest = config.genesis.digest();
        let genesis = Digested::precomputed(config.genesis.clone(), genesis_digest);
        let (marshal_actor, marshal_mailbox, _floor) = Marshal::init(
            context.child("marshal"),
            finalizations,
            blocks,
            marshal::Config {
                provider: schemes.clone(),
                epocher: epocher.clone(),
                start: marshal::Start::Genesis(genesis),
                partition_prefix: "stave-marshal".to_string(),
                mailbox_size: MAILBOX,
                view_retention: ViewDelta::new(10),
                prunable_items_per_section: NZU64!(1024),
                page_cache: page_cache.clone(),
                replay_buffer: IO_BUFFER,
                key_write_buffer: IO_BUFFER,
                value_write_buffer: IO_BUFFER,
                block_codec_config: (),
                max_repair: NZUsize!(64),
                max_pending_acks: MAX_PENDING_ACKS,
                strategy: Sequential,
            },
        )
        .await;

        let inline = Inline::new(
            context.child("application"),
            app.clone(),
            marshal_mailbox.clone(),
            epocher.clone(),
        );
        let certification_timeout = config.leader_timeout * 2;
        // How often a validator stuck in a view rebroadcasts its timeout vote and the
        // certificate that entered the view. Votes sent while links were down (a
        // partition) are lost, and the view resumes only at the first retry after they
        // are back: every leader timeout keeps that within two of them.
        let timeout_retry = config.leader_timeout;
        let leader_timeout = config.leader_timeout;
        let blocker = net.clone();
        let reporter = Reporters::from((inline.clone(), config.finalizations));
        let start_engine = move |engine: EpochEngine, channels: EpochChannels| {
            let EpochEngine {
                context,
                epoch,
                floor,
                scheme,
            } = engine;
            let engine = simplex::Engine::new(
                context,
                simplex::Config {
                    scheme,
                    elector: RoundRobin::<Sha256>::default(),
                    blocker: blocker.clone(),
                    automaton: inline.clone(),
                    relay: inline.clone(),
                    reporter: reporter.clone(),
                    track_historical_votes: false,
                    strategy: Sequential,
                    partition: epochs::partition(epoch),
                    mailbox_size: MAILBOX,
                    epoch,
                    floor: simplex::Floor::Genesis(floor),
                    replay_buffer: IO_BUFFER,
                    write_buffer: IO_BUFFER,
                    page_cache: page_cache.clone(),
                    leader_timeout,
                    certification_timeout,
                    timeout_retry,
                    view_retention: SIMPLEX_VIEW_RETENTION,
                    // A validator that is down would cost every view it leads a full
                    // leader timeout. Once it has been silent for longer than the
                    // certification timeout and the retry interval (the engine requires
                    // both), the views it leads are nullified at once, until it is heard
                    // from again.
                    skip: simplex::SkipPolicy::Enabled {
                        timeout: certification_timeout.max(timeout_retry) + SKIP_MARGIN,
                        budget: simplex::SkipBudget::Participants,
                    },
                    fetch_timeout: NZDuration!(Duration::from_secs(1)),
                    fetch_retry_delay: Duration::from_millis(100),
                    forward: simplex::ForwardPolicy::Disabled,
                },
            );
            engine.start(channels.votes, channels.certificates, channels.resolver)
        };
        let (marshal, tips) = (marshal_mailbox.clone(), config.committed_tips);
        context
            .child("floor")
            .spawn(move |_| raise_floor_to_committed_tips(marshal, tips));
        let marshal_handle = marshal_actor.start(app, buffer, backfill_resolver);
        context.child("epochs").spawn(move |context| {
            epochs::run(
                context,
                epocher,
                [votes, certificates, resolver],
                EpochParts {
                    schemes,
                    sets: config.sets,
                    net,
                    marshal: marshal_mailbox,
                    me: public,
                },
                config.epoch_starts,
                start_engine,
            )
        });
        let _ = marshal_handle.await;
    });
}

/// Moves marshal's floor up to each finalized tip in `tips` that the chain committed
/// while marshal is more than [`CATCHING_UP_BLOCKS`] below it (nearer, marshal delivers
/// the blocks between soon enough itself). The floor is the tip's
/// finalization, which marshal holds (it reported the tip); marshal then counts the blocks
/// below it as processed and delivers the tip (acknowledged: already committed) and what
/// follows it.
async fn raise_floor_to_committed_tips(
    marshal: marshal::core::Mailbox<Scheme, Standard<ConsensusBlock>>,
    mut tips: watch::Receiver<u64>,
) {
    while tips.changed().await.is_ok() {
        let tip = *tips.borrow_and_update();
        let Some(processed) = marshal.get_processed().await else {
            continue;
        };
        if processed.height().get() + CATCHING_UP_BLOCKS >= tip {
            continue;
        }
        if let Some(finalization) = marshal.get_finalization(Height::new(tip)).await {
            tracing::debug!(
                tip,
                processed = processed.height().get(),
                "marshal's floor moved up to a committed tip"
            );
            marshal.set_floor(finalization);
        }
    }
}
