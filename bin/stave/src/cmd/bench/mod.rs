//! `stave bench`: measured workloads. Each prints a table and, with `--json`, one JSON
//! object as the last line of stdout. Ratios taken within one run are the figures that
//! count; absolute times on shared machines are context.

mod chart;
mod checkqueue;
mod codec;
mod commit;
mod exec;
mod net;
mod pipeline;
mod sign;
mod state;
mod verify;

use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use stave_primitives::{Address, ChainSpec};
use stave_sdk::{WorkloadKind, workload_genesis};

/// Benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The main job: import blocks with every stage serial, then parallel.
    Pipeline(pipeline::PipelineArgs),
    /// Block body decoding: standard RLP (serial, scan + parallel) vs the offset-indexed list.
    Codec(codec::CodecArgs),
    /// The lock-free check queue vs Bitcoin Core's mutex queue vs rayon.
    Checkqueue(checkqueue::CheckqueueArgs),
    /// The verify stage: serial vs parallel sender recovery, cold vs warm sender cache.
    Verify(StageArgs),
    /// The execute stage: serial vs parallel revm on transfer, ERC-20 and conflict blocks.
    Exec(exec::ExecArgs),
    /// The commit stage: serial vs parallel batch encoding, and the LMDB write.
    Commit(commit::CommitArgs),
    /// SDK signing: build + encode + sign vs the bare curve operation.
    Sign(sign::SignArgs),
    /// The state layers: cold state on disk, blocks without and with prefetch.
    State(state::StateArgs),
    /// The network: compression and compact-block savings, Snappy speed, loopback
    /// throughput with compression off and on.
    Net(net::NetArgs),
}

/// A workload to sign, execute and import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// ETH transfers between distinct accounts.
    Transfer,
    /// ERC-20 transfers on the repo's token.
    Erc20,
    /// ETH transfers that all pay one account.
    Conflict,
    /// All three, plus contract deploys and reverting calls.
    Mixed,
}

/// Chain id of every bench chain.
const CHAIN_ID: u64 = stave_primitives::dev::DEV_CHAIN_ID;
/// Where the bench token lives.
const TOKEN: Address = Address::repeat_byte(0xe2);
/// The account every `conflict` tx pays.
const HOT: Address = Address::repeat_byte(0x40);

impl Workload {
    /// How many of its first `txs` transactions revert by design (mixed: every fifth).
    fn reverts(self, txs: usize) -> usize {
        match self {
            Workload::Mixed => (0..txs).filter(|i| i % 5 == 4).count(),
            _ => 0,
        }
    }

    /// The SDK workload and a genesis funding its `txs` senders (and the token).
    fn setup(self, txs: usize) -> (WorkloadKind, ChainSpec) {
        let (kind, token) = match self {
            Workload::Transfer => (WorkloadKind::Transfer, None),
            Workload::Erc20 => (WorkloadKind::Erc20 { token: TOKEN }, Some(TOKEN)),
            Workload::Conflict => (WorkloadKind::Conflict { hot: HOT }, None),
            Workload::Mixed => (
                WorkloadKind::Mixed {
                    token: TOKEN,
                    hot: HOT,
                },
                Some(TOKEN),
            ),
        };
        (kind, workload_genesis(CHAIN_ID, txs as u64, token))
    }
}

/// Block size and repetitions of the single-stage benches.
#[derive(Debug, Clone, Copy, Args)]
pub struct BlockArgs {
    /// Transactions in the block.
    #[arg(long, default_value_t = 2_500)]
    block_txs: usize,
    /// Timed runs per mode; the median is reported.
    #[arg(long, default_value_t = 9)]
    runs: usize,
}

/// Arguments of the single-stage benches that take nothing else.
#[derive(Debug, Clone, Copy, Args)]
pub struct StageArgs {
    #[command(flatten)]
    block: BlockArgs,
    #[command(flatten)]
    output: Output,
}

/// Output options every bench shares.
#[derive(Debug, Clone, Copy, Args)]
pub struct Output {
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

impl Output {
    /// Prints the JSON line when asked for.
    fn finish(self, report: &impl serde::Serialize) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(report)?);
        }
        Ok(())
    }
}

/// Runs a `stave bench` subcommand.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Pipeline(args) => pipeline::run(args),
        BenchCommand::Codec(args) => codec::run(args),
        BenchCommand::Checkqueue(args) => checkqueue::run(args),
        BenchCommand::Verify(args) => verify::run(args),
        BenchCommand::Exec(args) => exec::run(args),
        BenchCommand::Commit(args) => commit::run(args),
        BenchCommand::Sign(args) => sign::run(args),
        BenchCommand::State(args) => state::run(args),
        BenchCommand::Net(args) => net::run(args),
    }
}

/// Threads rayon and the queues use: all cores.
fn threads() -> usize {
    rayon::current_num_threads()
}

/// Median wall time of `runs` calls of `f`, after one warm-up call.
fn median_time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    std::hint::black_box(f());
    let times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    median(times)
}

/// The median of `times`; `times` is not empty.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Microseconds with two decimals, for JSON.
fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e8).round() / 100.0
}

/// A ratio with three decimals, for JSON.
fn ratio(numerator: f64, denominator: f64) -> f64 {
    (numerator / denominator * 1000.0).round() / 1000.0
}
