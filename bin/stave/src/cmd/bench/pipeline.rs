//! `stave bench pipeline`: the main job. Signs a workload, builds blocks of it, then
//! imports them into fresh data dirs three ways and reports each stage's time:
//! - serial: every stage serial, one block after another (the baseline);
//! - staged: every stage parallel, one stage at a time, so each stage has the cores to
//!   itself: a stage's speedup is its serial time over this one;
//! - pipelined: the node's own import, block N+1 decoded and verified while block N
//!   executes and commits: the total speedup and the TPS. A stage's time here includes
//!   waiting for cores the next block's stages hold, so it says how the stages share the
//!   machine, not how parallel each one is.
//!
//! It does so in several rounds and reports medians, so one noisy moment of a shared
//! machine does not decide the ratios.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stave_exec::ParallelExecutor;
use stave_node::{Chain, Parallelism, StageTimes};
use stave_primitives::{ChainSpec, SignedTx};
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload_range};
use stave_storage::LmdbStore;
use stave_verify::{SenderCache, Verifier, verify_serial};

use super::{
    CHAIN_ID, Output, Workload,
    chart::{StageBar, write_stage_chart},
    median, ratio, threads,
};

/// Whether the verify stage finds senders in the cache (as after txpool admission).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SenderCacheMode {
    /// Every sender is recovered.
    Cold,
    /// Every sender is in the cache.
    Warm,
}

/// Arguments of `stave bench pipeline`.
#[derive(Debug, Args)]
pub struct PipelineArgs {
    /// What the transactions do.
    #[arg(long, value_enum, default_value_t = Workload::Transfer)]
    workload: Workload,
    /// Transactions in all, one funded sender each: by default 40 blocks over a genesis of
    /// 100,000 accounts, an import's steady state on a state no core's cache holds.
    // With 10,000 (4 blocks over 10,000 accounts) the first block into each fresh data dir
    // was a quarter of the import (its parallel execution ~16% slower than the next ones,
    // its serial ~5%), and the state was small enough to stay in the one core's cache that
    // serial execution runs on (a serial transfer 1.98 µs at 10,000, 2.33 at 100,000),
    // while a block split over two cores pulls it into both: transfer execute 1.71 / 1.80
    // / 1.74x against 1.70 / 1.86 / 1.88x with 100,000, alternated in one hour
    // (MEASUREMENTS.md, sessions 43 and 47).
    #[arg(long, default_value_t = 100_000)]
    txs: usize,
    /// Transactions per block (FISCO BCOS measured with 2,500).
    #[arg(long, default_value_t = 2_500)]
    block_txs: usize,
    /// Whether senders are already cached.
    #[arg(long, value_enum, default_value_t = SenderCacheMode::Cold)]
    sender_cache: SenderCacheMode,
    /// Rounds, each a serial import then a parallel one (and a recovery-rate sample);
    /// every figure reported is the median over the rounds. With 3, back-to-back runs of
    /// the default transfers gave a commit speedup of 1.50-2.07x; with 9, 1.62-2.04x.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Where to write the stage chart.
    #[arg(long, default_value = "stave-bench.svg")]
    svg: std::path::PathBuf,
    #[command(flatten)]
    output: Output,
}

/// The stages reported, then the total.
const STAGES: [&str; 5] = ["decode", "verify", "execute", "commit", "total"];

/// How an import run drives the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImportRun {
    /// Every stage serial, block after block.
    Serial,
    /// Every stage parallel, one stage of one block at a time.
    Staged,
    /// Every stage parallel, the stages of consecutive blocks overlapped.
    Pipelined,
}

/// One import run's stage times.
#[derive(Debug, Serialize)]
struct RunReport {
    decode_ms: f64,
    verify_ms: f64,
    execute_ms: f64,
    commit_ms: f64,
    total_ms: f64,
    tps: f64,
}

