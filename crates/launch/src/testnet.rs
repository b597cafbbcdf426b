//! A multi-validator chain on one machine, as `stave testnet init` writes it: one genesis
//! naming N validators, with the governance contract (the dev mnemonic's account i the
//! committee member of validator i, a majority deciding), a chain CA, and per validator a
//! consensus key, a TLS certificate holding that same key, and `node<i>/config.toml`
//! (ports counted up from the layout's base ports). Full nodes come after the validators
//! (and any spare ones): a TLS certificate of their own, admitted by the contract's node
//! list, and a config with `[consensus] full_node = true`. Each config starts a node with [`NodeConfig::from_toml_file`];
//! [`run_nodes`] starts one `stave node --config` process per config and stops them
//! together.
//!
//! [`NodeConfig::from_toml_file`]: crate::NodeConfig::from_toml_file

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use stave_consensus::keys;
use stave_governance::GovernanceGenesis;
use stave_primitives::B256;

use crate::{
    LaunchError,
    files::{create_dir, write_ca, write_new},
};

/// Where a testnet's nodes listen and how fast they make blocks. With the `clap` feature
/// these are `stave testnet init`'s arguments.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TestnetLayout {
    /// How many validators (BFT tolerates f faulty ones among 3f+1).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=100)))]
    pub nodes: u16,
    /// Address every node listens on (node i on the base ports plus i).
    #[cfg_attr(feature = "clap", arg(long, default_value = "127.0.0.1"))]
    pub host: IpAddr,
    /// One address per node, in node order (validators, spare ones, full nodes), for a
    /// chain across machines: node i listens on its own address at the base ports, and
    /// its directory holds a copy of the genesis, so it can be copied to its machine as
    /// it is. Replaces `host`.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_delimiter = ',', conflicts_with = "host")
    )]
    pub hosts: Vec<IpAddr>,
    /// JSON-RPC port of node 0; node i serves on this + i.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 8545))]
    pub rpc_port: u16,
    /// Prometheus port of node 0; node i serves on this + i.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 9001))]
    pub metrics_port: u16,
    /// P2P port of node 0; node i listens on this + i.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 30300))]
    pub p2p_port: u16,
    /// Longest time an idle leader waits for transactions before it proposes, in ms.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000))]
    pub block_time_ms: u64,
    /// Blocks per consensus epoch (the genesis's `epochLength`; the validator set may
    /// change only between epochs). None: one epoch that never ends.
    #[cfg_attr(feature = "clap", arg(long, value_parser = clap::value_parser!(u64).range(2..)))]
    pub epoch_length: Option<u64>,
    /// Nodes written beside the validators, with consensus keys and configs, but not in
    /// the genesis's validator set: the committee can add them later
    /// (`stave gov propose add-validator`). They follow the chain until then.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=100)))]
    pub spare_validators: u16,
    /// A gas-free chain: a base fee of zero (`baseFeePerGas`), so transactions priced at
    /// zero are accepted and accounts without funds can send them.
    #[cfg_attr(feature = "clap", arg(long))]
    pub gas_free: bool,
    /// Full nodes written after the validators: they hold no consensus key, never vote,
    /// follow the chain on the validators' finalization certificates and serve
    /// applications.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=100)))]
    pub full_nodes: u16,
    /// Validators serve no JSON-RPC (`[rpc] enabled = false`): applications use the full
    /// nodes, the layout recommended for a chain that has them.
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_validator_rpc: bool,
}

impl TestnetLayout {
    /// A layout of `nodes` validators on localhost with the default ports and block time,
    /// no spare validators and no full nodes.
    pub fn new(nodes: u16) -> Self {
        Self {
            nodes,
            host: IpAddr::from([127, 0, 0, 1]),
            hosts: Vec::new(),
            rpc_port: 8545,
            metrics_port: 9001,
            p2p_port: 30300,
            block_time_ms: 1_000,
            epoch_length: None,
            spare_validators: 0,
            gas_free: false,
            full_nodes: 0,
            no_validator_rpc: false,
        }
    }
}

