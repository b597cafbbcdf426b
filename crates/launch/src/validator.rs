//! A node's `[consensus]` section: the node holds a consensus key and agrees on blocks
//! with the other validators through `stave-consensus` (commonware Simplex and its
//! marshal), whose channels ride on the node's `[p2p]` network. It votes in the epochs
//! whose validators (the genesis's, then the governance contract's) hold its key, and
//! follows the chain in the others: a validator the consortium adds later starts from
//! the same config as the first ones. The chain actor (propose, verify, commit) runs on
//! a thread of its own; the engine runs on another.
//!
//! Both threads run under the node's [`Supervisor`]: if either fails (a commit that
//! fails, an engine task that panics on a journal it cannot write), the node stops.
//!
//! The engine cannot be stopped (commonware's runner has no stop): a node stopped in a
//! process that goes on shuts the network it rides on, and its thread idles until the
//! process ends.

use std::{
    num::NonZeroU64,
    path::Path,
    sync::{Arc, atomic::AtomicU64},
    thread::JoinHandle,
    time::Duration,
};

use stave_consensus::{
    CertifiedPeers, ConsensusBlock, FinalizedPusher, RunChecker, StaveApp, ValidatorConfig,
    ValidatorSets, chain_actor, keys, run_validator,
};
use stave_node::{BlockProducer, Produced};
use stave_primitives::{B256, ChainSpec, keccak256};
use stave_txpool::TxPool;
use tokio::sync::broadcast;

use crate::{
    ConsensusConfig, LaunchError, allow_list::EpochSets, p2p::P2p, supervisor::Supervisor,
};

/// What the consensus side needs from the rest of the node.
pub(crate) struct ValidatorParts<'a> {
    /// The chain's genesis (with its validator set).
    pub spec: &'a ChainSpec,
    /// The node's data dir.
    pub datadir: &'a Path,
    /// The producer over the node's chain and pool.
    pub producer: BlockProducer<'static>,
    /// The txpool proposals are built from.
    pub pool: Arc<TxPool>,
    /// The node's network: consensus channels ride on it.
    pub p2p: &'a P2p,
    /// Where committed blocks go (RPC subscriptions).
    pub heads: broadcast::Sender<Arc<Produced>>,
    /// How long an idle leader waits for transactions before proposing an empty block.
    pub idle_wait: Duration,
    /// Where the highest finalized height consensus reports goes (`eth_syncing`).
    pub highest_block: Arc<AtomicU64>,
}

/// A started validator.
pub(crate) struct Validator {
    /// The chain actor's thread: it ends on an error (a block that cannot be committed
    /// stops the node) or after [`StaveApp::stop_chain`].
    pub actor: JoinHandle<()>,
    /// The handle that stops the chain actor.
    pub chain: StaveApp,
    /// The validator's consensus public key, as the genesis names it.
    pub public: B256,
    /// Its epochs' validator sets, which the P2P allow-list keeps admitted.
    pub epochs: EpochSets,
}

/// The namespace the engine signs and connects under: the genesis block hash, the chain
/// id (which no header carries), the validator set and the epoch length, so nodes of
/// another chain (or the same genesis state under another chain id, validator set or
/// epoch length) accept none of each other's votes. A genesis without epochs adds no
/// epoch length, so chains made before epochs keep their namespace.
pub(crate) fn namespace(spec: &ChainSpec, genesis: &ConsensusBlock) -> Vec<u8> {
    let validators: Vec<u8> = spec.validators().iter().flat_map(|key| key.0).collect();
    let epochs = match spec.epoch_length() {
        u64::MAX => Vec::new(),
        length => length.to_be_bytes().to_vec(),
    };
    [
        b"stave-".as_slice(),
        genesis.hash().as_slice(),
        &spec.chain_id().to_be_bytes(),
        keccak256(&validators).as_slice(),
        &epochs,
    ]
    .concat()
}

/// The catch-up source of a node of the chain `spec` describes, whose engine signs under
/// `namespace`: its peers on `p2p`, their runs checked against `sets`.
pub(crate) fn certified_peers(
    spec: &ChainSpec,
    p2p: &P2p,
    sets: Arc<ValidatorSets>,
    namespace: &[u8],
) -> CertifiedPeers {
    let length = NonZeroU64::new(spec.epoch_length()).unwrap_or(NonZeroU64::MAX);
    let checker = RunChecker::new(sets, namespace, length);
    CertifiedPeers::new(
        p2p.gossip.clone(),
        p2p.network.clone(),
        checker,
        tokio::runtime::Handle::current(),
    )
}

/// Each epoch's validators, starting from the genesis's (which a consensus chain must
/// name).
pub(crate) fn genesis_sets(spec: &ChainSpec) -> Result<Arc<ValidatorSets>, LaunchError> {
    ensure(!spec.validators().is_empty(), || {
        "the genesis names no validators (config.stave.validators); `stave testnet init` writes one that does".into()
    })?;
    let validators = spec
        .validators()
        .iter()
        .map(keys::public_key)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| LaunchError::Key {
            what: "in the genesis's validator set".into(),
            source,
        })?;
    Ok(Arc::new(ValidatorSets::new(&validators)))
}

