//! A full node of a consensus chain (`[consensus] full_node = true`): it holds no
//! consensus key and never votes. Its chain actor (the validators' own, without an engine)
//! imports each block the validators push as they finalize it (`stave_consensus::push`),
//! and asks its peers for certified runs whenever its head has stood still for a moment
//! while no push comes or pushes leave a gap; each block goes through the import pipeline
//! once its finalization certificate checks against the validators of its epoch
//! (`stave_consensus::catch_up`). It records each epoch's validators as it commits the
//! epoch before, so it can check the next epoch's certificates. It serves JSON-RPC to applications; the transactions they
//! send reach the validators by gossip.
//!
//! The chain actor runs under the node's [`Supervisor`]: a block it cannot commit stops
//! the node.

use std::{
    sync::{Arc, atomic::AtomicU64},
    thread::JoinHandle,
    time::Duration,
};

use bytes::Bytes;
use stave_consensus::{ConsensusBlock, PushedBlocks, StaveApp, chain_actor};
use stave_net::{Gossip, ReceivedBlock};
use stave_node::{BlockProducer, Produced};
use stave_primitives::ChainSpec;
use stave_txpool::TxPool;
use tokio::sync::{broadcast, mpsc};

use crate::{
    LaunchError,
    allow_list::EpochSets,
    p2p::P2p,
    supervisor::Supervisor,
    validator::{certified_peers, genesis_sets, namespace, publish},
};

/// How long a full node's head stands still before it asks its peers for newer blocks
/// while validators do not push them: a fraction of a block time, so it trails the
/// validators' finalized head by about one block even then.
const POLL: Duration = Duration::from_millis(50);

/// How often a full node sends its peers again the transactions that stayed in its pool
/// since the last time, and how many at most: a validator catching up when they first
/// came dropped them unremembered (`TxAdmission::deferring`), and nothing else would bring
/// them to it.
const REBROADCAST: Duration = Duration::from_secs(2);
const REBROADCAST_MAX: usize = 10_000;

/// What a full node needs from the rest of the node.
pub(crate) struct FullNodeParts<'a> {
    /// The chain's genesis (with its validator set).
    pub spec: &'a ChainSpec,
    /// The producer over the node's chain and pool (it only imports).
    pub producer: BlockProducer<'static>,
    /// The node's txpool (included transactions leave it as blocks are imported).
    pub pool: Arc<TxPool>,
    /// The node's network: its peers bring the blocks (it takes the pushed ones).
    pub p2p: &'a mut P2p,
    /// Where committed blocks go (RPC subscriptions).
    pub heads: broadcast::Sender<Arc<Produced>>,
    /// Where the highest certified height its peers reach goes (`eth_syncing`).
    pub highest_block: Arc<AtomicU64>,
}

/// A started full node.
pub(crate) struct FullNode {
    /// The chain actor's thread: it ends on an error or after [`StaveApp::stop_chain`].
    pub actor: JoinHandle<()>,
    /// The handle that stops the chain actor.
    pub chain: StaveApp,
    /// Its epochs' validator sets, which the P2P allow-list keeps admitted.
    pub epochs: EpochSets,
}

/// Starts the full node's chain actor on a thread of its own, under `supervisor`. Runs
/// within the node's runtime.
pub(crate) fn start(
    parts: FullNodeParts<'_>,
    supervisor: &Supervisor,
) -> Result<FullNode, LaunchError> {
    let FullNodeParts {
        spec,
        producer,
        pool,
        p2p,
        heads,
        highest_block,
    } = parts;
    let sets = genesis_sets(spec)?;
    let genesis = ConsensusBlock::genesis(spec);
    let pushes = PushedBlocks::default();
    let peers = certified_peers(spec, p2p, sets.clone(), &namespace(spec, &genesis))
        .reporting_highest(highest_block)
        .with_pushes(pushes.clone());
    tokio::spawn(rebroadcast(pool.clone(), p2p.gossip.clone()));
    // The pool's wait only matters to a proposer; a full node never proposes.
    let (actor, chain) = chain_actor(
        producer,
        pool,
        Duration::ZERO,
        publish(heads, "block imported"),
    )
    .map_err(LaunchError::import("starting the chain actor"))?;
    let (actor, starts) = actor
        .with_catch_up(Box::new(peers), p2p.catching_up.clone())
        .polling(POLL)
        .with_epochs(spec.epoch_length(), sets.clone())?;
    let actor = supervisor.spawn("chain actor", "chain-actor", move || {
        actor
            .run()
            .map_err(LaunchError::import("importing a certified block"))
    })?;
    tokio::spawn(take_pushes(p2p.take_blocks(), pushes, chain.clone()));
    Ok(FullNode {
        actor,
        chain,
        epochs: EpochSets { sets, starts },
    })
}

/// Keeps the blocks validators push in `pushes` and wakes the chain actor behind `chain`
/// for each. Runs until the node's gossip ends.
async fn take_pushes(
    mut blocks: mpsc::Receiver<ReceivedBlock>,
    pushes: PushedBlocks,
    chain: StaveApp,
) {
    while let Some(block) = blocks.recv().await {
        if pushes.insert(block) {
            chain.catch_up_now();
        }
    }
}

/// Every [`REBROADCAST`], gossips again the transactions the pool held a round ago and
/// still holds (unincluded). Runs until the node's runtime ends.
async fn rebroadcast(pool: Arc<TxPool>, gossip: Gossip) {
    let mut ticks = tokio::time::interval(REBROADCAST);
    let mut round_start = pool.admission_position();
    loop {
        ticks.tick().await;
        let next = pool.admission_position();
        let stale: Vec<Bytes> = pool
            .encoded_before(round_start, REBROADCAST_MAX)
            .into_iter()
            .map(Bytes::from)
            .collect();
        round_start = next;
        if !stale.is_empty() {
            tracing::debug!(
                txs = stale.len(),
                "rebroadcasting transactions still unincluded"
            );
            gossip.rebroadcast(&stale);
        }
    }
}