/// Serial over parallel, per stage and in all.
#[derive(Debug, Serialize)]
struct Speedup {
    decode: f64,
    verify: f64,
    execute: f64,
    commit: f64,
    total: f64,
}

impl Speedup {
    /// The figures in [`STAGES`] order.
    fn columns(&self) -> [f64; 5] {
        [
            self.decode,
            self.verify,
            self.execute,
            self.commit,
            self.total,
        ]
    }
}

impl RunReport {
    /// The times in [`STAGES`] order.
    fn columns(&self) -> [f64; 5] {
        [
            self.decode_ms,
            self.verify_ms,
            self.execute_ms,
            self.commit_ms,
            self.total_ms,
        ]
    }
}

/// The JSON line.
#[derive(Debug, Serialize)]
struct Report {
    workload: Workload,
    sender_cache: SenderCacheMode,
    txs: usize,
    blocks: usize,
    threads: usize,
    runs: u32,
    serial: RunReport,
    /// The pipelined run: the node's import.
    parallel: RunReport,
    /// The staged run: each stage alone on the cores.
    staged: RunReport,
    /// Each stage serial over staged; the total serial over pipelined.
    speedup: Speedup,
    /// Serial over pipelined, stage by stage too.
    pipelined_speedup: Speedup,
    ecrecover_tps_per_core: f64,
    bound_tps: f64,
    bound_ratio: f64,
}

fn ms(d: Duration) -> f64 {
    ratio(d.as_secs_f64() * 1e3, 1.0)
}

/// Imports `blocks` into a fresh data dir on `executor`; returns stage times, wall time
/// and head.
fn import(
    spec: &ChainSpec,
    blocks: &[Vec<u8>],
    run: ImportRun,
    executor: &ParallelExecutor,
    cache: Option<Arc<SenderCache>>,
) -> anyhow::Result<(StageTimes, Duration, stave_primitives::B256)> {
    let dir = tempfile::tempdir()?;
    let store = LmdbStore::open(dir.path(), 16 << 30)?;
    let parallelism = match run {
        ImportRun::Serial => Parallelism::Serial,
        ImportRun::Staged | ImportRun::Pipelined => Parallelism::Parallel,
    };
    let mut chain = Chain::open_on(&store, spec, executor.clone(), parallelism, cache)?;
    let mut times = StageTimes::default();
    let mut repeated = None;
    let mut on_block = |imported: stave_node::Imported| {
        if !imported.new {
            repeated.get_or_insert(imported.number);
        }
        times += imported.times;
    };
    let start = Instant::now();
    if run == ImportRun::Pipelined {
        chain.import_stream(blocks.iter().map(Vec::as_slice), None, on_block)?;
    } else {
        for block in blocks {
            on_block(chain.import(block)?);
        }
    }
    let wall = start.elapsed();
    if let Some(number) = repeated {
        anyhow::bail!("block {number} was already stored");
    }
    Ok((times, wall, chain.head()?.1))
}

/// One import's stage times and wall time.
#[derive(Debug)]
struct Import {
    times: StageTimes,
    wall: Duration,
}

/// Serial time over parallel time.
fn speed(serial: Duration, parallel: Duration) -> f64 {
    ratio(serial.as_secs_f64(), parallel.as_secs_f64())
}

impl Import {
    /// This import's times in milliseconds, and its rate over `txs` transactions.
    fn report(&self, txs: usize) -> RunReport {
        RunReport {
            decode_ms: ms(self.times.decode),
            verify_ms: ms(self.times.verify),
            execute_ms: ms(self.times.execute),
            commit_ms: ms(self.times.commit),
            total_ms: ms(self.wall),
            tps: ratio(txs as f64, self.wall.as_secs_f64()),
        }
    }

