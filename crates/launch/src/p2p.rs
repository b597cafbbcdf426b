//! The node's peer-to-peer side (the `[p2p]` config section): the mutual-TLS network and
//! transaction and compact-block gossip on it, with the txpool admitting what peers send.

use std::{collections::HashSet, sync::Arc, time::Duration};

use bytes::Bytes;
use stave_consensus::CatchingUp;
use stave_net::{
    BlockSource, Gossip, GossipConfig, HeaderSenders, Network, NetworkConfig, NodeId, NodeIdentity,
    NodeTls, ReceivedBlock, Task, TxAdmission,
};
use stave_node::{ChainView, encoded_block};
use stave_primitives::ChainSpec;
use stave_storage::KvStore;
use stave_txpool::TxPool;
use tokio::sync::mpsc;

use crate::{LaunchError, P2pConfig, config::read};

/// The running P2P side.
pub(crate) struct P2p {
    /// The network.
    pub network: Network,
    /// Gossip on it.
    pub gossip: Gossip,
    /// Blocks rebuilt from peers' compact blocks and pushes (see [`P2p::take_blocks`]).
    pub blocks: mpsc::Receiver<ReceivedBlock>,
    /// Where the RPC server puts transactions clients submitted, for gossip.
    pub admitted: mpsc::UnboundedSender<Vec<u8>>,
    /// Set while the node is behind its chain (a validator's consensus keeps it, and a
    /// chain actor while it imports certified runs, which on a full node is most of the
    /// time): transactions peers gossip are dropped unremembered meanwhile.
    pub catching_up: Arc<CatchingUp>,
    /// How far ahead of its head a follower holds peers' blocks.
    pub future_blocks: u64,
    /// The network's and gossip's long-lived tasks, for the node's supervisor to watch.
    pub tasks: Vec<Task>,
}

impl P2p {
    /// Takes the blocks rebuilt from peers' compact blocks and pushes, for the one loop
    /// that reads them; the channel left in their place is closed.
    pub fn take_blocks(&mut self) -> mpsc::Receiver<ReceivedBlock> {
        std::mem::replace(&mut self.blocks, mpsc::channel(1).1)
    }
}

/// What admits the transactions peers gossip: the txpool, against the newest state.
pub(crate) struct Admission {
    /// The chain's newest state.
    pub view: Arc<ChainView<'static>>,
    /// The pool gossiped transactions go into.
    pub pool: Arc<TxPool>,
    /// On a validator: how old a head means the node is catching up (see
    /// `ConsensusConfig::head_stale_after`). Gossip is ignored meanwhile, from the moment
    /// a paused or restarted node runs again, before its consensus learns how far behind
    /// it is.
    pub head_stale_after: Option<Duration>,
}

/// The txpool, admitting what peers gossip unless the node is catching up: those
/// transactions are most likely in the blocks it lacks, and admitting them would recover
/// their signatures for nothing, as go-ethereum's pool ignores them while it syncs.
struct PoolAdmission {
    admission: Admission,
    catching_up: Arc<CatchingUp>,
}

impl PoolAdmission {
    /// True when a validator's head, timestamped `head_time`, is stale.
    fn head_is_stale(&self, head_time: u64) -> bool {
        self.admission
            .head_stale_after
            .is_some_and(|after| is_stale(head_time, stave_node::unix_seconds(), after))
    }
}

/// True when a head timestamped `head_time` is more than `after` old at `now` (both in
/// seconds since the Unix epoch; a head from a clock ahead of ours is not stale).
fn is_stale(head_time: u64, now: u64, after: Duration) -> bool {
    now.saturating_sub(head_time) > after.as_secs()
}

impl TxAdmission for PoolAdmission {
    fn deferring(&self) -> bool {
        // Consensus says the node is catching up: no need to read the head.
        if self.catching_up.get() {
            return true;
        }
        self.admission.head_stale_after.is_some()
            && self
                .admission
                .view
                .with_state(None, |_, header| self.head_is_stale(header.timestamp))
                .unwrap_or(true)
    }

    fn admit(&self, txs: &[Bytes]) -> Vec<bool> {
        let Admission { view, pool, .. } = &self.admission;
        view.with_state(None, |state, header| {
            let raw: Vec<Vec<u8>> = txs.iter().map(|tx| tx.to_vec()).collect();
            pool.add(&raw, state, header.base_fee_per_gas)
                .iter()
                .map(Result::is_ok)
                .collect()
        })
        .unwrap_or_else(|_| vec![false; txs.len()])
    }

    fn held(&self) -> Vec<Bytes> {
        self.admission
            .pool
            .encoded()
            .into_iter()
            .map(Bytes::from)
            .collect()
    }
}

