//! What a node needs to start ([`NodeConfig`]), built in code ([`NodeConfig::dev`]) or
//! from the TOML file `stave node --config FILE` reads ([`NodeConfig::from_toml_file`]).
//!
//! The file's keys are all optional; relative paths in it are relative to the file's
//! directory and are resolved when it is read, so a [`NodeConfig`] holds only paths that
//! work from anywhere.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;
use stave_net::{NodeId, StaticPeer};
use stave_primitives::{ChainSpec, dev::MnemonicAccount};
use stave_rpc::RpcConfig;
use stave_state::History;
use stave_storage::DEFAULT_MAP_SIZE;

use crate::LaunchError;

mod check;
mod p2p;
mod rpc;

pub use check::{MAX_BLOCK_TIME, MAX_LEADER_TIMEOUT, MIN_MAP_SIZE};
pub use p2p::P2pLimits;

/// Default Prometheus address of `stave node`.
pub const DEFAULT_METRICS_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9001);
/// Default longest time between blocks.
pub const DEFAULT_BLOCK_TIME: Duration = Duration::from_millis(1_000);
/// Default most transactions per block.
pub const DEFAULT_BLOCK_TXS: usize = 2_500;
/// Default of `leader_timeout_ms`: how long a view waits for its leader's proposal.
pub const DEFAULT_LEADER_TIMEOUT: Duration = Duration::from_millis(3_000);

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The data dir; `None` is a fresh temporary one, removed when the node stops.
    pub datadir: Option<PathBuf>,
    /// The chain's genesis.
    pub genesis: ChainSpec,
    /// The funded accounts whose keys are public (the dev chain's), for a start banner;
    /// empty for any other genesis.
    pub dev_accounts: Vec<MnemonicAccount>,
    /// LMDB map size in bytes: the most the data dir can grow to.
    pub map_size: usize,
    /// JSON-RPC address (HTTP and WebSocket; port 0 picks a free one) and limits.
    pub rpc: RpcConfig,
    /// Where to serve Prometheus metrics; `None` serves none. The recorder is global to
    /// the process: see [`RunningNode::metrics_addr`](crate::RunningNode::metrics_addr).
    pub metrics_addr: Option<SocketAddr>,
    /// Longest time between blocks (an idle validator's wait before an empty proposal).
    pub block_time: Duration,
    /// Most transactions per block; a pool holding that many makes a block at once.
    pub block_txs: usize,
    /// Most times a block is built when transactions selected for it fail (the first
    /// build and refills from the rest of the pool); each build re-executes the block.
    pub block_fill_rounds: usize,
    /// Most accounts and storage slots the state's clean cache holds in memory: the
    /// node's largest memory use grows with it until it is full.
    pub state_cache_entries: usize,
    /// Most transaction senders the sender cache holds (recovered once, at admission).
    pub sender_cache_entries: usize,
    /// Threads that load what blocks will read before execution reads it (0: none). They
    /// mostly wait on the disk, so more of them than cores pays on a state larger than
    /// memory.
    pub prefetch_threads: usize,
    /// A prefetch load slower than this on average came from the disk, and the state
    /// needs prefetching; faster ones came from memory, and a prefetch that meets a run
    /// of them stops (`prefetch_disk_load_us`; a network volume wants more than a local
    /// SSD's default).
    pub prefetch_disk_load: Duration,
    /// Which past blocks' state the node serves: the last 128 (`Recent`, the default of
    /// a node run from a file), every block (`All`, `--dev`'s, as Anvil), or the last N.
    pub history: History,
    /// Most transactions in the txpool (`None`: the pool's default).
    pub pool_max_txs: Option<usize>,
    /// Most transactions per sender in the txpool (`None`: the pool's default).
    pub pool_max_per_sender: Option<usize>,
    /// Whether the node serves JSON-RPC (`[rpc] enabled`, default true). A validator of a
    /// chain whose applications use full nodes may turn it off.
    pub rpc_enabled: bool,
    /// How this node makes blocks.
    pub role: Role,
    /// Peers, certificates and gossip; required by [`Role::Follower`] and
    /// [`Role::Validator`].
    pub p2p: Option<P2pConfig>,
}

