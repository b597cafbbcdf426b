//! `stave bench commit`: the commit stage on one executed block of a workload (transfers by
//! default; ERC-20 blocks carry a log in every receipt), its batch encoded serially and in
//! parallel, each then written to a fresh LMDB data dir. Measured twice:
//! with everything a block ever writes (its data and its applied state, as the serial
//! path wrote it: encoding and write), and as a node commits it (`Chain::commit` of a
//! fresh chain's second block, serial and parallel: its data and its journaled state diff
//! written, its state pushed as a diff layer over the first block's, to be flushed later
//! with other blocks').

use std::{fmt, path::Path, time::Duration, time::Instant};

use serde::Serialize;
use stave_node::{Chain, Parallelism, PreparedBlock};
use stave_primitives::ChainSpec;
use stave_sdk::{Targets, TxBuilder, Workload, signed_workload_range};
use stave_storage::{
    KvStore, LmdbStore,
    commit::{BlockState, BlockToCommit, encode_block_batch},
};
use stave_verify::verify_serial;

use crate::{
    BenchError, BlockConfig, CHAIN_ID, GAS_PRICE, ensure, median, median_time, micros, ratio,
    threads,
};

/// The block `stave bench commit` commits.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CommitConfig {
    /// What the block's transactions do.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Workload::Transfer))]
    pub workload: Workload,
    /// The block and its runs.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub block: BlockConfig,
}

/// What the commit bench measured: the figures of everything a block writes at the top
/// level of its JSON line, those of a node's commit under `journaled`.
#[derive(Debug, Clone, Serialize)]
pub struct CommitReport {
    /// What the block's transactions did.
    pub workload: Workload,
    /// Transactions in the block.
    pub block_txs: usize,
    /// Threads the parallel encoding used.
    pub threads: usize,
    /// Everything the block writes.
    #[serde(flatten)]
    pub applied: Figures,
    /// A node's commit of the block.
    pub journaled: NodeCommit,
    /// Timed runs per mode.
    #[serde(skip)]
    pub runs: usize,
}

/// A node's commit of the block (`Chain::commit`), serially and in parallel (the block
/// written while its state layer is prepared beside it).
#[derive(Debug, Clone, Serialize)]
pub struct NodeCommit {
    /// Serially.
    pub serial_commit_us: f64,
    /// In parallel.
    pub parallel_commit_us: f64,
    /// Serial over parallel.
    pub speedup_commit: f64,
}

/// One way of committing the block: its encoding serially and in parallel, and its write.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Encoding the batch serially.
    pub serial_encode_us: f64,
    /// Encoding it in parallel.
    pub parallel_encode_us: f64,
    /// Serial over parallel encoding.
    pub speedup_encode: f64,
    /// Writing the batch.
    pub write_us: f64,
    /// Serial encoding and the write.
    pub serial_commit_us: f64,
    /// Parallel encoding and the write.
    pub parallel_commit_us: f64,
    /// Serial over parallel commit.
    pub speedup_commit: f64,
}

/// A fresh temporary directory.
fn tempdir() -> Result<tempfile::TempDir, BenchError> {
    tempfile::tempdir().map_err(BenchError::io("making a data dir"))
}

/// Runs the commit bench.
pub fn run(config: &CommitConfig) -> Result<CommitReport, BenchError> {
    let n = config.block.block_txs;
    // Two blocks of the workload from distinct senders: the first makes the chain a node's
    // (a state layer under the one the second pushes); the second is measured.
    let targets = Targets::default();
    let spec = config.workload.genesis(CHAIN_ID, 2 * n as u64, &targets);
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let chain_dir = tempdir()?;
    let chain_store = LmdbStore::open(chain_dir.path(), 1 << 30)?;
    let chain = Chain::open(&chain_store, &spec, threads())?;
    let mut blocks = Vec::with_capacity(2);
    for (number, txs) in (1u64..).zip([0..n as u64, n as u64..2 * n as u64]) {
        let signed = signed_workload_range(config.workload, &targets, &builder, txs)?;
        let recovered = verify_serial(signed, CHAIN_ID, None)?;
        let mut prepared = chain.prepare(&recovered, 1_700_000_000 + number)?;
        blocks.push(prepared.clone());
        chain.commit(&mut prepared)?;
    }
    let [parent, prepared] = <[PreparedBlock; 2]>::try_from(blocks)
        .map_err(|_| BenchError::Check("two blocks were prepared".into()))?;
    let dir = tempdir()?;
    let runs = config.block.runs;
    let applied = BlockToCommit {
        state: BlockState::Applied(&prepared.diff),
        ..prepared.input()
    };
    Ok(CommitReport {
        workload: config.workload,
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
        runs,
    })
}

impl fmt::Display for CommitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "commit stage, {} txs ({:?}), {} threads, median of {} runs",
            self.block_txs, self.workload, self.threads, self.runs
        )?;
        let applied = &self.applied;
        writeln!(
            f,
            "everything a block writes: encode serial {:.0} µs, parallel {:.0} µs ({:.2}x); \
             write {:.0} µs; commit serial {:.0} µs, parallel {:.0} µs ({:.2}x)",
            applied.serial_encode_us,
            applied.parallel_encode_us,
            applied.speedup_encode,
            applied.write_us,
            applied.serial_commit_us,
            applied.parallel_commit_us,
            applied.speedup_commit
        )?;
        let node = &self.journaled;
        writeln!(
            f,
            "a node's commit (state journaled, pushed as a layer): commit serial {:.0} µs, \
             parallel {:.0} µs ({:.2}x)",
            node.serial_commit_us, node.parallel_commit_us, node.speedup_commit
        )
    }
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
) -> Result<NodeCommit, BenchError> {
    let commit = |parallelism: Parallelism, name: &str| -> Result<Duration, BenchError> {
        let mut times = Vec::with_capacity(runs);
        for run in 0..runs.max(1) {
            let store = LmdbStore::open(&dir.join(format!("{name}-{run}")), 1 << 30)?;
            let chain = Chain::open_with(&store, spec, threads(), parallelism, None)?;
            chain.commit(&mut parent.clone())?;
            let mut block = prepared.clone();
            let start = Instant::now();
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
) -> Result<Figures, BenchError> {
    ensure(
        encode_block_batch(input, true) == encode_block_batch(input, false),
        || "parallel encoding differs from serial".into(),
    )?;
    let serial = median_time(runs, || encode_block_batch(input, false));
    let parallel = median_time(runs, || encode_block_batch(input, true));
    // Each write goes to a fresh data dir, so every run writes the same new keys; opening
    // the store and encoding the batch stay outside the timed region.
    let mut writes = Vec::with_capacity(runs);
    for run in 0..runs.max(1) {
        let store = LmdbStore::open(&dir.join(run.to_string()), 1 << 30)?;
        Chain::open(&store, spec, 1)?;
        let batch = encode_block_batch(input, true);
        let start = Instant::now();
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
