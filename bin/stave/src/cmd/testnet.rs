//! `stave testnet`: a multi-validator chain on this machine, made and run by
//! `stave_launch::testnet`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use stave_launch::testnet::{self, NodesEvent, STOP_GRACE, TestnetLayout};

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
    /// Directory to write (created; existing files are never overwritten).
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    layout: TestnetLayout,
}

/// Runs a `stave testnet` subcommand.
pub fn run(cmd: TestnetCommand) -> anyhow::Result<()> {
    match cmd {
        TestnetCommand::Init(args) => init(&args),
        TestnetCommand::Run { dir } => run_nodes(&dir),
    }
}

fn init(args: &InitArgs) -> anyhow::Result<()> {
    for (i, member) in testnet::init(&args.dir, &args.layout)?.iter().enumerate() {
        println!(
            "{}",
            serde_json::json!({
                "node": i,
                "config": member.config,
                "rpc": member.rpc.map(|addr| format!("http://{addr}")),
                "validator": member.validator,
            })
        );
    }
    Ok(())
}

fn run_nodes(dir: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the stave executable")?;
    testnet::run_nodes(&exe, dir, |event| match event {
        NodesEvent::Started {
            index,
            pid,
            config,
            log,
        } => println!(
            "node {index}: pid {pid}, config {}, log {}",
            config.display(),
            log.display()
        ),
        NodesEvent::Running(count) => println!("{count} nodes running; Ctrl-C stops them"),
        NodesEvent::Exited { index, status } => {
            eprintln!("node {index} exited ({status}); see node{index}/node.log");
        }
        NodesEvent::Stopping(count) => println!("stopping {count} nodes"),
        NodesEvent::Killing { index } => {
            eprintln!("node {index} did not stop in {STOP_GRACE:?}: killing it");
        }
    })?;
    Ok(())
}
