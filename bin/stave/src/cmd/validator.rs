//! A node's `[consensus]` section: the node is one of the genesis's validators and
//! agrees on blocks with the others through `stave-consensus` (commonware Simplex and
//! its marshal), whose channels ride on the node's `[p2p]` network. The chain actor
//! (propose, verify, commit) runs on a thread of its own; the engine runs on another.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context;
use serde::Deserialize;
use stave_consensus::{
    ConsensusBlock, OtherValidators, StaveApp, ValidatorConfig, chain_actor, keys, run_validator,
};
use stave_node::{BlockProducer, Produced};
use stave_primitives::{ChainSpec, keccak256};
use stave_txpool::TxPool;
use tokio::sync::{broadcast, oneshot};

use super::p2p::P2p;

/// Default of `leader_timeout_ms`: how long a view waits for its leader's proposal.
const DEFAULT_LEADER_TIMEOUT_MS: u64 = 3_000;

/// The `[consensus]` section of a node's config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsensusConfig {
    /// This validator's consensus key: a file holding its ed25519 seed in hex (relative
    /// to the config file). The `[p2p]` certificate must hold the same key.
    key: PathBuf,
    /// Where the engine keeps its journals (default `<datadir>/consensus`).
    storage: Option<PathBuf>,
    /// How long a view waits for its leader's proposal before the validators move on,
    /// in milliseconds. Must exceed `block_time_ms`, which an idle leader waits for
    /// transactions before it proposes an empty block.
    leader_timeout_ms: Option<u64>,
}

impl ConsensusConfig {
    /// How long a view waits for its leader's proposal.
    fn leader_timeout(&self) -> Duration {
        Duration::from_millis(self.leader_timeout_ms.unwrap_or(DEFAULT_LEADER_TIMEOUT_MS))
    }

    /// How old a validator's head gets at most while it keeps up: the chain makes a block
    /// at least every `block_time`, and a view whose leader is down ends after the leader
    /// timeout; twice that for margin. A head older than this means the node was away
    /// (paused, cut off, restarted) and is catching up.
    pub fn head_stale_after(&self, block_time: Duration) -> Duration {
        2 * self.leader_timeout() + block_time
    }
}

/// What the consensus side needs from the rest of the node.
pub struct ValidatorParts<'a> {
    /// The chain's genesis (with its validator set).
    pub spec: &'a ChainSpec,
    /// Directory relative paths in the config are relative to.
    pub base: &'a Path,
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
}

/// The namespace the engine signs and connects under: the genesis block hash, the chain
/// id (which no header carries) and the validator set, so nodes of another chain (or the
/// same genesis state under another chain id or validator set) accept none of each
/// other's votes.
fn namespace(spec: &ChainSpec, genesis: &ConsensusBlock) -> Vec<u8> {
    let validators: Vec<u8> = spec.validators().iter().flat_map(|key| key.0).collect();
    [
        b"stave-".as_slice(),
        genesis.hash().as_slice(),
        &spec.chain_id().to_be_bytes(),
        keccak256(&validators).as_slice(),
    ]
    .concat()
}

/// Starts this validator: checks its key against the genesis and the `[p2p]`
/// certificate, then runs the chain actor and the engine on threads of their own.
/// Returns the chain actor's thread, which ends (and then signals `done`) on an error (a
/// block that cannot be committed stops the node) or after [`StaveApp::stop_chain`] on
/// the returned handle.
pub fn start(
    config: &ConsensusConfig,
    parts: ValidatorParts<'_>,
    done: oneshot::Sender<()>,
) -> anyhow::Result<(JoinHandle<anyhow::Result<()>>, StaveApp)> {
    let ValidatorParts {
        spec,
        base,
        datadir,
        producer,
        pool,
        p2p,
        heads,
        idle_wait,
    } = parts;
    let key_path = base.join(&config.key);
    let seed = std::fs::read_to_string(&key_path)
        .with_context(|| format!("reading the consensus key {}", key_path.display()))
        .and_then(|text| {
            keys::parse_seed(&text).with_context(|| format!("in {}", key_path.display()))
        })?;
    let key = keys::private_key(&seed);
    let public = keys::public_key_bytes(&key);
    anyhow::ensure!(
        !spec.validators().is_empty(),
        "the genesis names no validators (config.stave.validators); `stave testnet init` writes one that does"
    );
    anyhow::ensure!(
        spec.validators().contains(&public),
        "this node's consensus key {public} is not one of the genesis's validators"
    );
    anyhow::ensure!(
        stave_net::tls::ed25519_node_id(&public.0) == p2p.network.local_id(),
        "the [p2p] certificate's key is not this validator's consensus key {public}: issue the certificate for that key (`stave testnet init` does)"
    );
    let validators = spec
        .validators()
        .iter()
        .map(keys::public_key)
        .collect::<Result<Vec<_>, _>>()
        .context("in the genesis's validator set")?;
    let leader_timeout = config.leader_timeout();
    anyhow::ensure!(
        leader_timeout > idle_wait,
        "consensus.leader_timeout_ms ({} ms) must exceed block_time_ms ({} ms), or an idle leader's view times out before it proposes",
        leader_timeout.as_millis(),
        idle_wait.as_millis()
    );
    // Blocks and senders taken from the other validators when catching up, rather than
    // waited for and recovered.
    let others = OtherValidators::new(
        p2p.gossip.clone(),
        &validators,
        &keys::public_key(&public).context("this validator's consensus key")?,
        tokio::runtime::Handle::current(),
    );
    let (actor, app) = chain_actor(producer, pool, idle_wait, move |produced| {
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block finalized"
        );
        // No subscriber is not an error.
        let _ = heads.send(Arc::new(produced.clone()));
    })
    .context("starting the chain actor")?;
    let actor = actor.with_catch_up(Box::new(others), p2p.catching_up.clone());
    let app = app.with_catching_up(p2p.catching_up.clone());
    let genesis = ConsensusBlock::genesis(spec);
    let validator = ValidatorConfig {
        key,
        validators,
        network: p2p.network.clone(),
        storage: config
            .storage
            .as_ref()
            .map_or_else(|| datadir.join("consensus"), |dir| base.join(dir)),
        namespace: namespace(spec, &genesis),
        genesis,
        leader_timeout,
        committed_tips: app.committed_tips(),
    };
    let actor = std::thread::Builder::new()
        .name("chain-actor".into())
        .spawn(move || {
            let result = actor.run().context("committing a finalized block");
            let _ = done.send(());
            result
        })
        .context("starting the chain actor")?;
    let chain = app.clone();
    std::thread::Builder::new()
        .name("consensus".into())
        .spawn(move || run_validator(validator, app))
        .context("starting the consensus engine")?;
    println!("validator {public}: consensus on the P2P network");
    Ok((actor, chain))
}

#[cfg(test)]
mod tests {
    use stave_primitives::B256;

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

    #[test]
    fn a_head_goes_stale_after_two_leader_timeouts_and_a_block_time() {
        let config: ConsensusConfig = toml::from_str("key = \"k\"").expect("parses");
        let block_time = Duration::from_millis(1_000);
        assert_eq!(config.head_stale_after(block_time), Duration::from_secs(7));
        let config: ConsensusConfig =
            toml::from_str("key = \"k\"\nleader_timeout_ms = 500").expect("parses");
        assert_eq!(
            config.head_stale_after(block_time),
            Duration::from_millis(2_000)
        );
    }
}
