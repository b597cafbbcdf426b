//! `stave bench commit`: the commit stage on one executed block, its batch encoded
//! serially and in parallel, each then written to a fresh LMDB data dir. Measured twice:
//! with everything a block ever writes (its data and its applied state, as the serial
//! path wrote it), and with what a node writes when it commits it (its data and its
//! journaled state diff; the state itself is flushed later, batched with other blocks').

use std::path::Path;

use serde::Serialize;
use stave_node::Chain;
use stave_primitives::ChainSpec;
use stave_sdk::{TxBuilder, signed_workload};
use stave_storage::{
    KvStore, LmdbStore,
    commit::{BlockState, BlockToCommit, encode_block_batch},
};
use stave_verify::verify_serial;

use super::{CHAIN_ID, StageArgs, Workload, median_time, micros, ratio, threads};

/// The JSON line: the figures of everything a block writes, and those of a node's commit.
#[derive(Debug, Serialize)]
struct Report {
    block_txs: usize,
    threads: usize,
    #[serde(flatten)]
    applied: Figures,
    journaled: Figures,
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
pub fn run(args: StageArgs) -> anyhow::Result<()> {
    let n = args.block.block_txs;
    let (kind, spec) = Workload::Transfer.setup(n);
    let txs = signed_workload(kind, &TxBuilder::new(CHAIN_ID, 1_000_000_000), n)?;
    let recovered = verify_serial(txs, CHAIN_ID, None)?;
    let chain_dir = tempfile::tempdir()?;
    let chain_store = LmdbStore::open(chain_dir.path(), 1 << 30)?;
    let prepared =
        Chain::open(&chain_store, &spec, threads())?.prepare(&recovered, 1_700_000_000)?;
    let dir = tempfile::tempdir()?;
    let runs = args.block.runs;
    let applied = BlockToCommit {
        state: BlockState::Applied(&prepared.diff),
        ..prepared.input()
    };
    let report = Report {
        block_txs: n,
        threads: threads(),
        applied: measure(&applied, &spec, &dir.path().join("applied"), runs)?,
        journaled: measure(
            &prepared.input(),
            &spec,
            &dir.path().join("journaled"),
            runs,
        )?,
    };
    println!(
        "commit stage, {n} txs, {} threads, median of {runs} runs",
        report.threads
    );
    for (what, figures) in [
        ("everything a block writes", &report.applied),
        ("a node's commit (state journaled)", &report.journaled),
    ] {
        println!(
            "{what}: encode serial {:.0} µs, parallel {:.0} µs ({:.2}x); write {:.0} µs; \
             commit serial {:.0} µs, parallel {:.0} µs ({:.2}x)",
            figures.serial_encode_us,
            figures.parallel_encode_us,
            figures.speedup_encode,
            figures.write_us,
            figures.serial_commit_us,
            figures.parallel_commit_us,
            figures.speedup_commit
        );
    }
    args.output.finish(&report)
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
    writes.sort();
    let write = writes[writes.len() / 2];
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