/// What a chain actor does with each block it commits: logs it (`what` says how it came)
/// and hands it to the RPC subscribers.
pub(crate) fn publish(
    heads: broadcast::Sender<Arc<Produced>>,
    what: &'static str,
) -> impl FnMut(&Produced) {
    move |produced| {
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "{what}"
        );
        // No subscriber is not an error.
        let _ = heads.send(Arc::new(produced.clone()));
    }
}

/// Fails with `message` unless `holds`.
fn ensure(holds: bool, message: impl FnOnce() -> String) -> Result<(), LaunchError> {
    match holds {
        true => Ok(()),
        false => Err(LaunchError::Config(message())),
    }
}

/// Starts this validator: checks its key against the genesis and the `[p2p]`
/// certificate, then runs the chain actor and the engine on threads of their own, under
/// `supervisor`. Runs within the node's runtime.
pub(crate) fn start(
    config: &ConsensusConfig,
    parts: ValidatorParts<'_>,
    supervisor: &Supervisor,
) -> Result<Validator, LaunchError> {
    let ValidatorParts {
        spec,
        datadir,
        producer,
        pool,
        p2p,
        heads,
        idle_wait,
        highest_block,
    } = parts;
    let key_path = &config.key;
    let text = std::fs::read_to_string(key_path).map_err(LaunchError::io(format!(
        "reading the consensus key {}",
        key_path.display()
    )))?;
    let seed = keys::parse_seed(&text).map_err(|source| LaunchError::Key {
        what: format!("in {}", key_path.display()),
        source,
    })?;
    let key = keys::private_key(&seed);
    let public = keys::public_key_bytes(&key);
    let sets = genesis_sets(spec)?;
    if !spec.validators().contains(&public) {
        tracing::info!(%public, "this node's consensus key is not one of the genesis's validators: it follows the chain and votes from the epoch the governance contract adds it in");
    }
    ensure(
        stave_net::tls::ed25519_node_id(&public.0) == p2p.network.local_id(),
        || {
            format!(
                "the [p2p] certificate's key is not this validator's consensus key {public}: issue the certificate for that key (`stave testnet init` does)"
            )
        },
    )?;
    // `NodeConfig::check` saw it exceed the block time, the idle leader's wait.
    let leader_timeout = config.leader_timeout;
    let (actor, app) = chain_actor(producer, pool, idle_wait, publish(heads, "block finalized"))
        .map_err(LaunchError::import("starting the chain actor"))?;
    let genesis = ConsensusBlock::genesis(spec);
    let namespace = namespace(spec, &genesis);
    // Certified blocks taken from peers when catching up, rather than waited for from
    // marshal and their senders recovered.
    let peers = certified_peers(spec, p2p, sets.clone(), &namespace);
    let epoch_length =
        NonZeroU64::new(spec.epoch_length()).expect("the genesis refuses epochs under 2 blocks");
    // Each block it commits goes to the full nodes among its peers as it is finalized.
    let pusher = FinalizedPusher::new(
        p2p.gossip.clone(),
        p2p.network.clone(),
        sets.clone(),
        epoch_length,
        tokio::runtime::Handle::current(),
    );
    let (actor, epoch_starts) = actor
        .with_catch_up(Box::new(peers), p2p.catching_up.clone())
        .pushing(pusher)
        .with_epochs(spec.epoch_length(), sets.clone())?;
    let app = app
        .with_catching_up(p2p.catching_up.clone())
        .with_tip(highest_block);
    let epochs = EpochSets {
        sets: sets.clone(),
        starts: epoch_starts.clone(),
    };
    let validator = ValidatorConfig {
        key,
        finalizations: app.finalizations(sets.clone()),
        sets,
        network: p2p.network.clone(),
        storage: config
            .storage
            .clone()
            .unwrap_or_else(|| datadir.join("consensus")),
        namespace,
        genesis,
        leader_timeout,
        epoch_length,
        epoch_starts,
        committed_tips: app.committed_tips(),
    };
    let actor = supervisor.spawn("chain actor", "chain-actor", move || {
        actor
            .run()
            .map_err(LaunchError::import("committing a finalized block"))
    })?;
    let chain = app.clone();
    // Never joined: it cannot be stopped (see above). Its end is a failure unless the
    // node is stopping; a panic of any of its tasks (commonware's runner passes it on
    // to this thread) is one.
    supervisor.spawn("consensus engine", "consensus", move || {
        run_validator(validator, app);
        Ok(())
    })?;
    Ok(Validator {
        actor,
        chain,
        public,
        epochs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_validator_set_is_another_namespace() {
        let spec = ChainSpec::dev(5, 1);
        let one = spec
            .clone()
            .with_validators(vec![B256::repeat_byte(1)])
            .expect("valid");
        let two = spec
            .with_validators(vec![B256::repeat_byte(1), B256::repeat_byte(2)])
            .expect("valid");
        let of = |spec: &ChainSpec| namespace(spec, &ConsensusBlock::genesis(spec));
        assert_ne!(of(&one), of(&two));
        assert_eq!(of(&one), of(&one.clone()));
        // The genesis header has no chain id: the namespace must carry it.
        let other_chain = ChainSpec::dev(6, 1)
            .with_validators(vec![B256::repeat_byte(1)])
            .expect("valid");
        assert_eq!(
            ConsensusBlock::genesis(&other_chain).hash(),
            ConsensusBlock::genesis(&one).hash()
        );
        assert_ne!(of(&one), of(&other_chain));
    }
}
