//! The main job (`stave bench pipeline`). Signs a workload, builds blocks of it, then
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
    fmt,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;
use stave_exec::ParallelExecutor;
use stave_node::{Chain, Parallelism, StageTimes};
use stave_primitives::{B256, ChainSpec, SignedTx};
use stave_sdk::{Targets, TxBuilder, Workload, signed_workload_range};
use stave_storage::LmdbStore;
use stave_verify::{SenderCache, Verifier, verify_serial};

use crate::{
    BenchError, CHAIN_ID, GAS_PRICE, Progress,
    chart::{StageBar, write_stage_chart},
    ensure, median, ms, ratio, threads,
};

/// Whether the verify stage finds senders in the cache (as after txpool admission).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SenderCacheMode {
    /// Every sender is recovered.
    Cold,
    /// Every sender is in the cache.
    Warm,
}

/// What `stave bench pipeline` imports, and how often.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PipelineConfig {
    /// What the transactions do.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Workload::Transfer))]
    pub workload: Workload,
    /// Transactions in all, one funded sender each: by default 40 blocks over a genesis of
    /// 100,000 accounts, an import's steady state on a state no core's cache holds.
    // With fewer (4 blocks over 10,000 accounts) the first block into each fresh data dir
    // was a quarter of the import and slower than the next ones, and the state was small
    // enough to stay in the one core's cache that serial execution runs on, while a block
    // split over two cores pulls it into both (MEASUREMENTS.md, sessions 43 and 47).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 100_000))]
    pub txs: usize,
    /// Transactions per block (FISCO BCOS measured with 2,500).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub block_txs: usize,
    /// Whether senders are already cached.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = SenderCacheMode::Cold))]
    pub sender_cache: SenderCacheMode,
    /// Rounds, each a serial import then a parallel one (and a recovery-rate sample);
    /// every figure reported is the median over the rounds, so one noisy moment of a
    /// shared machine does not decide a ratio.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..))
    )]
    pub runs: u32,
    /// Where to write the stage chart.
    #[cfg_attr(feature = "clap", arg(long, default_value = "stave-bench.svg"))]
    pub svg: PathBuf,
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

/// One import run's stage times, in milliseconds, and its rate.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Decoding the blocks.
    pub decode_ms: f64,
    /// Recovering their senders.
    pub verify_ms: f64,
    /// Executing them.
    pub execute_ms: f64,
    /// Committing them.
    pub commit_ms: f64,
    /// The whole import, wall time.
    pub total_ms: f64,
    /// Transactions per second over the whole import.
    pub tps: f64,
}

/// Serial over parallel, per stage and in all.
#[derive(Debug, Clone, Serialize)]
pub struct Speedup {
    /// Decoding.
    pub decode: f64,
    /// Recovering senders.
    pub verify: f64,
    /// Executing.
    pub execute: f64,
    /// Committing.
    pub commit: f64,
    /// The whole import.
    pub total: f64,
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

/// What the pipeline bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// What the transactions did.
    pub workload: Workload,
    /// Whether senders were cached.
    pub sender_cache: SenderCacheMode,
    /// Transactions imported.
    pub txs: usize,
    /// Blocks imported.
    pub blocks: usize,
    /// Threads the parallel stages used.
    pub threads: usize,
    /// Rounds the medians are over.
    pub runs: u32,
    /// The serial run.
    pub serial: RunReport,
    /// The pipelined run: the node's import.
    pub parallel: RunReport,
    /// The staged run: each stage alone on the cores.
    pub staged: RunReport,
    /// Each stage serial over staged; the total serial over pipelined.
    pub speedup: Speedup,
    /// Serial over pipelined, stage by stage too.
    pub pipelined_speedup: Speedup,
    /// Signatures one core recovers per second.
    pub ecrecover_tps_per_core: f64,
    /// What recovery alone allows on every core: the bound on the import's rate.
    pub bound_tps: f64,
    /// The pipelined rate over the bound.
    pub bound_ratio: f64,
    /// Transactions per block.
    #[serde(skip)]
    pub block_txs: usize,
    /// The head every import ended at.
    #[serde(skip)]
    pub head: B256,
    /// Where the stage chart was written.
    #[serde(skip)]
    pub svg: PathBuf,
}

