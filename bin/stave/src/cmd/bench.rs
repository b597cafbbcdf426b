//! `stave bench`: runs one of [`stave_bench`]'s measured workloads and prints its table
//! and, with `--json`, its JSON line as the last line of stdout.

use std::{cell::RefCell, fmt::Display};

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stave_bench::{
    BlockConfig, Progress, checkqueue::CheckqueueConfig, codec::CodecConfig, commit::CommitConfig,
    exec::ExecConfig, net::NetConfig, node::NodeConfig, pipeline::PipelineConfig, sign::SignConfig,
};

/// Benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The main job: import blocks with every stage serial, then parallel.
    Pipeline(Bench<PipelineConfig>),
    /// Block body decoding: standard RLP (serial, scan + parallel) vs the offset-indexed list.
    Codec(Bench<CodecConfig>),
    /// The lock-free check queue vs Bitcoin Core's mutex queue vs rayon.
    Checkqueue(Bench<CheckqueueConfig>),
    /// The verify stage: serial vs parallel sender recovery, cold vs warm sender cache.
    Verify(Bench<BlockConfig>),
    /// The execute stage: serial vs parallel revm on transfer, ERC-20 and conflict blocks.
    Exec(Bench<ExecConfig>),
    /// The commit stage: serial vs parallel batch encoding, and the LMDB write.
    Commit(Bench<CommitConfig>),
    /// SDK signing: build + encode + sign vs the bare curve operation.
    Sign(Bench<SignConfig>),
    /// The node's import path over a large state, cold: blocks without and with
    /// prefetch, hit rates per state layer, memory and disk per transaction.
    Node(Bench<NodeConfig>),
    /// The network: compression and compact-block savings, Snappy speed, loopback
    /// throughput with compression off and on.
    Net(Bench<NetConfig>),
}

/// One bench's arguments and the output options every bench shares.
#[derive(Debug, Args)]
pub struct Bench<C: Args> {
    #[command(flatten)]
    config: C,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

impl<C: Args> Bench<C> {
    /// Prints `report`'s table, then its JSON line when asked for.
    fn print(&self, report: impl Display + Serialize) -> anyhow::Result<()> {
        print!("{report}");
        if self.json {
            println!("{}", serde_json::to_string(&report)?);
        }
        Ok(())
    }
}

/// Runs a `stave bench` subcommand.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    use stave_bench::{checkqueue, codec, commit, exec, net, node, pipeline, sign, verify};
    let progress = Notes::default();
    match cmd {
        BenchCommand::Pipeline(b) => b.print(pipeline::run(&b.config, &progress)?),
        BenchCommand::Codec(b) => b.print(codec::run(&b.config)?),
        BenchCommand::Checkqueue(b) => b.print(checkqueue::run(&b.config)?),
        BenchCommand::Verify(b) => b.print(verify::run(&b.config)?),
        BenchCommand::Exec(b) => b.print(exec::run(&b.config)?),
        BenchCommand::Commit(b) => b.print(commit::run(&b.config)?),
        BenchCommand::Sign(b) => b.print(sign::run(&b.config)?),
        BenchCommand::Node(b) => b.print(node::run(&b.config, &progress)?),
        BenchCommand::Net(b) => b.print(net::run(&b.config)?),
    }
}

/// Notes on stderr, and a bar while the workload is signed.
#[derive(Default)]
struct Notes {
    signing: RefCell<Option<ProgressBar>>,
}

impl Progress for Notes {
    fn note(&self, message: &str) {
        eprintln!("{message}");
    }

    fn signed(&self, done: u64, total: u64) {
        let mut signing = self.signing.borrow_mut();
        let bar = signing.get_or_insert_with(|| {
            let style = ProgressStyle::with_template(
                "signing {bar:40} {pos}/{len} txs, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(total).with_style(style)
        });
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
            *signing = None;
        }
    }
}
