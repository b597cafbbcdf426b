//! `stave bench commit`: the commit stage on one executed block of a workload (transfers by
//! default; ERC-20 blocks carry a log in every receipt), its batch encoded serially and in
//! parallel, each then written to a fresh LMDB data dir. Measured twice:
//! with everything a block ever writes (its data and its applied state, as the serial
//! path wrote it: encoding and write), and as a node commits it (`Chain::commit` of a
//! fresh chain's second block, serial and parallel: its data and its journaled state diff
//! written, its state pushed as a diff layer over the first block's, to be flushed later
//! with other blocks').

use std::{path::Path, time::Duration};

use clap::Args;
use serde::Serialize;
use stave_node::{Chain, Parallelism, PreparedBlock};
use stave_primitives::ChainSpec;
use stave_sdk::{TxBuilder, signed_workload_range};
use stave_storage::{
    KvStore, LmdbStore,
    commit::{BlockState, BlockToCommit, encode_block_batch},
};
use stave_verify::verify_serial;

use super::{BlockArgs, CHAIN_ID, Output, Workload, median, median_time, micros, ratio, threads};

/// Arguments of `stave bench commit`.
#[derive(Debug, Args)]
pub struct CommitArgs {
    /// What the block's transactions do.
    #[arg(long, value_enum, default_value_t = Workload::Transfer)]
    workload: Workload,
    #[command(flatten)]
    block: BlockArgs,
    #[command(flatten)]
    output: Output,
}

/// The JSON line: the figures of everything a block writes, and those of a node's commit.
#[derive(Debug, Serialize)]
struct Report {
    workload: Workload,
    block_txs: usize,
    threads: usize,
    #[serde(flatten)]
    applied: Figures,
    journaled: NodeCommit,
}

/// A node's commit of the block (`Chain::commit`), serially and in parallel (the block
/// written while its state layer is prepared beside it).
#[derive(Debug, Serialize)]
struct NodeCommit {
    serial_commit_us: f64,
    parallel_commit_us: f64,
    speedup_commit: f64,
}

/// One way of committing the block: its encoding serially and in parallel, and its write.
#[derive(Debug, Serialize)]
struct Figures {
    serial_encode_us: f64,
    parallel_encode_us: f64,
    speedup_encode: f64,
    write_us: f64,
    serial_commit_us: f64,
    parallel_commit_us: f64,
    speedup_commit: f64,
}

/// Runs the commit bench.
pub fn run(args: CommitArgs) -> anyhow::Result<()> {
    let n = args.block.block_txs;
    // Two blocks of the workload from distinct senders: the first makes the chain a node's
    // (a state layer under the one the second pushes); the second is measured.
    let (kind, spec) = args.workload.setup(2 * n);
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let chain_dir = tempfile::tempdir()?;
    let chain_store = LmdbStore::open(chain_dir.path(), 1 << 30)?;
    let chain = Chain::open(&chain_store, &spec, threads())?;
    let mut blocks = Vec::with_capacity(2);
    for (number, txs) in (1u64..).zip([0..n as u64, n as u64..2 * n as u64]) {
        let recovered = verify_serial(signed_workload_range(kind, &builder, txs)?, CHAIN_ID, None)?;
        let mut prepared = chain.prepare(&recovered, 1_700_000_000 + number)?;
        blocks.push(prepared.clone());
        chain.commit(&mut prepared)?;
    }
    let [parent, prepared] = <[PreparedBlock; 2]>::try_from(blocks)
        .map_err(|_| anyhow::anyhow!("two blocks were prepared"))?;
    let dir = tempfile::tempdir()?;
    let runs = args.block.runs;
    let applied = BlockToCommit {
        state: BlockState::Applied(&prepared.diff),
        ..prepared.input()
    };
    let report = Report {
        workload: args.workload,
        block_txs: n,
        threads: threads(),
        applied: measure(&applied, &spec, &dir.path().join("applied"), runs)?,
        journaled: measure_node(
            &parent,
            &prepared,
            &spec,
            &dir.path().join("journaled"),
            runs,
        )?,
    };
    println!(
        "commit stage, {n} txs ({:?}), {} threads, median of {runs} runs",
        report.workload, report.threads
    );
    let applied = &report.applied;
    println!(
        "everything a block writes: encode serial {:.0} µs, parallel {:.0} µs ({:.2}x); \
         write {:.0} µs; commit serial {:.0} µs, parallel {:.0} µs ({:.2}x)",
        applied.serial_encode_us,
        applied.parallel_encode_us,
        applied.speedup_encode,
        applied.write_us,
        applied.serial_commit_us,
        applied.parallel_commit_us,
        applied.speedup_commit
    );
    let node = &report.journaled;
    println!(
        "a node's commit (state journaled, pushed as a layer): commit serial {:.0} µs, \
         parallel {:.0} µs ({:.2}x)",
        node.serial_commit_us, node.parallel_commit_us, node.speedup_commit
    );
    args.output.finish(&report)
}

