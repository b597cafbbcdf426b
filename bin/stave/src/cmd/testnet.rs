//! `stave testnet`: a multi-validator chain on this machine. `init` writes everything N
//! validators need (`stave_launch::testnet`): one genesis naming them, a chain CA, and
//! per node a consensus key, a TLS certificate holding that same key, and
//! `node<i>/config.toml` (RPC on 8545+i, metrics on 9001+i, P2P on 30300+i). `run` starts
//! one `stave node` process per config and stops them together.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::{Args, Subcommand};
use stave_launch::testnet::{self, TestnetLayout};

/// `stave testnet` subcommands.
#[derive(Debug, Subcommand)]
pub enum TestnetCommand {
    /// Write keys, certificates, a genesis and one config per validator into a directory.
    Init(InitArgs),
    /// Start every node of a directory made by `init`; Ctrl-C stops them all.
    Run {
        /// The directory `stave testnet init` wrote.
        #[arg(long)]
        dir: PathBuf,
    },
}

/// Arguments of `stave testnet init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// How many validators (BFT tolerates f faulty ones among 3f+1).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=100))]
    nodes: u16,
    /// Directory to write (created; existing files are never overwritten).
    #[arg(long)]
    dir: PathBuf,
    /// Address every node listens on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// JSON-RPC port of node 0; node i serves on this + i.
    #[arg(long, default_value_t = 8545)]
    rpc_port: u16,
    /// Prometheus port of node 0; node i serves on this + i.
    #[arg(long, default_value_t = 9001)]
    metrics_port: u16,
    /// P2P port of node 0; node i listens on this + i.
    #[arg(long, default_value_t = 30300)]
    p2p_port: u16,
    /// Longest time an idle leader waits for transactions before it proposes, in ms.
    #[arg(long, default_value_t = 1_000)]
    block_time_ms: u64,
}

/// Runs a `stave testnet` subcommand.
pub fn run(cmd: TestnetCommand) -> anyhow::Result<()> {
    match cmd {
        TestnetCommand::Init(args) => init(&args),
        TestnetCommand::Run { dir } => run_nodes(&dir),
    }
}

fn init(args: &InitArgs) -> anyhow::Result<()> {
    let layout = TestnetLayout {
        nodes: args.nodes,
        host: args.host,
        rpc_port: args.rpc_port,
        metrics_port: args.metrics_port,
        p2p_port: args.p2p_port,
        block_time_ms: args.block_time_ms,
    };
    for (i, member) in testnet::init(&args.dir, &layout)?.iter().enumerate() {
        println!(
            "{}",
            serde_json::json!({
                "node": i,
                "config": member.config,
                "rpc": format!("http://{}", member.rpc),
                "validator": member.validator,
            })
        );
    }
    Ok(())
}

/// How long nodes get to stop on SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn run_nodes(dir: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the stave executable")?;
    let mut children: Vec<(usize, Child)> = Vec::new();
    for (i, config) in testnet::configs(dir)?.iter().enumerate() {
        let log_path = dir.join(format!("node{i}/node.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let child = Command::new(&exe)
            .args(["node", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log handle")?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {i}"))?;
        println!(
            "node {i}: pid {}, config {}, log {}",
            child.id(),
            config.display(),
            log_path.display()
        );
        children.push((i, child));
    }
    println!("{} nodes running; Ctrl-C stops them", children.len());

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
        let mut ticks = tokio::time::interval(Duration::from_millis(250));
        // Until a signal, or until every node has exited (each exit is reported).
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
                _ = ticks.tick() => {}
            }
            children.retain_mut(|(i, child)| match child.try_wait() {
                Ok(Some(status)) => {
                    eprintln!("node {i} exited ({status}); see node{i}/node.log");
                    false
                }
                _ => true,
            });
            anyhow::ensure!(!children.is_empty(), "every node exited");
        }
        Ok(())
    })?;
    println!("stopping {} nodes", children.len());
    stop_all(&mut children);
    Ok(())
}

/// SIGTERM to every child, then SIGKILL to those still running after [`STOP_GRACE`].
fn stop_all(children: &mut [(usize, Child)]) {
    for (_, child) in children.iter() {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) with a pid this process spawned and has not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    for (i, child) in children.iter_mut() {
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(child.try_wait(), Ok(None)) {
            eprintln!("node {i} did not stop in {STOP_GRACE:?}: killing it");
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}