/// Settings laid over a config, as `stave node`'s flags are over its file's keys: each
/// one given replaces the config's ([`NodeConfig::apply`]).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// The data dir.
    pub datadir: Option<PathBuf>,
    /// The JSON-RPC address.
    pub rpc_addr: Option<SocketAddr>,
    /// The Prometheus address.
    pub metrics_addr: Option<SocketAddr>,
    /// The longest time between blocks.
    pub block_time: Option<Duration>,
    /// The most transactions per block.
    pub block_txs: Option<usize>,
    /// Which past blocks' state is served.
    pub history: Option<History>,
    /// Threads that prefetch blocks' reads (0: none).
    pub prefetch_threads: Option<usize>,
}

/// How a node makes blocks.
#[derive(Debug, Clone)]
pub enum Role {
    /// It produces blocks alone (a dev chain, or the one producer of a network).
    Producer,
    /// It imports the blocks its peers announce (and fetches those it missed).
    Follower,
    /// It is one of the genesis's validators and agrees on blocks with the others.
    Validator(ConsensusConfig),
    /// A full node of a consensus chain: it holds no consensus key and never votes; it
    /// imports the finalized blocks its peers bring, each checked against a finalization
    /// certificate of the validators, and serves applications.
    FullNode,
}

/// The `[p2p]` section: the mutual-TLS network this node joins.
#[derive(Debug, Clone)]
pub struct P2pConfig {
    /// Where to accept peers (port 0 picks a free one).
    pub listen: SocketAddr,
    /// The chain CA's certificate (PEM file).
    pub ca: PathBuf,
    /// This node's certificate (PEM file), signed by the chain CA.
    pub cert: PathBuf,
    /// This node's private key (PEM file).
    pub key: PathBuf,
    /// The node ids allowed to connect.
    pub allowed: Vec<NodeId>,
    /// Peers to dial and keep connected.
    pub peers: Vec<StaticPeer>,
    /// The node ids whose blocks a follower takes (its producer); empty takes them from
    /// any allowed peer. A validator takes blocks from the validators only.
    pub block_sources: Vec<NodeId>,
    /// What peers may hold of this node (`[p2p.limits]`).
    pub limits: P2pLimits,
}

/// The `[consensus]` section: this validator's key and engine settings.
#[derive(Debug, Clone)]
pub struct ConsensusConfig {
    /// A file holding this validator's ed25519 seed in hex. The `[p2p]` certificate must
    /// hold the same key.
    pub key: PathBuf,
    /// Where the engine keeps its journals (`None`: `<datadir>/consensus`).
    pub storage: Option<PathBuf>,
    /// How long a view waits for its leader's proposal before the validators move on.
    /// Must exceed the block time, which an idle leader waits for transactions before it
    /// proposes an empty block.
    pub leader_timeout: Duration,
}

impl ConsensusConfig {
    /// A validator with `key` and the default engine settings.
    pub fn new(key: PathBuf) -> Self {
        Self {
            key,
            storage: None,
            leader_timeout: DEFAULT_LEADER_TIMEOUT,
        }
    }

    /// How old a validator's head gets at most while it keeps up: the chain makes a block
    /// at least every `block_time`, and a view whose leader is down ends after the leader
    /// timeout; twice that for margin. A head older than this means the node was away
    /// (paused, cut off, restarted) and is catching up.
    pub fn head_stale_after(&self, block_time: Duration) -> Duration {
        2 * self.leader_timeout + block_time
    }
}

impl NodeConfig {
    /// The single-validator dev chain as `stave node --dev` runs it: chain id 1337, the
    /// dev mnemonic's accounts funded, a temporary data dir, JSON-RPC on 8545 open to web
    /// pages of any origin (CORS `*`, as Anvil and Hardhat do), metrics on 9001, a block at
    /// least every second, the state of every block kept.
    pub fn dev() -> Result<Self, LaunchError> {
        let (genesis, dev_accounts) = stave_primitives::dev::dev_chain()?;
        let mut config = Self::producing(genesis, dev_accounts);
        config.rpc.cors_origins = vec!["*".to_owned()];
        config.history = History::All;
        Ok(config)
    }

