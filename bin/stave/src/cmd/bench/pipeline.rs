//! `stave bench pipeline`: the main job. Signs a workload, builds blocks of it, then
//! imports them into two fresh data dirs, once with every stage serial and once with
//! every stage parallel, and reports each stage's time (DESIGN.md §5). It does so in
//! several rounds and reports medians, so one noisy moment of a shared machine does not
//! decide the ratios.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stave_node::{Chain, Parallelism, StageTimes};
use stave_primitives::{ChainSpec, SignedTx};
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload_range};
use stave_storage::LmdbStore;
use stave_verify::{SenderCache, Verifier, verify_serial};

use super::{
    CHAIN_ID, Output, Workload,
    chart::{StageBar, write_stage_chart},
    ratio, threads,
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
    /// Transactions in all.
    #[arg(long, default_value_t = 10_000)]
    txs: usize,
    /// Transactions per block (FISCO BCOS measured with 2,500).
    #[arg(long, default_value_t = 2_500)]
    block_txs: usize,
    /// Whether senders are already cached.
    #[arg(long, value_enum, default_value_t = SenderCacheMode::Cold)]
    sender_cache: SenderCacheMode,
    /// Rounds, each a serial import then a parallel one (and a recovery-rate sample);
    /// every figure reported is the median over the rounds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Where to write the stage chart.
    #[arg(long, default_value = "stave-bench.svg")]
    svg: std::path::PathBuf,
    #[command(flatten)]
    output: Output,
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

/// Serial over parallel, per stage.
#[derive(Debug, Serialize)]
struct Speedup {
    decode: f64,
    verify: f64,
    execute: f64,
    commit: f64,
    total: f64,
}

/// The JSON line (DESIGN.md §5).
#[derive(Debug, Serialize)]
struct Report {
    workload: Workload,
    sender_cache: SenderCacheMode,
    txs: usize,
    blocks: usize,
    threads: usize,
    runs: u32,
    serial: RunReport,
    parallel: RunReport,
    speedup: Speedup,
    ecrecover_tps_per_core: f64,
    bound_tps: f64,
    bound_ratio: f64,
}

fn ms(d: Duration) -> f64 {
    ratio(d.as_secs_f64() * 1e3, 1.0)
}

/// Imports `blocks` into a fresh data dir; returns stage times, wall time and head.
fn import(
    spec: &ChainSpec,
    blocks: &[Vec<u8>],
    parallelism: Parallelism,
    cache: Option<Arc<SenderCache>>,
) -> anyhow::Result<(StageTimes, Duration, stave_primitives::B256)> {
    let dir = tempfile::tempdir()?;
    let store = LmdbStore::open(dir.path(), 16 << 30)?;
    let mut chain = Chain::open_with(&store, spec, threads(), parallelism, cache)?;
    let mut times = StageTimes::default();
    let mut repeated = None;
    let start = Instant::now();
    // The node's own pipeline: in parallel mode block N+1 decodes and verifies while
    // block N executes and commits.
    chain.import_stream(blocks.iter().map(Vec::as_slice), None, |imported| {
        if !imported.new {
            repeated.get_or_insert(imported.number);
        }
        times += imported.times;
    })?;
    let wall = start.elapsed();
    if let Some(number) = repeated {
        anyhow::bail!("block {number} was already stored");
    }
    Ok((times, wall, chain.head()?.1))
}

fn run_report(times: &StageTimes, wall: Duration, txs: usize) -> RunReport {
    RunReport {
        decode_ms: ms(times.decode),
        verify_ms: ms(times.verify),
        execute_ms: ms(times.execute),
        commit_ms: ms(times.commit),
        total_ms: ms(wall),
        tps: ratio(txs as f64, wall.as_secs_f64()),
    }
}

/// One import's stage times and wall time.
#[derive(Debug)]
struct Import {
    times: StageTimes,
    wall: Duration,
}

/// The median of each stage's time and of the wall time over `imports` (not empty).
fn median_import(imports: &[Import]) -> Import {
    let median = |field: fn(&Import) -> Duration| {
        let mut values: Vec<Duration> = imports.iter().map(field).collect();
        values.sort();
        values[values.len() / 2]
    };
    Import {
        times: StageTimes {
            decode: median(|i| i.times.decode),
            verify: median(|i| i.times.verify),
            execute: median(|i| i.times.execute),
            commit: median(|i| i.times.commit),
        },
        wall: median(|i| i.wall),
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
    let (mut serials, mut parallels, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut head = None;
    for round in 1..=args.runs {
        eprintln!(
            "round {round} of {}: importing {} blocks serially, then in parallel…",
            args.runs,
            blocks.len()
        );
        rates.push(recovery_rate()?);
        for (parallelism, imports) in [
            (Parallelism::Serial, &mut serials),
            (Parallelism::Parallel, &mut parallels),
        ] {
            let (times, wall, ended) = import(&spec, &blocks, parallelism, cache.clone())?;
            let expected = *head.get_or_insert(ended);
            anyhow::ensure!(
                ended == expected,
                "imports ended at different heads: {ended} ({parallelism:?}, round {round}) vs {expected}"
            );
            imports.push(Import { times, wall });
        }
    }
    let same_head = head.expect("at least one round");
    rates.sort_by(f64::total_cmp);
    let ecrecover_tps_per_core = rates[rates.len() / 2];
    let Import {
        times: serial_times,
        wall: serial_wall,
    } = median_import(&serials);
    let Import {
        times: parallel_times,
        wall: parallel_wall,
    } = median_import(&parallels);

    let speed = |s: Duration, p: Duration| ratio(s.as_secs_f64(), p.as_secs_f64());
    let serial = run_report(&serial_times, serial_wall, args.txs);
    let parallel = run_report(&parallel_times, parallel_wall, args.txs);
    let bound_tps = threads as f64 * ecrecover_tps_per_core;
    let report = Report {
        workload: args.workload,
        sender_cache: args.sender_cache,
        txs: args.txs,
        blocks: blocks.len(),
        threads,
        runs: args.runs,
        speedup: Speedup {
            decode: speed(serial_times.decode, parallel_times.decode),
            verify: speed(serial_times.verify, parallel_times.verify),
            execute: speed(serial_times.execute, parallel_times.execute),
            commit: speed(serial_times.commit, parallel_times.commit),
            total: speed(serial_wall, parallel_wall),
        },
        ecrecover_tps_per_core: ratio(ecrecover_tps_per_core, 1.0),
        bound_tps: ratio(bound_tps, 1.0),
        bound_ratio: ratio(parallel.tps, bound_tps),
        serial,
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
        "{:<10} {:>12} {:>12} {:>9}",
        "stage", "serial ms", "parallel ms", "speedup"
    );
    let rows = [
        (
            "decode",
            report.serial.decode_ms,
            report.parallel.decode_ms,
            report.speedup.decode,
        ),
        (
            "verify",
            report.serial.verify_ms,
            report.parallel.verify_ms,
            report.speedup.verify,
        ),
        (
            "execute",
            report.serial.execute_ms,
            report.parallel.execute_ms,
            report.speedup.execute,
        ),
        (
            "commit",
            report.serial.commit_ms,
            report.parallel.commit_ms,
            report.speedup.commit,
        ),
        (
            "total",
            report.serial.total_ms,
            report.parallel.total_ms,
            report.speedup.total,
        ),
    ];
    for (stage, serial, parallel, speedup) in rows {
        println!("{stage:<10} {serial:>12.1} {parallel:>12.1} {speedup:>8.2}x");
    }
    let bars: Vec<StageBar> = rows
        .iter()
        .take(4)
        .map(|&(stage, serial_ms, parallel_ms, _)| StageBar {
            stage,
            serial_ms,
            parallel_ms,
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
