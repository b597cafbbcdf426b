//! `stave bench commit`: the commit stage on one executed block, its batch encoded
//! serially and in parallel, each then written to a fresh LMDB data dir.

use serde::Serialize;
use stave_node::Chain;
use stave_sdk::{TxBuilder, signed_workload};
use stave_storage::{
    KvStore, LmdbStore,
    commit::{BlockState, BlockToCommit, encode_block_batch},
};
use stave_verify::verify_serial;

use super::{CHAIN_ID, StageArgs, Workload, median_time, micros, ratio, threads};

/// The JSON line.
#[derive(Debug, Serialize)]
struct Report {
    block_txs: usize,
    threads: usize,
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
    // Everything a block ever writes: its data at commit and its state when its layer is
    // flushed (batched with others in the node; here alone, as the serial path wrote it).
    let input = BlockToCommit {
        state: BlockState::Applied(&prepared.diff),
        ..prepared.input()
    };
    anyhow::ensure!(encode_block_batch(&input, true) == encode_block_batch(&input, false));

    let serial = median_time(args.block.runs, || encode_block_batch(&input, false));
    let parallel = median_time(args.block.runs, || encode_block_batch(&input, true));
    // Each write goes to a fresh data dir, so every run writes the same new keys; opening
    // the store and encoding the batch stay outside the timed region.
    let dir = tempfile::tempdir()?;
    let mut writes = Vec::with_capacity(args.block.runs);
    for run in 0..args.block.runs.max(1) {
        // A fresh data dir with genesis, like the one the block was prepared on.
        let store = LmdbStore::open(&dir.path().join(run.to_string()), 1 << 30)?;
        Chain::open(&store, &spec, 1)?;
        let batch = encode_block_batch(&input, true);
        let start = std::time::Instant::now();
        store.write(batch)?;
        writes.push(start.elapsed());
    }
    writes.sort();
    let write = writes[writes.len() / 2];
    let report = Report {
        block_txs: n,
        threads: threads(),
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
    };
    println!(
        "commit stage, {n} txs, {} threads, median of {} runs",
        report.threads, args.block.runs
    );
    println!(
        "encode: serial {:.0} µs, parallel {:.0} µs ({:.2}x)",
        report.serial_encode_us, report.parallel_encode_us, report.speedup_encode
    );
    println!("write (one LMDB transaction): {:.0} µs", report.write_us);
    println!(
        "commit: serial {:.0} µs, parallel {:.0} µs ({:.2}x)",
        report.serial_commit_us, report.parallel_commit_us, report.speedup_commit
    );
    args.output.finish(&report)
}
