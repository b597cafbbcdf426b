//! `stave bench commit`: the commit stage on one executed block, its batch encoded
//! serially and in parallel, each then written to a fresh LMDB data dir.

use serde::Serialize;
use stave_codec::encode_transactions;
use stave_exec::{MemoryState, Mode, execute_serial};
use stave_primitives::{Address, Block, Header};
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload, workload_genesis};
use stave_storage::{
    KvStore, LmdbStore,
    commit::{BlockToCommit, encode_block_batch},
};
use stave_verify::verify_serial;

use super::{StageArgs, median_time, micros, ratio, threads};

const CHAIN_ID: u64 = 1337;

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
    let state = MemoryState::from_genesis(&workload_genesis(CHAIN_ID, n as u64, None));
    let txs = signed_workload(
        WorkloadKind::Transfer,
        &TxBuilder::new(CHAIN_ID, 1_000_000_000),
        n,
    )?;
    let recovered = verify_serial(txs.clone(), CHAIN_ID, None)?;
    let mut header = Header {
        number: 0,
        gas_limit: stave_primitives::DEV_GAS_LIMIT,
        base_fee_per_gas: stave_primitives::DEFAULT_BASE_FEE,
        proposer: Address::repeat_byte(0xb0),
        ..Header::default()
    };
    let outcome = execute_serial(&state, CHAIN_ID, &header, &recovered, Mode::Validate)?;
    header.gas_used = outcome.gas_used;
    let mut block = Block {
        header,
        transactions: txs,
    };
    block.header.transactions_root = block.compute_transactions_root();
    let body = encode_transactions(&block.transactions)?;
    let block = block.seal();
    let input = BlockToCommit {
        block: &block,
        body: &body,
        receipts: &outcome.receipts,
        diff: &outcome.diff,
    };
    anyhow::ensure!(encode_block_batch(&input, true) == encode_block_batch(&input, false));

    let serial = median_time(args.block.runs, || encode_block_batch(&input, false));
    let parallel = median_time(args.block.runs, || encode_block_batch(&input, true));
    // Each write goes to a fresh data dir, so every run writes the same new keys; opening
    // the store and encoding the batch stay outside the timed region.
    let dir = tempfile::tempdir()?;
    let mut writes = Vec::with_capacity(args.block.runs);
    for run in 0..args.block.runs.max(1) {
        let store = LmdbStore::open(&dir.path().join(run.to_string()), 1 << 30)?;
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