    /// A producer of `genesis` with every other setting at its default.
    fn producing(genesis: ChainSpec, dev_accounts: Vec<MnemonicAccount>) -> Self {
        let mut rpc = RpcConfig::default();
        // A gas-free chain (base fee 0, which stays 0: every block keeps the genesis's)
        // suggests no tip either, so wallets send zero-priced transactions, which accounts
        // without funds can pay. `[rpc] suggested_tip` still overrides it.
        if genesis.base_fee() == 0 {
            rpc.suggested_tip = 0;
        }
        Self {
            datadir: None,
            genesis,
            dev_accounts,
            map_size: DEFAULT_MAP_SIZE,
            rpc,
            metrics_addr: Some(DEFAULT_METRICS_ADDR),
            block_time: DEFAULT_BLOCK_TIME,
            block_txs: DEFAULT_BLOCK_TXS,
            block_fill_rounds: stave_node::DEFAULT_FILL_ROUNDS,
            state_cache_entries: stave_state::DEFAULT_CLEAN_CACHE_ENTRIES,
            sender_cache_entries: stave_verify::DEFAULT_SENDER_CACHE_CAPACITY,
            prefetch_threads: stave_node::DEFAULT_PREFETCH_THREADS,
            prefetch_disk_load: stave_node::DISK_LOAD,
            history: History::Recent,
            pool_max_txs: None,
            pool_max_per_sender: None,
            rpc_enabled: true,
            role: Role::Producer,
            p2p: None,
        }
    }

    /// The config in the TOML file at `path` (the format `stave node --config` reads);
    /// keys it leaves out take [`NodeConfig::dev`]'s values, a missing `genesis` the dev
    /// chain's.
    pub fn from_toml_file(path: &Path) -> Result<Self, LaunchError> {
        let text = read(path)?;
        Self::from_toml_str(&text, path)
    }

    /// The config in `text`, TOML as [`NodeConfig::from_toml_file`] reads it from the
    /// file at `path` (relative paths in it are taken from `path`'s directory; nothing is
    /// read but the genesis file it names). Any text gives a config or an error, never a
    /// panic (`fuzz/fuzz_targets/config_toml.rs`).
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self, LaunchError> {
        let file: FileConfig = toml::from_str(text).map_err(|source| LaunchError::Toml {
            path: path.to_path_buf(),
            source,
        })?;
        file.resolve(path.parent().unwrap_or(Path::new(".")))
    }

    /// The same node on ports the OS picks (JSON-RPC, and P2P if it has peers) and
    /// without a metrics exporter: how tests run several nodes in one process.
    pub fn in_process(mut self) -> Self {
        self.rpc.addr.set_port(0);
        self.metrics_addr = None;
        if let Some(p2p) = &mut self.p2p {
            p2p.listen.set_port(0);
        }
        self
    }

    /// Replaces each setting `overrides` gives.
    pub fn apply(&mut self, overrides: Overrides) {
        let Overrides {
            datadir,
            rpc_addr,
            metrics_addr,
            block_time,
            block_txs,
            history,
            prefetch_threads,
        } = overrides;
        if let Some(dir) = datadir {
            self.datadir = Some(dir);
        }
        if let Some(addr) = rpc_addr {
            self.rpc.addr = addr;
        }
        if let Some(addr) = metrics_addr {
            self.metrics_addr = Some(addr);
        }
        self.block_time = block_time.unwrap_or(self.block_time);
        self.block_txs = block_txs.unwrap_or(self.block_txs);
        self.history = history.unwrap_or(self.history);
        self.prefetch_threads = prefetch_threads.unwrap_or(self.prefetch_threads);
    }
}

/// What a `[consensus]` node needs besides its key.
const CONSENSUS_NEEDS: &str = "a [consensus] node needs a [p2p] section (its validators are its peers) and no `producer` key (the validators take turns)";
/// What a `[consensus]` section names: a key, or that the node is a full node.
const CONSENSUS_KEY: &str = "a [consensus] section needs either `key` (a validator) or `full_node = true` (a full node, which holds no key), not both";