/// Imports `blocks` into a fresh data dir on `executor`; returns stage times, wall time
/// and head.
fn import(
    spec: &ChainSpec,
    blocks: &[Vec<u8>],
    run: ImportRun,
    executor: &ParallelExecutor,
    cache: Option<Arc<SenderCache>>,
) -> Result<(StageTimes, Duration, B256), BenchError> {
    let dir = tempfile::tempdir().map_err(BenchError::io("making a data dir"))?;
    let store = LmdbStore::open(dir.path(), 16 << 30)?;
    let parallelism = match run {
        ImportRun::Serial => Parallelism::Serial,
        ImportRun::Staged | ImportRun::Pipelined => Parallelism::Parallel,
    };
    let mut chain = Chain::open_on(
        &store,
        spec,
        executor.clone(),
        parallelism,
        cache,
        stave_state::StateOptions::default(),
    )?;
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
        chain.import_stream(blocks.iter().map(Vec::as_slice), on_block)?;
    } else {
        for block in blocks {
            on_block(chain.import(block)?);
        }
    }
    let wall = start.elapsed();
    if let Some(number) = repeated {
        return Err(BenchError::Check(format!(
            "block {number} was already stored"
        )));
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

/// Signs `count` transactions of `workload` on all cores in pieces, telling `progress`
/// after each.
fn sign_with_progress(
    workload: Workload,
    count: usize,
    progress: &dyn Progress,
) -> Result<Vec<SignedTx>, BenchError> {
    const PIECE: u64 = 2_000;
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let targets = Targets::default();
    let total = count as u64;
    let mut txs = Vec::with_capacity(count);
    let mut start = 0;
    progress.signed(0, total);
    while start < total {
        let end = (start + PIECE).min(total);
        txs.extend(signed_workload_range(
            workload,
            &targets,
            &builder,
            start..end,
        )?);
        progress.signed(end, total);
        start = end;
    }
    Ok(txs)
}

/// Runs the pipeline bench and writes its stage chart to `config.svg`.
pub fn run(config: &PipelineConfig, progress: &dyn Progress) -> Result<PipelineReport, BenchError> {
    let threads = threads();
    let spec = config
        .workload
        .genesis(CHAIN_ID, config.txs as u64, &Targets::default());
    progress.note(&format!(
        "signing {} {:?} transactions on {threads} threads…",
        config.txs, config.workload
    ));
    let txs = sign_with_progress(config.workload, config.txs, progress)?;
    let recovered = Verifier::new(CHAIN_ID, threads, None).verify(txs.clone())?;

    progress.note(&format!("building blocks of {}…", config.block_txs));
    let build_dir = tempfile::tempdir().map_err(BenchError::io("making a data dir"))?;
    let build_store = LmdbStore::open(build_dir.path(), 16 << 30)?;
    let mut producer = Chain::open(&build_store, &spec, threads)?;
    let blocks = recovered
        .chunks(config.block_txs.max(1))
        .enumerate()
        .map(|(i, chunk)| producer.build(chunk.to_vec(), 1_700_000_000 + i as u64))
        .collect::<Result<Vec<_>, _>>()?;

    // Recoveries per second on one core, sampled in every round on this workload's
    // first block.
    let sample: Vec<_> = txs.iter().take(config.block_txs).cloned().collect();
    let recovery_rate = || -> Result<f64, BenchError> {
        let start = Instant::now();
        verify_serial(sample.clone(), CHAIN_ID, None)?;
        Ok(sample.len() as f64 / start.elapsed().as_secs_f64())
    };

    let cache = (config.sender_cache == SenderCacheMode::Warm).then(|| {
        let cache = SenderCache::new(config.txs.max(1));
        recovered
            .iter()
            .for_each(|tx| cache.insert(tx.tx.hash(), tx.sender));
        Arc::new(cache)
    });
    // One executor for every import, as a node has one for its whole run: a chain of its
    // own per import started each parallel run on new threads with empty buffers, a cost
    // of the first blocks that the serial runs, on this warm thread, never paid.
    let executor =
        ParallelExecutor::new(threads).map_err(BenchError::io("starting the executor"))?;
    let (mut serials, mut stageds, mut pipelineds) = (Vec::new(), Vec::new(), Vec::new());
    let mut rates = Vec::new();
    let mut head = None;
    for round in 1..=config.runs.max(1) {
        progress.note(&format!(
            "round {round} of {}: importing {} blocks serially, then staged, then pipelined…",
            config.runs,
            blocks.len()
        ));
        rates.push(recovery_rate()?);
        for (run, imports) in [
            (ImportRun::Serial, &mut serials),
            (ImportRun::Staged, &mut stageds),
            (ImportRun::Pipelined, &mut pipelineds),
        ] {
            let (times, wall, ended) = import(&spec, &blocks, run, &executor, cache.clone())?;
            let expected = *head.get_or_insert(ended);
            ensure(ended == expected, || {
                format!(
                    "imports ended at different heads: {ended} ({run:?}, round {round}) vs {expected}"
                )
            })?;
            imports.push(Import { times, wall });
        }
    }
    rates.sort_by(f64::total_cmp);
    let ecrecover_tps_per_core = rates[rates.len() / 2];
    let serial = median_import(&serials);
    let staged = median_import(&stageds);
    let pipelined = median_import(&pipelineds);
    let parallel = pipelined.report(config.txs);
    let bound_tps = threads as f64 * ecrecover_tps_per_core;
    let report = PipelineReport {
        workload: config.workload,
        sender_cache: config.sender_cache,
        txs: config.txs,
        blocks: blocks.len(),
        threads,
        runs: config.runs,
        speedup: Speedup {
            total: speed(serial.wall, pipelined.wall),
            ..serial.speedup_over(&staged)
        },
        pipelined_speedup: serial.speedup_over(&pipelined),
        ecrecover_tps_per_core: ratio(ecrecover_tps_per_core, 1.0),
        bound_tps: ratio(bound_tps, 1.0),
        bound_ratio: ratio(parallel.tps, bound_tps),
        serial: serial.report(config.txs),
        staged: staged.report(config.txs),
        parallel,
        block_txs: config.block_txs,
        head: head.unwrap_or_default(),
        svg: config.svg.clone(),
    };
    // The chart shows what each stage costs alone, serial and parallel.
    let serial_ms = report.serial.columns();
    let staged_ms = report.staged.columns();
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
        config.block_txs,
        report.serial.tps,
        report.parallel.tps
    );
    write_stage_chart(&config.svg, &title, &bars)?;
    Ok(report)
}

