//! Helpers shared by the tests that start nodes in process: the JSON-RPC client the
//! real-process tests use too, a WebSocket client, P2P identities for networks of nodes,
//! testnets of validators, and the network tests' link-breaking proxy.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

mod client;
#[path = "../../../net/tests/support/proxy.rs"]
pub mod proxy;
pub mod ws;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

pub use client::*;
use stave_launch::{
    NodeConfig, P2pConfig, P2pLimits, RunningNode,
    files::write_new,
    testnet::{self, TestnetLayout, node_name},
};
use stave_net::{ChainCa, StaticPeer};

impl JsonRpc for RunningNode {
    fn rpc_addr(&self) -> SocketAddr {
        RunningNode::rpc_addr(self).expect("this node serves JSON-RPC")
    }
}

/// The number of `node`'s head block.
pub fn height(node: &RunningNode) -> u64 {
    node.head().expect("a head").0
}

/// A dev node in this process, making a block at least every `block_time_ms`, in a data
/// dir of its own, on a free port, without metrics.
pub fn dev_node(block_time_ms: u64) -> RunningNode {
    let mut config = NodeConfig::dev().expect("the dev chain").in_process();
    config.block_time = Duration::from_millis(block_time_ms);
    RunningNode::start(config).expect("the node starts")
}

/// A dev node in this process like [`dev_node`], serving metrics on a free port: the only
/// node of its test binary (the metrics recorder is global to a process). Returns the node
/// and the metrics address.
pub fn dev_node_with_metrics(block_time_ms: u64) -> (RunningNode, SocketAddr) {
    let mut config = NodeConfig::dev().expect("the dev chain").in_process();
    config.metrics_addr = Some("127.0.0.1:0".parse().expect("an address"));
    config.block_time = Duration::from_millis(block_time_ms);
    let node = RunningNode::start(config).expect("starts");
    let metrics_addr = node
        .metrics_addr()
        .expect("the first recorder of the process");
    assert_ne!(metrics_addr.port(), 0);
    (node, metrics_addr)
}

/// P2P sections for `count` nodes of one chain CA, whose files go under `dir`: each
/// allows the others, listens on a free port and dials no one yet.
pub fn p2p_identities(dir: &Path, count: usize) -> Vec<P2pConfig> {
    let ca = ChainCa::generate("test chain").expect("a CA");
    let (ca_pem, _) = ca.to_pem();
    write_new(&dir.join("ca.pem"), &ca_pem, false).expect("writes");
    let mut configs: Vec<P2pConfig> = (0..count)
        .map(|i| {
            let identity = ca.issue(&format!("node{i}.stave")).expect("a certificate");
            let (cert, key) = identity.to_pem();
            let (cert_path, key_path) = (
                dir.join(format!("node{i}.pem")),
                dir.join(format!("node{i}.key")),
            );
            write_new(&cert_path, &cert, false).expect("writes");
            write_new(&key_path, &key, true).expect("writes");
            P2pConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                ca: dir.join("ca.pem"),
                cert: cert_path,
                key: key_path,
                allowed: vec![identity.node_id().expect("an id")],
                peers: Vec::new(),
                block_sources: Vec::new(),
                limits: P2pLimits::default(),
            }
        })
        .collect();
    let allowed: Vec<_> = configs
        .iter()
        .flat_map(|config| config.allowed.clone())
        .collect();
    for config in &mut configs {
        config.allowed.clone_from(&allowed);
    }
    configs
}

/// Held while a test's validators run: 4-validator testnets side by side crowd the 2
/// cores.
static ONE_TESTNET: Mutex<()> = Mutex::new(());

/// Writes a testnet of `nodes` validators (blocks every 200 ms) into `dir`; their
/// configs. Its ports do not matter: [`start_testnet`] runs every node on ports the OS
/// picks.
pub fn init_testnet(dir: &Path, nodes: u16) -> Vec<PathBuf> {
    init_testnet_with_full_nodes(dir, nodes, 0)
}

/// [`init_testnet`] with `full_nodes` full nodes after the validators.
pub fn init_testnet_with_full_nodes(dir: &Path, nodes: u16, full_nodes: u16) -> Vec<PathBuf> {
    let layout = TestnetLayout {
        rpc_port: 1,
        metrics_port: 1,
        p2p_port: 1,
        block_time_ms: 200,
        full_nodes,
        ..TestnetLayout::new(nodes)
    };
    let members = testnet::init(dir, &layout).expect("writes a testnet");
    assert_eq!(testnet::configs(dir).expect("configs").len(), members.len());
    members.into_iter().map(|member| member.config).collect()
}

/// Starts the validators of `configs` in this process, in order, each dialling those
/// started before it (the others dial it in turn): validator `i` dials validator `j`'s
/// P2P address `a` at `via(i, j, a)` (`a` itself, or a proxy to it). Holds the testnet
/// lock while they run.
pub fn start_testnet(
    configs: &[PathBuf],
    mut via: impl FnMut(usize, usize, SocketAddr) -> SocketAddr,
) -> (MutexGuard<'static, ()>, Vec<RunningNode>) {
    // A test that failed while holding it leaves nothing to repair.
    let alone = ONE_TESTNET.lock().unwrap_or_else(PoisonError::into_inner);
    let mut nodes: Vec<RunningNode> = Vec::new();
    for (dialer, path) in configs.iter().enumerate() {
        let mut config = NodeConfig::from_toml_file(path)
            .expect("reads")
            .in_process();
        let p2p = config.p2p.as_mut().expect("a [p2p] section");
        p2p.peers = (0..)
            .zip(&nodes)
            .map(|(target, node)| StaticPeer {
                name: node_name(target),
                address: via(dialer, usize::from(target), node.p2p_addr().expect("P2P")),
            })
            .collect();
        nodes.push(RunningNode::start(config).expect("the validator starts"));
    }
    (alone, nodes)
}