/// Reads a text file, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<String, LaunchError> {
    std::fs::read_to_string(path).map_err(LaunchError::io(format!("reading {}", path.display())))
}

/// Reads a genesis file (go-ethereum's format) as a chain spec.
pub fn read_genesis(path: &Path) -> Result<ChainSpec, LaunchError> {
    ChainSpec::from_json(&read(path)?).map_err(|source| LaunchError::Genesis {
        path: path.to_owned(),
        source,
    })
}

/// The TOML file of `stave node --config FILE`. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// Data dir (relative to the config file).
    datadir: Option<PathBuf>,
    /// Genesis file in go-ethereum's format (relative to the config file).
    genesis: Option<PathBuf>,
    /// LMDB map size in bytes.
    map_size: Option<usize>,
    rpc_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    block_time_ms: Option<u64>,
    block_txs: Option<usize>,
    /// Most times a block is built when selected transactions fail.
    block_fill_rounds: Option<usize>,
    /// Most accounts and storage slots in the state's clean cache.
    state_cache_entries: Option<usize>,
    /// Most senders in the sender cache.
    sender_cache_entries: Option<usize>,
    /// Threads that prefetch blocks' reads (0: none).
    prefetch_threads: Option<usize>,
    /// Microseconds a load from the disk takes at least, on average.
    prefetch_disk_load_us: Option<u64>,
    /// Which past blocks' state is served: "all", "recent" or a number of blocks.
    history: Option<HistorySetting>,
    /// Most transactions in the txpool.
    pool_max_txs: Option<usize>,
    /// Most transactions per sender in the txpool.
    pool_max_per_sender: Option<usize>,
    /// Whether this node produces blocks alone (default true, without `[consensus]`).
    /// One node of such a network produces; the others follow it over P2P.
    producer: Option<bool>,
    /// Peers, certificates and gossip.
    p2p: Option<P2pSection>,
    /// This node is one of the genesis's validators, agreeing on blocks with the others.
    consensus: Option<ConsensusSection>,
    /// JSON-RPC address and limits.
    rpc: Option<rpc::RpcSection>,
}

/// The `history` key as written: a name or a number of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum HistorySetting {
    Blocks(u64),
    Named(String),
}

impl HistorySetting {
    fn resolve(self) -> Result<History, LaunchError> {
        match self {
            HistorySetting::Blocks(blocks) => Ok(History::Blocks(blocks)),
            HistorySetting::Named(name) => name.parse().map_err(LaunchError::Config),
        }
    }
}

/// The `[p2p]` section as written (paths relative to the config file, ids in hex).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct P2pSection {
    listen: SocketAddr,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// Node ids (hex SHA-256 of a certificate's public key) allowed to connect.
    allowed: Vec<String>,
    #[serde(default)]
    peers: Vec<PeerSection>,
    /// Node ids (hex) whose blocks a follower takes.
    #[serde(default)]
    block_sources: Vec<String>,
    #[serde(default)]
    limits: p2p::LimitsSection,
}

/// A `[[p2p.peers]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerSection {
    /// The DNS name in its certificate.
    name: String,
    /// Its P2P address.
    address: SocketAddr,
}

/// The `[consensus]` section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsensusSection {
    key: Option<PathBuf>,
    /// A full node: no key, never votes.
    full_node: Option<bool>,
    storage: Option<PathBuf>,
    leader_timeout_ms: Option<u64>,
}

