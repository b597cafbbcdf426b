//! `stave bench codec`: decoding a block body, transaction hashes included, three ways.

use clap::Args;
use serde::Serialize;
use stave_codec::{decode_transactions, encode_transactions, rlp_list};
use stave_primitives::{Address, SignedTx};
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload};

use super::{Output, median_time, micros, ratio, threads};

/// Arguments of `stave bench codec`.
#[derive(Debug, Args)]
pub struct CodecArgs {
    /// Transactions in the transfer block (the FISCO BCOS measurement used 2,500).
    #[arg(long, default_value_t = 2_500)]
    block_txs: usize,
    /// Transactions in the ERC-20 block.
    #[arg(long, default_value_t = 1_000)]
    erc20_txs: usize,
    /// Timed runs per method; the median is reported.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    #[command(flatten)]
    output: Output,
}

/// Decode times of one block in each form.
#[derive(Debug, Serialize)]
struct BlockReport {
    block_txs: usize,
    rlp_serial_us: f64,
    rlp_scan_parallel_us: f64,
    indexed_parallel_us: f64,
    speedup_indexed_over_serial: f64,
    rlp_bytes: usize,
    indexed_bytes: usize,
    /// Bytes the offset table adds per transaction, over the standard RLP body.
    overhead_bytes_per_tx: f64,
}

/// The JSON line: the transfer block's figures at the top level, the
/// ERC-20 block's under `erc20`.
#[derive(Debug, Serialize)]
struct Report {
    threads: usize,
    #[serde(flatten)]
    transfer: BlockReport,
    erc20: BlockReport,
}

fn measure(txs: &[SignedTx], runs: usize) -> anyhow::Result<BlockReport> {
    let rlp = rlp_list::encode_rlp_list(txs);
    let indexed = encode_transactions(txs)?;
    // Every method must produce the same transactions (with hashes) before it is timed.
    let reference = rlp_list::decode_rlp_list_serial(&rlp)?;
    anyhow::ensure!(reference == rlp_list::decode_rlp_list_scan_parallel(&rlp)?);
    anyhow::ensure!(reference == decode_transactions(&indexed)?);
    let serial = median_time(runs, || rlp_list::decode_rlp_list_serial(&rlp));
    let scan = median_time(runs, || rlp_list::decode_rlp_list_scan_parallel(&rlp));
    let parallel = median_time(runs, || decode_transactions(&indexed));
    Ok(BlockReport {
        block_txs: txs.len(),
        rlp_serial_us: micros(serial),
        rlp_scan_parallel_us: micros(scan),
        indexed_parallel_us: micros(parallel),
        speedup_indexed_over_serial: ratio(serial.as_secs_f64(), parallel.as_secs_f64()),
        rlp_bytes: rlp.len(),
        indexed_bytes: indexed.len(),
        overhead_bytes_per_tx: ratio(indexed.len() as f64 - rlp.len() as f64, txs.len() as f64),
    })
}

/// Runs the codec bench.
pub fn run(args: CodecArgs) -> anyhow::Result<()> {
    let builder = TxBuilder::new(stave_primitives::dev::DEV_CHAIN_ID, 1_000_000_000);
    let transfers = signed_workload(WorkloadKind::Transfer, &builder, args.block_txs)?;
    let token = Address::with_last_byte(0xe2);
    let erc20 = signed_workload(WorkloadKind::Erc20 { token }, &builder, args.erc20_txs)?;
    let report = Report {
        threads: threads(),
        transfer: measure(&transfers, args.runs)?,
        erc20: measure(&erc20, args.runs)?,
    };
    println!(
        "decode with tx hashes, {} threads, median of {} runs",
        report.threads, args.runs
    );
    println!(
        "{:<16} {:>6} {:>14} {:>18} {:>18} {:>9} {:>10}",
        "block",
        "txs",
        "rlp serial µs",
        "rlp scan+par µs",
        "indexed par µs",
        "speedup",
        "B/tx over"
    );
    for (name, b) in [("transfer", &report.transfer), ("erc20", &report.erc20)] {
        println!(
            "{:<16} {:>6} {:>14.1} {:>18.1} {:>18.1} {:>8.2}x {:>10.2}",
            name,
            b.block_txs,
            b.rlp_serial_us,
            b.rlp_scan_parallel_us,
            b.indexed_parallel_us,
            b.speedup_indexed_over_serial,
            b.overhead_bytes_per_tx
        );
    }
    args.output.finish(&report)
}