impl fmt::Display for PipelineReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threads = self.threads;
        writeln!(
            f,
            "pipeline: {} txs ({:?}), {} blocks of {}, {threads} threads, sender cache {:?}; same head {}; medians of {} rounds",
            self.txs,
            self.workload,
            self.blocks,
            self.block_txs,
            self.sender_cache,
            self.head,
            self.runs
        )?;
        writeln!(
            f,
            "staged: each stage alone on the cores; pipelined: the node's import, block N+1 decoded and verified while block N executes and commits"
        )?;
        writeln!(
            f,
            "{:<10} {:>10} {:>10} {:>8} {:>13} {:>8}",
            "stage", "serial ms", "staged ms", "speedup", "pipelined ms", "speedup"
        )?;
        let serial_ms = self.serial.columns();
        let staged_ms = self.staged.columns();
        let pipelined_ms = self.parallel.columns();
        let speedup = self.speedup.columns();
        let pipelined_speedup = self.pipelined_speedup.columns();
        for (i, stage) in STAGES.iter().enumerate() {
            writeln!(
                f,
                "{stage:<10} {:>10.1} {:>10.1} {:>7.2}x {:>13.1} {:>7.2}x",
                serial_ms[i], staged_ms[i], speedup[i], pipelined_ms[i], pipelined_speedup[i]
            )?;
        }
        writeln!(f, "stage chart: {}", self.svg.display())?;
        writeln!(
            f,
            "TPS: serial {:.0}, parallel {:.0}; bound {:.0} ({threads} × {:.0} recoveries/s/core): {:.2} of bound",
            self.serial.tps,
            self.parallel.tps,
            self.bound_tps,
            self.ecrecover_tps_per_core,
            self.bound_ratio
        )
    }
}