impl FileConfig {
    /// The node this file describes, its paths taken relative to `base`.
    fn resolve(self, base: &Path) -> Result<NodeConfig, LaunchError> {
        let mut config = match &self.genesis {
            Some(path) => NodeConfig::producing(read_genesis(&base.join(path))?, Vec::new()),
            None => NodeConfig::dev()?,
        };
        config.apply(Overrides {
            datadir: self.datadir.map(|dir| base.join(dir)),
            rpc_addr: self.rpc_addr,
            metrics_addr: self.metrics_addr,
            block_time: self.block_time_ms.map(Duration::from_millis),
            block_txs: self.block_txs,
            history: None,
            prefetch_threads: self.prefetch_threads,
        });
        // A node run from a file serves no web page unless `[rpc] cors_origins` says so,
        // and keeps no history unless `history` says so.
        config.rpc.cors_origins = Vec::new();
        config.history = match self.history {
            Some(history) => history.resolve()?,
            None => History::Recent,
        };
        if let Some(rpc) = self.rpc {
            config.rpc_enabled = rpc.enabled();
            rpc.apply(&mut config.rpc, self.rpc_addr.is_some())?;
        }
        config.map_size = self.map_size.unwrap_or(config.map_size);
        config.block_fill_rounds = self.block_fill_rounds.unwrap_or(config.block_fill_rounds);
        config.prefetch_disk_load = self
            .prefetch_disk_load_us
            .map_or(config.prefetch_disk_load, Duration::from_micros);
        config.state_cache_entries = self
            .state_cache_entries
            .unwrap_or(config.state_cache_entries);
        config.sender_cache_entries = self
            .sender_cache_entries
            .unwrap_or(config.sender_cache_entries);
        config.pool_max_txs = self.pool_max_txs;
        config.pool_max_per_sender = self.pool_max_per_sender;
        config.role = match (self.consensus, self.producer) {
            (Some(_), Some(_)) => return Err(LaunchError::Config(CONSENSUS_NEEDS.into())),
            (Some(consensus), None) => match (consensus.key, consensus.full_node) {
                (None, Some(true)) => Role::FullNode,
                (Some(key), None | Some(false)) => Role::Validator(ConsensusConfig {
                    key: base.join(key),
                    storage: consensus.storage.map(|dir| base.join(dir)),
                    leader_timeout: consensus
                        .leader_timeout_ms
                        .map_or(DEFAULT_LEADER_TIMEOUT, Duration::from_millis),
                }),
                _ => return Err(LaunchError::Config(CONSENSUS_KEY.into())),
            },
            (None, Some(false)) => Role::Follower,
            (None, _) => Role::Producer,
        };
        config.p2p = self.p2p.map(|p2p| p2p.resolve(base)).transpose()?;
        config.check()?;
        Ok(config)
    }
}

impl P2pSection {
    fn resolve(self, base: &Path) -> Result<P2pConfig, LaunchError> {
        Ok(P2pConfig {
            listen: self.listen,
            ca: base.join(self.ca),
            cert: base.join(self.cert),
            key: base.join(self.key),
            allowed: self
                .allowed
                .iter()
                .map(|id| parse_node_id(id))
                .collect::<Result<_, _>>()?,
            peers: self
                .peers
                .into_iter()
                .map(|peer| StaticPeer {
                    name: peer.name,
                    address: peer.address,
                })
                .collect(),
            block_sources: self
                .block_sources
                .iter()
                .map(|id| parse_node_id(id))
                .collect::<Result<_, _>>()?,
            limits: self.limits.resolve()?,
        })
    }
}

/// `value` if the file gives it, else `default`; a zero is refused with the key named as
/// the file spells it: `section` (`[rpc] `, `p2p.limits.`) followed by `key`.
fn positive<T: Default + PartialEq>(
    section: &str,
    key: &str,
    value: Option<T>,
    default: T,
) -> Result<T, LaunchError> {
    match value {
        Some(value) if value == T::default() => Err(LaunchError::Config(format!(
            "{section}{key} must be greater than 0"
        ))),
        Some(value) => Ok(value),
        None => Ok(default),
    }
}

/// A duration key in milliseconds, as [`positive`].
fn positive_millis(
    section: &str,
    key: &str,
    millis: Option<u64>,
    default: Duration,
) -> Result<Duration, LaunchError> {
    Ok(match millis {
        Some(_) => Duration::from_millis(positive(section, key, millis, 0)?),
        None => default,
    })
}