/// One node of a testnet [`init`] wrote.
#[derive(Debug, Clone)]
pub struct TestnetMember {
    /// Its `config.toml`.
    pub config: PathBuf,
    /// Its JSON-RPC address; `None` for a validator that serves none.
    pub rpc: Option<SocketAddr>,
    /// The consensus public key the genesis names it by (a validator, or a spare one that
    /// may become one); `None` for a full node.
    pub validator: Option<B256>,
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

/// One node's names, addresses and key.
struct Member {
    name: String,
    rpc: SocketAddr,
    metrics: SocketAddr,
    p2p: SocketAddr,
    /// The consensus seed of a validator (or spare); its TLS certificate holds that key.
    /// `None` for a full node, whose certificate holds a key of its own.
    seed: Option<[u8; 32]>,
}

impl Member {
    /// The consensus public key of a validator (or spare).
    fn validator(&self) -> Option<B256> {
        self.seed
            .map(|seed| keys::public_key_bytes(&keys::private_key(&seed)))
    }
}

/// Writes a testnet of `layout.nodes` fresh validators, `layout.spare_validators` nodes
/// that may become validators and `layout.full_nodes` full nodes into `dir` (created;
/// existing files are never overwritten): `genesis.json` (the dev chain's accounts, the
/// validators), `ca/` and `node<i>/`. Returns every node in node order: validators, spare
/// ones, full nodes.
pub fn init(dir: &Path, layout: &TestnetLayout) -> Result<Vec<TestnetMember>, LaunchError> {
    let with_keys = layout.nodes + layout.spare_validators;
    let all = with_keys
        .checked_add(layout.full_nodes)
        .ok_or_else(|| LaunchError::Config("too many nodes".into()))?;
    let across_machines = !layout.hosts.is_empty();
    if across_machines && layout.hosts.len() != usize::from(all) {
        return Err(LaunchError::Config(format!(
            "--hosts names {} addresses for {all} nodes: give one per node, in node order",
            layout.hosts.len()
        )));
    }
    let members = (0..all)
        .map(|i| {
            // One machine: node i at the base ports plus i. One machine each: the base ports.
            let (host, offset) = match layout.hosts.get(usize::from(i)) {
                Some(host) => (*host, 0),
                None => (layout.host, i),
            };
            Ok(Member {
                name: node_name(i),
                rpc: SocketAddr::new(host, port(layout.rpc_port, offset, "RPC")?),
                metrics: SocketAddr::new(host, port(layout.metrics_port, offset, "metrics")?),
                p2p: SocketAddr::new(host, port(layout.p2p_port, offset, "P2P")?),
                seed: (i < with_keys).then(rand::random),
            })
        })
        .collect::<Result<Vec<_>, LaunchError>>()?;
    let validators: Vec<B256> = members
        .iter()
        .take(usize::from(layout.nodes))
        .filter_map(Member::validator)
        .collect();
    create_dir(dir)?;
    let ca = write_ca(&dir.join("ca"), "stave testnet")?;
    let (ca_pem, _) = ca.to_pem();
    let identities = members
        .iter()
        .map(|member| match &member.seed {
            Some(seed) => ca.issue_for_key(&member.name, seed),
            None => ca.issue(&member.name),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let node_ids = identities
        .iter()
        .map(|identity| identity.node_id())
        .collect::<Result<Vec<_>, _>>()?;

    let (spec, accounts) = stave_primitives::dev::dev_chain()?;
    let spec = spec.with_validators(validators.clone())?;
    // The governance committee: the dev mnemonic's account i for validator i (as far as
    // its 10 funded accounts go), one vote each, a majority deciding.
    let committee = accounts
        .iter()
        .take(usize::from(layout.nodes))
        .map(|account| account.address)
        .collect();
    // The spare nodes and the full nodes are admitted to the network (the contract's
    // `nodes`): the spare ones follow the chain until the committee makes them
    // validators.
    let mut governance = GovernanceGenesis::majority(committee, validators);
    governance.nodes = node_ids
        .iter()
        .skip(usize::from(layout.nodes))
        .map(|id| B256::from(*id))
        .collect();
    let spec = governance
        .install(spec)
        .map_err(|error| LaunchError::Config(format!("the testnet's governance: {error}")))?;
    let spec = if layout.gas_free {
        spec.with_base_fee(0)
    } else {
        spec
    };
    let spec = match layout.epoch_length {
        Some(length) => spec.with_epoch_length(length)?,
        None => spec,
    };
    write_new(&dir.join("genesis.json"), &spec.to_json(), false)?;

    let allowed = node_ids
        .iter()
        .map(|id| format!("\"0x{}\"", hex::encode(id)))
        .collect::<Vec<_>>()
        .join(", ");
    let mut written = Vec::new();
    for (i, (member, identity)) in members.iter().zip(&identities).enumerate() {
        let node_dir = dir.join(format!("node{i}"));
        create_dir(&node_dir)?;
        if let Some(seed) = &member.seed {
            write_new(
                &node_dir.join("consensus.key"),
                &format!("0x{}\n", hex::encode(seed)),
                true,
            )?;
        }
        let (cert, key) = identity.to_pem();
        write_new(&node_dir.join("node.pem"), &cert, false)?;
        write_new(&node_dir.join("node.key"), &key, true)?;
        write_new(&node_dir.join("ca.pem"), &ca_pem, false)?;
        let genesis = if across_machines {
            write_new(&node_dir.join("genesis.json"), &spec.to_json(), false)?;
            "genesis.json"
        } else {
            "../genesis.json"
        };
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
        let validator = i < usize::from(layout.nodes);
        let role = match (validator, member.seed) {
            (true, _) => format!("Validator {i} of {}", layout.nodes),
            (false, Some(_)) => format!("Node {i}: a validator's key, not in the genesis's set"),
            (false, None) => format!("Node {i}: a full node (no consensus key, never votes)"),
        };
        let serves_rpc = !(validator && layout.no_validator_rpc);
        let rpc = match serves_rpc {
            true => format!("rpc_addr = \"{}\"\n", member.rpc),
            false => "\n[rpc]\n# Applications use the full nodes.\nenabled = false\n".to_owned(),
        };
        let consensus = match member.seed {
            Some(_) => "key = \"consensus.key\"",
            None => "full_node = true",
        };
        let config = format!(
            "# {role} (`stave node --config {config_path}`).\n\
             datadir = \"data\"\ngenesis = \"{genesis}\"\n\
             metrics_addr = \"{metrics}\"\nblock_time_ms = {block_time}\n{rpc}\n\
             [consensus]\n{consensus}\n\n\
             [p2p]\nlisten = \"{p2p}\"\nca = \"ca.pem\"\ncert = \"node.pem\"\nkey = \"node.key\"\n\
             allowed = [{allowed}]\n{peers}",
            config_path = config_path.display(),
            metrics = member.metrics,
            block_time = layout.block_time_ms,
            p2p = member.p2p,
        );
        write_new(&config_path, &config, false)?;
        written.push(TestnetMember {
            config: config_path,
            rpc: serves_rpc.then_some(member.rpc),
            validator: member.validator(),
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

/// How long nodes get to stop on SIGTERM before they are killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// What [`run_nodes`] reports as it goes.
#[derive(Debug)]
pub enum NodesEvent {
    /// Node `index` started.
    Started {
        /// The node's place in the testnet.
        index: usize,
        /// Its process id.
        pid: u32,
        /// The config it runs.
        config: PathBuf,
        /// The file its stdout and stderr go to.
        log: PathBuf,
    },
    /// Every node started; this many run.
    Running(usize),
    /// Node `index` exited on its own.
    Exited {
        /// The node's place in the testnet.
        index: usize,
        /// How it exited.
        status: ExitStatus,
    },
    /// A signal came; this many nodes still run and are sent SIGTERM.
    Stopping(usize),
    /// Node `index` did not stop within [`STOP_GRACE`] and is killed.
    Killing {
        /// The node's place in the testnet.
        index: usize,
    },
}

/// Runs a testnet directory [`init`] wrote: starts `exe node --config node<i>/config.toml`
/// for every node (output appended to `node<i>/node.log`), then supervises them until
/// SIGINT or SIGTERM, and stops them: SIGTERM, then SIGKILL to any still running after
/// [`STOP_GRACE`]. Fails with [`LaunchError::AllNodesExited`] if every node exits first.
pub fn run_nodes(
    exe: &Path,
    dir: &Path,
    mut report: impl FnMut(NodesEvent),
) -> Result<(), LaunchError> {
    let mut children: Vec<(usize, Child)> = Vec::new();
    for (index, config) in configs(dir)?.into_iter().enumerate() {
        let log_path = dir.join(format!("node{index}/node.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(LaunchError::io(format!("opening {}", log_path.display())))?;
        let child = Command::new(exe)
            .args(["node", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(LaunchError::io("duplicating the log handle"))?,
            )
            .stderr(log)
            .spawn()
            .map_err(LaunchError::io(format!("starting node {index}")))?;
        report(NodesEvent::Started {
            index,
            pid: child.id(),
            config,
            log: log_path,
        });
        children.push((index, child));
    }
    report(NodesEvent::Running(children.len()));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LaunchError::io("starting the async runtime"))?;
    runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(LaunchError::io("installing the SIGTERM handler"))?;
        let mut ticks = tokio::time::interval(Duration::from_millis(250));
        // Until a signal, or until every node has exited (each exit is reported).
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
                _ = ticks.tick() => {}
            }
            children.retain_mut(|(index, child)| match child.try_wait() {
                Ok(Some(status)) => {
                    report(NodesEvent::Exited {
                        index: *index,
                        status,
                    });
                    false
                }
                _ => true,
            });
            if children.is_empty() {
                return Err(LaunchError::AllNodesExited);
            }
        }
        Ok(())
    })?;
    report(NodesEvent::Stopping(children.len()));
    stop_all(&mut children, report);
    Ok(())
}

/// SIGTERM to every child, then SIGKILL to those still running after [`STOP_GRACE`].
fn stop_all(children: &mut [(usize, Child)], mut report: impl FnMut(NodesEvent)) {
    for (_, child) in children.iter() {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) with a pid this process spawned and has not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    for (index, child) in children.iter_mut() {
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(child.try_wait(), Ok(None)) {
            report(NodesEvent::Killing { index: *index });
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeConfig;

    #[test]
    fn a_testnet_across_machines_puts_each_node_on_its_address_and_each_dir_stands_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let hosts: Vec<IpAddr> = (1..=5).map(|i| IpAddr::from([10, 0, 0, i])).collect();
        let layout = TestnetLayout {
            hosts: hosts.clone(),
            full_nodes: 1,
            ..TestnetLayout::new(4)
        };
        let members = init(&dir.path().join("net"), &layout).expect("writes");
        assert_eq!(members.len(), 5);
        for (i, member) in members.iter().enumerate() {
            // Copied alone to its machine, a node's directory is all it needs.
            let machine = tempfile::tempdir().expect("temp dir");
            let source = member.config.parent().expect("a node dir");
            for file in std::fs::read_dir(source).expect("lists") {
                let file = file.expect("an entry");
                std::fs::copy(file.path(), machine.path().join(file.file_name())).expect("copies");
            }
            let config =
                NodeConfig::from_toml_file(&machine.path().join("config.toml")).expect("loads");
            assert_eq!(config.genesis.validators().len(), 4);
            assert_eq!(config.rpc.addr, SocketAddr::new(hosts[i], 8545));
            let p2p = config.p2p.expect("a network");
            assert_eq!(p2p.listen, SocketAddr::new(hosts[i], 30300));
            let mut peers: Vec<SocketAddr> = p2p.peers.iter().map(|peer| peer.address).collect();
            peers.sort();
            let others: Vec<SocketAddr> = (0..5)
                .filter(|j| *j != i)
                .map(|j| SocketAddr::new(hosts[j], 30300))
                .collect();
            assert_eq!(peers, others, "node {i}");
        }
        let short = TestnetLayout {
            hosts: hosts[..3].to_vec(),
            ..TestnetLayout::new(4)
        };
        let refused = init(&dir.path().join("short"), &short).expect_err("refused");
        assert!(refused.to_string().contains("one per node"), "{refused}");
    }
}