/// The committed blocks, for peers catching up.
struct StoredBlocks(&'static dyn KvStore);

impl BlockSource for StoredBlocks {
    fn block(&self, number: u64) -> Option<Vec<u8>> {
        encoded_block(self.0, number).ok().flatten()
    }

    fn header_senders(&self, number: u64) -> Option<HeaderSenders> {
        let header = stave_storage::read::encoded_header(self.0, number).ok()??;
        let senders = stave_storage::read::senders(self.0, number).ok()??;
        Some(HeaderSenders {
            header: Bytes::from(header),
            senders,
        })
    }

    fn finalization(&self, number: u64) -> Option<Vec<u8>> {
        stave_storage::read::finalization(self.0, number).ok()?
    }
}

/// The node ids of `spec`'s validators: the only peers a validator takes blocks from.
pub(crate) fn validator_ids(spec: &ChainSpec) -> Result<Vec<NodeId>, LaunchError> {
    spec.validators()
        .iter()
        .map(|key| {
            stave_consensus::keys::public_key(key)
                .map(|key| stave_consensus::transport::validator_node_id(&key))
                .map_err(|source| LaunchError::Key {
                    what: "in the genesis's validator set".into(),
                    source,
                })
        })
        .collect()
}

/// Starts the network and gossip described by `config`, with gossiped transactions going
/// through `admission`. `late_groups` are the network groups whose modules register after
/// it starts (see `NetworkConfig::late_groups`); `validators`, on a validator, are the
/// peers whose blocks it takes (a follower takes its `block_sources`'). Runs on the
/// current tokio runtime.
pub(crate) async fn start(
    config: &P2pConfig,
    admission: Admission,
    late_groups: Vec<i16>,
    validators: Option<Vec<NodeId>>,
) -> Result<P2p, LaunchError> {
    let ca = stave_net::tls::ca_certificate_from_pem(&read(&config.ca)?)
        .map_err(LaunchError::tls("reading the CA certificate"))?;
    let identity = NodeIdentity::from_pem("node", &read(&config.cert)?, &read(&config.key)?)
        .map_err(LaunchError::tls("reading the node certificate and key"))?;
    let local = identity.node_id()?;
    let allowed: HashSet<_> = config.allowed.iter().copied().collect();
    let tls = NodeTls::new(&ca, &identity, allowed)?;
    // Every connection and pending handshake takes a descriptor: the caps on them, not
    // the common default soft limit of 1,024, should be what bounds them.
    match stave_net::raise_fd_limit() {
        Ok(limit) => tracing::debug!(limit, "open file limit"),
        Err(error) => tracing::warn!(%error, "the open file limit could not be raised"),
    }
    let mut network_config = NetworkConfig {
        late_groups,
        ..NetworkConfig::new(config.listen, config.peers.clone())
    };
    config.limits.apply(&mut network_config);
    let block_sources = match validators {
        Some(validators) => Some(validators.into_iter().collect()),
        None if config.block_sources.is_empty() => None,
        None => Some(config.block_sources.iter().copied().collect()),
    };
    let network = Network::start(network_config, tls, local)
        .await
        .map_err(|source| LaunchError::Net {
            listen: config.listen,
            source,
        })?;
    let store = admission.view.store();
    let catching_up = Arc::new(CatchingUp::default());
    let (gossip, blocks) = Gossip::start(
        network.clone(),
        Arc::new(PoolAdmission {
            admission,
            catching_up: catching_up.clone(),
        }),
        Some(Arc::new(StoredBlocks(store))),
        GossipConfig {
            block_sources,
            ..GossipConfig::default()
        },
    );
    let (admitted, mut submitted) = mpsc::unbounded_channel::<Vec<u8>>();
    let announcer = gossip.clone();
    let announcing = tokio::spawn(async move {
        while let Some(first) = submitted.recv().await {
            let mut txs = vec![Bytes::from(first)];
            while let Ok(more) = submitted.try_recv() {
                txs.push(Bytes::from(more));
            }
            announcer.announce_txs(txs);
        }
    });
    let mut tasks = network.take_tasks();
    tasks.extend(gossip.take_tasks());
    tasks.push(("gossip announcer", announcing));
    Ok(P2p {
        network,
        gossip,
        blocks,
        admitted,
        catching_up,
        future_blocks: config.limits.future_blocks,
        tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_stale_only_once_older_than_the_limit() {
        let after = Duration::from_secs(7);
        assert!(!is_stale(100, 100, after));
        assert!(
            !is_stale(100, 107, after),
            "exactly the limit is not stale yet"
        );
        assert!(is_stale(100, 108, after));
        assert!(
            !is_stale(110, 100, after),
            "a head from a clock ahead of ours"
        );
    }
}
