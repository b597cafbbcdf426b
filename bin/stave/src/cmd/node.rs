//! `stave node`: a running node, started through `stave_launch`: `--dev` for the embedded
//! single-validator dev chain, `--config FILE` for a TOML file the flags given override.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use stave_launch::{Exit, NodeConfig, Overrides, RunningNode};
use stave_primitives::dev::DEV_MNEMONIC;

/// Arguments of `stave node`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Run a single-validator dev chain (chain id 1337, funded Hardhat/Anvil accounts).
    #[arg(long, conflicts_with = "config")]
    dev: bool,
    /// A TOML config file (datadir, genesis, ports, limits).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The data dir (with --dev: default a fresh temporary one).
    #[arg(long)]
    datadir: Option<PathBuf>,
    /// JSON-RPC address (HTTP and WebSocket).
    #[arg(long)]
    rpc_addr: Option<SocketAddr>,
    /// Prometheus metrics address.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Longest time between blocks, in milliseconds.
    #[arg(long)]
    block_time_ms: Option<u64>,
    /// Most transactions per block; a full pool produces a block at once.
    #[arg(long)]
    block_txs: Option<usize>,
    /// Which past blocks' state to serve: `all` (--dev's default), `recent` (the last 128
    /// blocks: a config file's default) or a number of blocks.
    #[arg(long)]
    history: Option<stave_launch::History>,
    /// Threads that load what blocks will read before execution reads it (0: none; the
    /// config's `prefetch_threads`).
    #[arg(long)]
    prefetch_threads: Option<usize>,
}

impl NodeArgs {
    /// The node these arguments describe: the config file's (or the dev chain's), with
    /// the flags given taking precedence.
    fn config(self) -> anyhow::Result<NodeConfig> {
        let mut config = match &self.config {
            Some(path) => NodeConfig::from_toml_file(path)?,
            None if self.dev => NodeConfig::dev()?,
            None => anyhow::bail!("give --dev for a dev chain, or --config FILE"),
        };
        config.apply(Overrides {
            datadir: self.datadir,
            rpc_addr: self.rpc_addr,
            metrics_addr: self.metrics_addr,
            block_time: self.block_time_ms.map(Duration::from_millis),
            block_txs: self.block_txs,
            history: self.history,
            prefetch_threads: self.prefetch_threads,
        });
        Ok(config)
    }
}

/// How long a node one of whose vital parts failed gets to stop in order (its state
/// layers written, its servers closed) before the process exits anyway: it must not
/// linger half-alive. Everything it committed is durable already.
const FAILED_STOP_DEADLINE: Duration = Duration::from_secs(20);

/// Exits the process with code 1 after `deadline`, from a thread of its own.
fn exit_unless_stopped_within(deadline: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        eprintln!(
            "error: a part the node cannot live without failed, and the node did not stop within {} s: exiting",
            deadline.as_secs()
        );
        std::process::exit(1);
    });
}

/// Runs `stave node` until SIGINT or SIGTERM, or until a part it cannot live without
/// (block making, a validator's consensus engine) fails: then it exits with code 1 and the
/// failure on one line.
pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let dev_accounts = config.dev_accounts.clone();
    let node = RunningNode::start(config)?;
    if let (Some(addr), Some(id)) = (node.p2p_addr(), node.node_id()) {
        println!("P2P on {addr} as node 0x{}", hex::encode(id));
    }
    let (head, _) = node.head()?;
    println!(
        "stave node: chain id {}, head {head}, data dir {}",
        node.spec().chain_id(),
        node.datadir().display()
    );
    if !dev_accounts.is_empty() {
        println!("dev accounts (mnemonic \"{DEV_MNEMONIC}\"), 10,000 ETH each:");
        for (index, account) in dev_accounts.iter().enumerate() {
            println!(
                "  ({index}) {}  key {}",
                account.address.to_checksum(None),
                account.secret
            );
        }
    }
    let rpc = match node.rpc_addr() {
        Some(bound) => format!("JSON-RPC on http://{bound} and ws://{bound}"),
        None => "JSON-RPC off".to_owned(),
    };
    let metrics = match node.metrics_addr() {
        Some(addr) => format!("metrics on http://{addr}/metrics"),
        None => "no metrics".to_owned(),
    };
    println!("{rpc}; {metrics}");
    if let Some(public) = node.validator() {
        println!("validator {public}: consensus on the P2P network");
    }
    match node.wait()? {
        Exit::Interrupted => println!("SIGINT: stopping"),
        Exit::Terminated => println!("SIGTERM: stopping"),
        Exit::Ended => exit_unless_stopped_within(FAILED_STOP_DEADLINE),
    }
    let stopped = node.stop()?;
    println!("stopped at block {} ({})", stopped.head, stopped.hash);
    match stopped.error {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}
