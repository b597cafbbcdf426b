//! The node's peer-to-peer side (the `[p2p]` config section): the mutual-TLS network,
//! transaction and compact-block gossip, and, on a node that does not produce blocks,
//! following the producer's blocks through the import pipeline, catching up by number
//! after a gap or a restart.
//!
//! Until consensus lands (issue 12), one node of a network produces and the others follow.

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use bytes::Bytes;
use serde::Deserialize;
use stave_consensus::CatchingUp;
use stave_net::{
    BlockSenders, BlockSource, Gossip, GossipConfig, Network, NetworkConfig, NodeId, NodeIdentity,
    NodeTls, Offence, ReceivedBlock, StaticPeer, TxAdmission, gossip::MAX_BLOCKS_PER_REQUEST,
};
use stave_node::{BlockProducer, ChainView, Produced, encoded_block};
use stave_storage::KvStore;
use stave_txpool::TxPool;
use tokio::{
    runtime::Handle,
    sync::{broadcast, mpsc},
};

/// The `[p2p]` section of a node's config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pConfig {
    /// Where to accept peers.
    listen: SocketAddr,
    /// The chain CA's certificate (PEM), relative to the config file.
    ca: PathBuf,
    /// This node's certificate (PEM), signed by the chain CA.
    cert: PathBuf,
    /// This node's private key (PEM).
    key: PathBuf,
    /// Node ids (hex SHA-256 of a certificate's public key) allowed to connect.
    allowed: Vec<String>,
    /// Peers to dial and keep connected.
    #[serde(default)]
    peers: Vec<PeerConfig>,
}

/// A static peer in the config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerConfig {
    /// The DNS name in its certificate.
    name: String,
    /// Its P2P address.
    address: SocketAddr,
}

/// The running P2P side.
pub struct P2p {
    /// The network.
    pub network: Network,
    /// Gossip on it.
    pub gossip: Gossip,
    /// Blocks rebuilt from peers' compact blocks.
    pub blocks: mpsc::Receiver<ReceivedBlock>,
    /// Where the RPC server puts transactions clients submitted, for gossip.
    pub admitted: mpsc::UnboundedSender<Vec<u8>>,
    /// Set while the node is far behind its chain (a validator's consensus keeps it):
    /// transactions peers gossip are not admitted meanwhile.
    pub catching_up: Arc<CatchingUp>,
}

fn parse_node_id(hex_id: &str) -> anyhow::Result<NodeId> {
    let bytes = hex::decode(hex_id.trim_start_matches("0x"))
        .with_context(|| format!("node id {hex_id} is not hex"))?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("node id {hex_id} is not 32 bytes"))
}