    /// This import's times over `other`'s, stage by stage and in all.
    fn speedup_over(&self, other: &Import) -> Speedup {
        Speedup {
            decode: speed(self.times.decode, other.times.decode),
            verify: speed(self.times.verify, other.times.verify),
            execute: speed(self.times.execute, other.times.execute),
            commit: speed(self.times.commit, other.times.commit),
            total: speed(self.wall, other.wall),
        }
    }
}

/// The median of each stage's time and of the wall time over `imports` (not empty).
fn median_import(imports: &[Import]) -> Import {
    let median_of = |field: fn(&Import) -> Duration| median(imports.iter().map(field).collect());
    Import {
        times: StageTimes {
            decode: median_of(|i| i.times.decode),
            verify: median_of(|i| i.times.verify),
            execute: median_of(|i| i.times.execute),
            commit: median_of(|i| i.times.commit),
        },
        wall: median_of(|i| i.wall),
    }
}

/// Signs the workload on all cores in pieces, with a progress bar on stderr.
fn sign_with_progress(kind: WorkloadKind, count: usize) -> anyhow::Result<Vec<SignedTx>> {
    const PIECE: u64 = 2_000;
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let bar = ProgressBar::new(count as u64).with_style(ProgressStyle::with_template(
        "signing {bar:40} {pos}/{len} txs, {per_sec}, eta {eta}",
    )?);
    let mut txs = Vec::with_capacity(count);
    let mut start = 0;
    while start < count as u64 {
        let end = (start + PIECE).min(count as u64);
        txs.extend(signed_workload_range(kind, &builder, start..end)?);
        bar.set_position(end);
        start = end;
    }
    bar.finish_and_clear();
    Ok(txs)
}

