//! A multi-validator chain on one machine, as `stave testnet init` writes it: one genesis
//! naming N validators, a chain CA, and per node a consensus key, a TLS certificate
//! holding that same key, and `node<i>/config.toml` (ports counted up from the layout's
//! base ports). Each config starts a node with [`NodeConfig::from_toml_file`].
//!
//! [`NodeConfig::from_toml_file`]: crate::NodeConfig::from_toml_file

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
};

use stave_consensus::keys;
use stave_net::ChainCa;
use stave_primitives::B256;

use crate::{
    LaunchError,
    files::{create_dir, write_new},
};

/// Where a testnet's nodes listen and how fast they make blocks.
#[derive(Debug, Clone)]
pub struct TestnetLayout {
    /// How many validators (BFT tolerates f faulty ones among 3f+1).
    pub nodes: u16,
    /// Address every node listens on.
    pub host: IpAddr,
    /// JSON-RPC port of node 0; node i serves on this + i.
    pub rpc_port: u16,
    /// Prometheus port of node 0; node i serves on this + i.
    pub metrics_port: u16,
    /// P2P port of node 0; node i listens on this + i.
    pub p2p_port: u16,
    /// Longest time an idle leader waits for transactions before it proposes, in ms.
    pub block_time_ms: u64,
}

/// One validator of a testnet [`init`] wrote.
#[derive(Debug, Clone)]
pub struct TestnetMember {
    /// Its `config.toml`.
    pub config: PathBuf,
    /// Its JSON-RPC address.
    pub rpc: SocketAddr,
    /// The consensus public key the genesis names it by.
    pub validator: B256,
}

/// The DNS name validator `index`'s certificate carries (peers dial it by this name).
pub fn node_name(index: u16) -> String {
    format!("node{index}.stave")
}

/// Node i's port: `base + i`, if that is a port.
fn port(base: u16, index: u16, what: &str) -> Result<u16, LaunchError> {
    base.checked_add(index)
        .ok_or_else(|| LaunchError::Config(format!("{what} port {base} + {index} is past 65535")))
}

/// One validator's names, addresses and key.
struct Member {
    name: String,
    rpc: SocketAddr,
    metrics: SocketAddr,
    p2p: SocketAddr,
    seed: [u8; 32],
    /// The public key the genesis names it by.
    validator: B256,
}

/// Writes a testnet of `layout.nodes` fresh validators into `dir` (created; existing
/// files are never overwritten): `genesis.json` (the dev chain's accounts, these
/// validators), `ca/` and `node<i>/`. Returns the validators in node order.
pub fn init(dir: &Path, layout: &TestnetLayout) -> Result<Vec<TestnetMember>, LaunchError> {
    let members = (0..layout.nodes)
        .map(|i| {
            let seed: [u8; 32] = rand::random();
            Ok(Member {
                name: node_name(i),
                rpc: SocketAddr::new(layout.host, port(layout.rpc_port, i, "RPC")?),
                metrics: SocketAddr::new(layout.host, port(layout.metrics_port, i, "metrics")?),
                p2p: SocketAddr::new(layout.host, port(layout.p2p_port, i, "P2P")?),
                seed,
                validator: keys::public_key_bytes(&keys::private_key(&seed)),
            })
        })
        .collect::<Result<Vec<_>, LaunchError>>()?;
    let validators = members.iter().map(|member| member.validator).collect();
    let (spec, _) = stave_primitives::dev::dev_chain()?;
    let spec = spec.with_validators(validators)?;

    create_dir(dir)?;
    write_new(&dir.join("genesis.json"), &spec.to_json(), false)?;
    let ca = ChainCa::generate("stave testnet")?;
    let (ca_pem, ca_key) = ca.to_pem();
    create_dir(&dir.join("ca"))?;
    write_new(&dir.join("ca/ca.pem"), &ca_pem, false)?;
    write_new(&dir.join("ca/ca.key"), &ca_key, true)?;

    let identities = members
        .iter()
        .map(|member| ca.issue_for_key(&member.name, &member.seed))
        .collect::<Result<Vec<_>, _>>()?;
    let allowed = identities
        .iter()
        .map(|identity| Ok(format!("\"0x{}\"", hex::encode(identity.node_id()?))))
        .collect::<Result<Vec<_>, LaunchError>>()?
        .join(", ");
    let mut written = Vec::new();
    for (i, (member, identity)) in members.iter().zip(&identities).enumerate() {
        let node_dir = dir.join(format!("node{i}"));
        create_dir(&node_dir)?;
        write_new(
            &node_dir.join("consensus.key"),
            &format!("0x{}\n", hex::encode(member.seed)),
            true,
        )?;
        let (cert, key) = identity.to_pem();
        write_new(&node_dir.join("node.pem"), &cert, false)?;
        write_new(&node_dir.join("node.key"), &key, true)?;
        write_new(&node_dir.join("ca.pem"), &ca_pem, false)?;
        let peers: String = members
            .iter()
            .filter(|other| other.name != member.name)
            .map(|other| {
                format!(
                    "\n[[p2p.peers]]\nname = \"{}\"\naddress = \"{}\"\n",
                    other.name, other.p2p
                )
            })
            .collect();
        let config_path = node_dir.join("config.toml");
        let config = format!(
            "# Validator {i} of {nodes} (`stave node --config {config_path}`).\n\
             datadir = \"data\"\ngenesis = \"../genesis.json\"\n\
             rpc_addr = \"{rpc}\"\nmetrics_addr = \"{metrics}\"\nblock_time_ms = {block_time}\n\n\
             [consensus]\nkey = \"consensus.key\"\n\n\
             [p2p]\nlisten = \"{p2p}\"\nca = \"ca.pem\"\ncert = \"node.pem\"\nkey = \"node.key\"\n\
             allowed = [{allowed}]\n{peers}",
            nodes = layout.nodes,
            config_path = config_path.display(),
            rpc = member.rpc,
            metrics = member.metrics,
            block_time = layout.block_time_ms,
            p2p = member.p2p,
        );
        write_new(&config_path, &config, false)?;
        written.push(TestnetMember {
            config: config_path,
            rpc: member.rpc,
            validator: member.validator,
        });
    }
    Ok(written)
}

/// The node configs of a testnet directory, in node order.
pub fn configs(dir: &Path) -> Result<Vec<PathBuf>, LaunchError> {
    let configs: Vec<PathBuf> = (0..)
        .map(|i| dir.join(format!("node{i}/config.toml")))
        .take_while(|path| path.exists())
        .collect();
    if configs.is_empty() {
        return Err(LaunchError::Config(format!(
            "no node0/config.toml in {} (make one with `stave testnet init --dir {}`)",
            dir.display(),
            dir.display()
        )));
    }
    Ok(configs)
}
