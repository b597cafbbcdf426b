//! Shared by the network tests: loopback networks (one chain CA, nodes with
//! certificates from it, started on free ports), incompressible payloads, and a proxy
//! that breaks links.

#![allow(dead_code)] // Each test file uses part of this.

pub mod proxy;

use std::{collections::HashSet, time::Duration};

use stave_net::{ChainCa, Network, NetworkConfig, NodeId, NodeTls, StaticPeer};

/// How long any wait in these tests may take before it fails.
pub const LIMIT: Duration = Duration::from_secs(15);

/// A chain of `n` nodes: each node's TLS (trusting the chain CA, allowing all of them), id
/// and certificate name.
pub struct Chain {
    /// The CA.
    pub ca: ChainCa,
    /// Node i's TLS.
    pub tls: Vec<NodeTls>,
    /// Node i's id.
    pub ids: Vec<NodeId>,
    /// Node i's certificate name.
    pub names: Vec<String>,
}

impl Chain {
    /// A chain of `n` nodes.
    pub fn new(n: usize) -> Self {
        let ca = ChainCa::generate("stave test chain").expect("ca");
        let names: Vec<String> = (0..n).map(|i| format!("node{i}.stave")).collect();
        let identities: Vec<_> = names
            .iter()
            .map(|name| ca.issue(name).expect("certificate"))
            .collect();
        let ids: Vec<NodeId> = identities
            .iter()
            .map(|identity| identity.node_id().expect("id"))
            .collect();
        let allowed: HashSet<NodeId> = ids.iter().copied().collect();
        let tls = identities
            .iter()
            .map(|identity| {
                NodeTls::new(&ca.certificate(), identity, allowed.clone()).expect("tls")
            })
            .collect();
        Self {
            ca,
            tls,
            ids,
            names,
        }
    }

    /// Starts node `i` on a free loopback port, dialling `peers`, with `tweak` applied to
    /// its config.
    pub async fn start(
        &self,
        i: usize,
        peers: Vec<StaticPeer>,
        tweak: impl FnOnce(&mut NetworkConfig),
    ) -> Network {
        let mut config = NetworkConfig::new("127.0.0.1:0".parse().expect("address"), peers);
        config.backoff_min = Duration::from_millis(20);
        config.backoff_max = Duration::from_millis(200);
        tweak(&mut config);
        Network::start(config, self.tls[i].clone(), self.ids[i])
            .await
            .expect("network starts")
    }

    /// Node `i` as a static peer listening on `network`'s address.
    pub fn peer(&self, i: usize, network: &Network) -> StaticPeer {
        StaticPeer {
            name: self.names[i].clone(),
            address: network.local_addr(),
        }
    }
}

/// Waits until `done` holds, failing the test after [`LIMIT`].
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `len` pseudo-random bytes (xorshift, fixed seed): data Snappy cannot shrink.
pub fn incompressible(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}