/// A node id written in hex (with or without `0x`).
fn parse_node_id(hex_id: &str) -> Result<NodeId, LaunchError> {
    let bytes = hex::decode(hex_id.trim_start_matches("0x"))
        .map_err(|_| LaunchError::Config(format!("node id {hex_id} is not hex")))?;
    bytes
        .try_into()
        .map_err(|_| LaunchError::Config(format!("node id {hex_id} is not 32 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<NodeConfig, LaunchError> {
        NodeConfig::from_toml_str(text, Path::new("/base/test.toml"))
    }

    #[test]
    fn a_head_goes_stale_after_two_leader_timeouts_and_a_block_time() {
        let block_time = Duration::from_millis(1_000);
        let config = ConsensusConfig::new(PathBuf::from("k"));
        assert_eq!(config.head_stale_after(block_time), Duration::from_secs(7));
        let config = ConsensusConfig {
            leader_timeout: Duration::from_millis(500),
            ..config
        };
        assert_eq!(
            config.head_stale_after(block_time),
            Duration::from_millis(2_000)
        );
    }

    #[test]
    fn an_empty_file_is_the_dev_chain_and_paths_are_relative_to_the_file() {
        let config = parse("").expect("parses");
        assert_eq!(config.genesis.chain_id(), 1337);
        assert_eq!(config.dev_accounts.len(), 10);
        assert!(config.datadir.is_none());
        let config = parse("datadir = \"data\"\nblock_time_ms = 50").expect("parses");
        assert_eq!(config.datadir, Some(PathBuf::from("/base/data")));
        assert_eq!(config.block_time, Duration::from_millis(50));
    }

    #[test]
    fn cache_sizes_default_and_are_read_from_the_file() {
        let config = parse("").expect("parses");
        assert_eq!(
            config.state_cache_entries,
            stave_state::DEFAULT_CLEAN_CACHE_ENTRIES
        );
        assert_eq!(
            config.sender_cache_entries,
            stave_verify::DEFAULT_SENDER_CACHE_CAPACITY
        );
        let config =
            parse("state_cache_entries = 1000\nsender_cache_entries = 20").expect("parses");
        assert_eq!(config.state_cache_entries, 1000);
        assert_eq!(config.sender_cache_entries, 20);
    }

    #[test]
    fn the_prefetch_settings_default_and_are_read_from_the_file() {
        let config = parse("").expect("parses");
        assert_eq!(
            config.prefetch_threads,
            stave_node::DEFAULT_PREFETCH_THREADS
        );
        assert_eq!(config.prefetch_disk_load, stave_node::DISK_LOAD);
        let config = parse("prefetch_threads = 4\nprefetch_disk_load_us = 250").expect("parses");
        assert_eq!(config.prefetch_threads, 4);
        assert_eq!(config.prefetch_disk_load, Duration::from_micros(250));
    }

    #[test]
    fn roles_need_their_sections() {
        let error = parse("producer = false").expect_err("a follower without peers");
        assert!(
            error.to_string().contains("needs a [p2p] section"),
            "{error}"
        );
        let error = parse("[consensus]\nkey = \"k\"").expect_err("a validator without peers");
        assert!(
            error.to_string().contains("[consensus] node needs"),
            "{error}"
        );
        let p2p =
            "[p2p]\nlisten = \"127.0.0.1:1\"\nca = \"c\"\ncert = \"n\"\nkey = \"k\"\nallowed = []";
        let error = parse(&format!("producer = true\n[consensus]\nkey = \"k\"\n{p2p}"))
            .expect_err("a validator told to produce");
        assert!(error.to_string().contains("no `producer` key"), "{error}");
        let config = parse(&format!("[consensus]\nkey = \"k\"\n{p2p}")).expect("a validator");
        let Role::Validator(consensus) = &config.role else {
            panic!("not a validator: {:?}", config.role);
        };
        assert_eq!(consensus.key, PathBuf::from("/base/k"));
        assert_eq!(consensus.leader_timeout, DEFAULT_LEADER_TIMEOUT);
        assert!(parse("rpc_port = 1").is_err(), "an unknown key");
    }
}