/// Runs the pipeline bench.
pub fn run(args: PipelineArgs) -> anyhow::Result<()> {
    let threads = threads();
    let (kind, spec) = args.workload.setup(args.txs);
    eprintln!(
        "signing {} {:?} transactions on {threads} threads…",
        args.txs, args.workload
    );
    let txs = sign_with_progress(kind, args.txs)?;
    let recovered = Verifier::new(CHAIN_ID, threads, None).verify(txs.clone())?;

    eprintln!("building blocks of {}…", args.block_txs);
    let build_dir = tempfile::tempdir()?;
    let build_store = LmdbStore::open(build_dir.path(), 16 << 30)?;
    let mut producer = Chain::open(&build_store, &spec, threads)?;
    let blocks = recovered
        .chunks(args.block_txs.max(1))
        .enumerate()
        .map(|(i, chunk)| producer.build(chunk.to_vec(), 1_700_000_000 + i as u64))
        .collect::<Result<Vec<_>, _>>()?;

    // Recoveries per second on one core, sampled in every round on this workload's
    // first block.
    let sample: Vec<_> = txs.iter().take(args.block_txs).cloned().collect();
    let recovery_rate = || -> anyhow::Result<f64> {
        let start = Instant::now();
        verify_serial(sample.clone(), CHAIN_ID, None)?;
        Ok(sample.len() as f64 / start.elapsed().as_secs_f64())
    };

    let cache = (args.sender_cache == SenderCacheMode::Warm).then(|| {
        let cache = SenderCache::new(args.txs.max(1));
        recovered
            .iter()
            .for_each(|tx| cache.insert(tx.tx.hash(), tx.sender));
        Arc::new(cache)
    });
    // One executor for every import, as a node has one for its whole run: a chain of its
    // own per import started each parallel run on new threads with empty buffers, a cost
    // of the first blocks (~3 ms in a 4-block transfer import) that the serial runs, on
    // this warm thread, never paid.
    let executor = ParallelExecutor::new(threads)?;
    let (mut serials, mut stageds, mut pipelineds) = (Vec::new(), Vec::new(), Vec::new());
    let mut rates = Vec::new();
    let mut head = None;
    for round in 1..=args.runs {
        eprintln!(
            "round {round} of {}: importing {} blocks serially, then staged, then pipelined…",
            args.runs,
            blocks.len()
        );
        rates.push(recovery_rate()?);
        for (run, imports) in [
            (ImportRun::Serial, &mut serials),
            (ImportRun::Staged, &mut stageds),
            (ImportRun::Pipelined, &mut pipelineds),
        ] {
            let (times, wall, ended) = import(&spec, &blocks, run, &executor, cache.clone())?;
            let expected = *head.get_or_insert(ended);
            anyhow::ensure!(
                ended == expected,
                "imports ended at different heads: {ended} ({run:?}, round {round}) vs {expected}"
            );
            imports.push(Import { times, wall });
        }
    }
    let same_head = head.expect("at least one round");
    rates.sort_by(f64::total_cmp);
    let ecrecover_tps_per_core = rates[rates.len() / 2];
    let serial = median_import(&serials);
    let staged = median_import(&stageds);
    let pipelined = median_import(&pipelineds);
    let parallel = pipelined.report(args.txs);
    let bound_tps = threads as f64 * ecrecover_tps_per_core;
    let report = Report {
        workload: args.workload,
        sender_cache: args.sender_cache,
        txs: args.txs,
        blocks: blocks.len(),
        threads,
        runs: args.runs,
        speedup: Speedup {
            total: speed(serial.wall, pipelined.wall),
            ..serial.speedup_over(&staged)
        },
        pipelined_speedup: serial.speedup_over(&pipelined),
        ecrecover_tps_per_core: ratio(ecrecover_tps_per_core, 1.0),
        bound_tps: ratio(bound_tps, 1.0),
        bound_ratio: ratio(parallel.tps, bound_tps),
        serial: serial.report(args.txs),
        staged: staged.report(args.txs),
        parallel,
    };
    println!(
        "pipeline: {} txs ({:?}), {} blocks of {}, {threads} threads, sender cache {:?}; same head {same_head}; medians of {} rounds",
        report.txs,
        report.workload,
        report.blocks,
        args.block_txs,
        report.sender_cache,
        report.runs
    );
    println!(
        "staged: each stage alone on the cores; pipelined: the node's import, block N+1 decoded and verified while block N executes and commits"
    );
    println!(
        "{:<10} {:>10} {:>10} {:>8} {:>13} {:>8}",
        "stage", "serial ms", "staged ms", "speedup", "pipelined ms", "speedup"
    );
    let serial_ms = report.serial.columns();
    let staged_ms = report.staged.columns();
    let pipelined_ms = report.parallel.columns();
    let speedup = report.speedup.columns();
    let pipelined_speedup = report.pipelined_speedup.columns();
    for (i, stage) in STAGES.iter().enumerate() {
        println!(
            "{stage:<10} {:>10.1} {:>10.1} {:>7.2}x {:>13.1} {:>7.2}x",
            serial_ms[i], staged_ms[i], speedup[i], pipelined_ms[i], pipelined_speedup[i]
        );
    }
    // The chart shows what each stage costs alone, serial and parallel.
    let bars: Vec<StageBar> = STAGES
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, &stage)| StageBar {
            stage,
            serial_ms: serial_ms[i],
            parallel_ms: staged_ms[i],
        })
        .collect();
    let title = format!(
        "{} txs ({:?}, {} blocks of {}): serial {:.0} TPS, parallel {:.0} TPS",
        report.txs,
        report.workload,
        report.blocks,
        args.block_txs,
        report.serial.tps,
        report.parallel.tps
    );
    write_stage_chart(&args.svg, &title, &bars)?;
    println!("stage chart: {}", args.svg.display());
    println!(
        "TPS: serial {:.0}, parallel {:.0}; bound {:.0} ({threads} × {:.0} recoveries/s/core): {:.2} of bound",
        report.serial.tps,
        report.parallel.tps,
        report.bound_tps,
        report.ecrecover_tps_per_core,
        report.bound_ratio
    );
    args.output.finish(&report)
}
