//! `stave bench codec`: decoding a block body, transaction hashes included, three ways:
//! standard RLP serially, standard RLP scanned then decoded in parallel, and the
//! offset-indexed list (see docs/wire-formats.md) in parallel.

use std::fmt;

use serde::Serialize;
use stave_codec::{decode_transactions, encode_transactions, rlp_list};
use stave_primitives::{Address, SignedTx};
use stave_sdk::{Targets, TxBuilder, Workload, signed_workload, signed_workload_range};

use crate::{BenchError, CHAIN_ID, GAS_PRICE, ensure, median_time, micros, ratio, threads};

/// The blocks `stave bench codec` decodes, and how often.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CodecConfig {
    /// Transactions in the transfer block (the FISCO BCOS measurement used 2,500).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub block_txs: usize,
    /// Transactions in the ERC-20 block.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000))]
    pub erc20_txs: usize,
    /// Timed runs per method; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 30))]
    pub runs: usize,
}

/// Decode times of one block in each form.
#[derive(Debug, Clone, Serialize)]
pub struct BlockReport {
    /// Transactions in the block.
    pub block_txs: usize,
    /// Standard RLP, decoded serially.
    pub rlp_serial_us: f64,
    /// Standard RLP, scanned serially and decoded in parallel.
    pub rlp_scan_parallel_us: f64,
    /// The offset-indexed list, decoded in parallel.
    pub indexed_parallel_us: f64,
    /// Serial RLP over the indexed list.
    pub speedup_indexed_over_serial: f64,
    /// Size of the standard RLP body.
    pub rlp_bytes: usize,
    /// Size of the indexed body.
    pub indexed_bytes: usize,
    /// Bytes the offset table adds per transaction, over the standard RLP body.
    pub overhead_bytes_per_tx: f64,
}

/// What the codec bench measured: the transfer block's figures at the top level of its
/// JSON line, the ERC-20 block's under `erc20`.
#[derive(Debug, Clone, Serialize)]
pub struct CodecReport {
    /// Threads the parallel decoders used.
    pub threads: usize,
    /// The transfer block.
    #[serde(flatten)]
    pub transfer: BlockReport,
    /// The ERC-20 block.
    pub erc20: BlockReport,
    /// Timed runs per method.
    #[serde(skip)]
    pub runs: usize,
}

fn measure(txs: &[SignedTx], runs: usize) -> Result<BlockReport, BenchError> {
    let rlp = rlp_list::encode_rlp_list(txs);
    let indexed = encode_transactions(txs)?;
    // Every method must produce the same transactions (with hashes) before it is timed.
    let reference = rlp_list::decode_rlp_list_serial(&rlp)?;
    ensure(
        reference == rlp_list::decode_rlp_list_scan_parallel(&rlp)?,
        || "the parallel scan decoded other transactions".into(),
    )?;
    ensure(reference == decode_transactions(&indexed)?, || {
        "the indexed list decoded other transactions".into()
    })?;
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

/// The transfer and ERC-20 workloads of the codec and net benches: `transfers` and
/// `erc20` transactions, the token a mostly-zero address as a deployed contract's is.
pub(crate) fn blocks_of_txs(
    transfers: usize,
    erc20: usize,
) -> Result<(Vec<SignedTx>, Vec<SignedTx>), BenchError> {
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let targets = Targets {
        token: Address::with_last_byte(0xe2),
        ..Targets::default()
    };
    Ok((
        signed_workload(Workload::Transfer, &builder, transfers)?,
        signed_workload_range(Workload::Erc20, &targets, &builder, 0..erc20 as u64)?,
    ))
}

/// Runs the codec bench.
pub fn run(config: &CodecConfig) -> Result<CodecReport, BenchError> {
    let (transfers, erc20) = blocks_of_txs(config.block_txs, config.erc20_txs)?;
    Ok(CodecReport {
        threads: threads(),
        transfer: measure(&transfers, config.runs)?,
        erc20: measure(&erc20, config.runs)?,
        runs: config.runs,
    })
}

impl fmt::Display for CodecReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "decode with tx hashes, {} threads, median of {} runs",
            self.threads, self.runs
        )?;
        writeln!(
            f,
            "{:<16} {:>6} {:>14} {:>18} {:>18} {:>9} {:>10}",
            "block",
            "txs",
            "rlp serial µs",
            "rlp scan+par µs",
            "indexed par µs",
            "speedup",
            "B/tx over"
        )?;
        for (name, b) in [("transfer", &self.transfer), ("erc20", &self.erc20)] {
            writeln!(
                f,
                "{:<16} {:>6} {:>14.1} {:>18.1} {:>18.1} {:>8.2}x {:>10.2}",
                name,
                b.block_txs,
                b.rlp_serial_us,
                b.rlp_scan_parallel_us,
                b.indexed_parallel_us,
                b.speedup_indexed_over_serial,
                b.overhead_bytes_per_tx
            )?;
        }
        Ok(())
    }
}