/// Times `Chain::commit` of `prepared` both ways (median of `runs`), each run on a fresh
/// chain under `dir` with `spec`'s genesis and `parent` committed, like the one the block
/// was prepared on.
fn measure_node(
    parent: &PreparedBlock,
    prepared: &PreparedBlock,
    spec: &ChainSpec,
    dir: &Path,
    runs: usize,
) -> anyhow::Result<NodeCommit> {
    let commit = |parallelism: Parallelism, name: &str| -> anyhow::Result<Duration> {
        let mut times = Vec::with_capacity(runs);
        for run in 0..runs.max(1) {
            let store = LmdbStore::open(&dir.join(format!("{name}-{run}")), 1 << 30)?;
            let chain = Chain::open_with(&store, spec, threads(), parallelism, None)?;
            chain.commit(&mut parent.clone())?;
            let mut block = prepared.clone();
            let start = std::time::Instant::now();
            chain.commit(&mut block)?;
            times.push(start.elapsed());
        }
        Ok(median(times))
    };
    let serial = commit(Parallelism::Serial, "serial")?;
    let parallel = commit(Parallelism::Parallel, "parallel")?;
    Ok(NodeCommit {
        serial_commit_us: micros(serial),
        parallel_commit_us: micros(parallel),
        speedup_commit: ratio(serial.as_secs_f64(), parallel.as_secs_f64()),
    })
}

/// Times `input`'s encoding both ways, and its write (median of `runs`) into fresh data
/// dirs under `dir` with `spec`'s genesis, like the one the block was prepared on.
fn measure(
    input: &BlockToCommit<'_>,
    spec: &ChainSpec,
    dir: &Path,
    runs: usize,
) -> anyhow::Result<Figures> {
    anyhow::ensure!(encode_block_batch(input, true) == encode_block_batch(input, false));
    let serial = median_time(runs, || encode_block_batch(input, false));
    let parallel = median_time(runs, || encode_block_batch(input, true));
    // Each write goes to a fresh data dir, so every run writes the same new keys; opening
    // the store and encoding the batch stay outside the timed region.
    let mut writes = Vec::with_capacity(runs);
    for run in 0..runs.max(1) {
        let store = LmdbStore::open(&dir.join(run.to_string()), 1 << 30)?;
        Chain::open(&store, spec, 1)?;
        let batch = encode_block_batch(input, true);
        let start = std::time::Instant::now();
        store.write(batch)?;
        writes.push(start.elapsed());
    }
    let write = median(writes);
    Ok(Figures {
        serial_encode_us: micros(serial),
        parallel_encode_us: micros(parallel),
        speedup_encode: ratio(serial.as_secs_f64(), parallel.as_secs_f64()),
        write_us: micros(write),
        serial_commit_us: micros(serial + write),
        parallel_commit_us: micros(parallel + write),
        speedup_commit: ratio(
            (serial + write).as_secs_f64(),
            (parallel + write).as_secs_f64(),
        ),
    })
}