fn read(base: &Path, path: &Path) -> anyhow::Result<String> {
    let path = base.join(path);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// What admits the transactions peers gossip: the txpool, against the newest state.
pub struct Admission {
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
    fn admit(&self, txs: &[Bytes]) -> Vec<bool> {
        let ignored = || {
            metrics::counter!("stave_gossip_txs_ignored_total").increment(txs.len() as u64);
            vec![false; txs.len()]
        };
        // Consensus says the node is catching up: no need to read the head.
        if self.catching_up.get() {
            return ignored();
        }
        let Admission { view, pool, .. } = &self.admission;
        view.with_state(None, |state, header| {
            if self.head_is_stale(header.timestamp) {
                return ignored();
            }
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

    fn senders(&self, number: u64) -> Option<BlockSenders> {
        let hash = stave_storage::read::header(self.0, number)
            .ok()??
            .hash_slow();
        let senders = stave_storage::read::senders(self.0, number).ok()??;
        Some(BlockSenders { hash, senders })
    }
}

/// Starts the network and gossip described by `config` (paths relative to `base`), with
/// gossiped transactions going through `admission`.
/// `late_groups` are the network groups whose modules register after it starts (see
/// `NetworkConfig::late_groups`).
pub async fn start(
    config: &P2pConfig,
    base: &Path,
    admission: Admission,
    late_groups: Vec<i16>,
) -> anyhow::Result<P2p> {
    let ca = stave_net::tls::ca_certificate_from_pem(&read(base, &config.ca)?)
        .context("reading the CA certificate")?;
    let identity = NodeIdentity::from_pem(
        "node",
        &read(base, &config.cert)?,
        &read(base, &config.key)?,
    )
    .context("reading the node certificate and key")?;
    let local = identity.node_id()?;
    let allowed = config
        .allowed
        .iter()
        .map(|id| parse_node_id(id))
        .collect::<anyhow::Result<HashSet<_>>>()?;
    let tls = NodeTls::new(&ca, &identity, allowed)?;
    let peers = config
        .peers
        .iter()
        .map(|peer| StaticPeer {
            name: peer.name.clone(),
            address: peer.address,
        })
        .collect();
    let network_config = NetworkConfig {
        late_groups,
        ..NetworkConfig::new(config.listen, peers)
    };
    let network = Network::start(network_config, tls, local)
        .await
        .with_context(|| format!("starting P2P on {}", config.listen))?;
    let store = admission.view.store();
    let catching_up = Arc::new(CatchingUp::default());
    let (gossip, blocks) = Gossip::start(
        network.clone(),
        Arc::new(PoolAdmission {
            admission,
            catching_up: catching_up.clone(),
        }),
        Some(Arc::new(StoredBlocks(store))),
        GossipConfig::default(),
    );
    let (admitted, mut submitted) = mpsc::unbounded_channel::<Vec<u8>>();
    let announcer = gossip.clone();
    tokio::spawn(async move {
        while let Some(first) = submitted.recv().await {
            let mut txs = vec![Bytes::from(first)];
            while let Ok(more) = submitted.try_recv() {
                txs.push(Bytes::from(more));
            }
            announcer.announce_txs(txs);
        }
    });
    println!(
        "P2P on {} as node 0x{}",
        network.local_addr(),
        hex::encode(local)
    );
    Ok(P2p {
        network,
        gossip,
        blocks,
        admitted,
        catching_up,
    })
}

/// The follower loop: imports peers' blocks in order through the import pipeline,
/// fetching by number whatever a gap (or a restart) left out. Runs until `stop`.
pub fn follow_blocks(
    mut producer: BlockProducer<'static>,
    p2p: P2p,
    runtime: Handle,
    heads: &broadcast::Sender<Arc<Produced>>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let P2p {
        network,
        gossip,
        mut blocks,
        ..
    } = p2p;
    let mut pending: BTreeMap<u64, (NodeId, Bytes)> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let received = runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(200), blocks.recv()).await
        });
        match received {
            Ok(Some(block)) => {
                pending.insert(block.number, (block.from, block.bytes));
            }
            Ok(None) => break,
            Err(_) => continue,
        }
        loop {
            let (head, _) = producer.head()?;
            pending = pending.split_off(&(head + 1));
            let Some((&number, (from, _))) = pending.first_key_value() else {
                break;
            };
            let from = *from;
            let batch = if number == head + 1 {
                pending
                    .pop_first()
                    .map(|(_, (_, bytes))| vec![bytes])
                    .unwrap_or_default()
            } else {
                let count = (number - head - 1).min(u64::from(MAX_BLOCKS_PER_REQUEST)) as u32;
                tracing::info!(from = head + 1, count, "catching up");
                match runtime.block_on(gossip.fetch_blocks(from, head + 1, count)) {
                    Ok(blocks) if !blocks.is_empty() => blocks,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "catching up failed");
                        break;
                    }
                }
            };
            if !import_all(&mut producer, &batch, heads, &network, from) {
                break;
            }
        }
    }
    producer
        .close()
        .context("writing the state to disk before stopping")
}

/// Imports `blocks` in order, overlapping their stages; on a refused block, charges the
/// peer that sent it and returns false.
fn import_all(
    producer: &mut BlockProducer<'static>,
    blocks: &[Bytes],
    heads: &broadcast::Sender<Arc<Produced>>,
    network: &Network,
    from: NodeId,
) -> bool {
    let imported = producer.follow_stream(blocks.iter().map(AsRef::as_ref), |produced| {
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block imported"
        );
        let _ = heads.send(Arc::new(produced));
    });
    if let Err(error) = imported {
        tracing::warn!(%error, "peer's block refused");
        network.penalize(from, Offence::BadMessage);
        return false;
    }
    true
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
