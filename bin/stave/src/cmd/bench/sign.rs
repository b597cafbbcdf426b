//! `stave bench sign`: how fast the SDK makes signed transactions, against
//! the bare curve operation it cannot beat.
//!
//! One key signs transfers with nonces `0..txs` to one address: what a load generator does
//! per sender. The full path builds, encodes, hashes and signs each
//! transaction (`stave_sdk::sign_batch`); the raw path only signs precomputed 32-byte
//! hashes with the same backend on the same threads. `ratio_to_raw` is what building and
//! encoding leave of the curve's speed; `speedup_over_single_thread` is the scaling.

use std::{
    io::Write as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};
use rayon::prelude::*;
use serde::Serialize;
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, RawTx, TxBuilder, sign_batch};

use super::{CHAIN_ID, Output, median, ratio, threads};

/// The signing key: the dev mnemonic's first account (Hardhat's and Anvil's
/// account 0, 0xf39F…2266), a key every other SDK can be given as is. Public: never fund it.
const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// The recipient: the dev mnemonic's second account.
const TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
/// Gas price (legacy, EIP-2930) or fee cap (EIP-1559) of every transaction: 1 gwei.
/// `bench/sdk-compare/run.sh` signs the same fields with other SDKs.
const GAS_PRICE: u128 = 1_000_000_000;
/// Wei each transfer sends.
const VALUE: u64 = 1;

/// Arguments of `stave bench sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// Transactions per timed run.
    #[arg(long, default_value_t = 20_000)]
    txs: usize,
    /// Signing threads; all cores when not given.
    #[arg(long)]
    threads: Option<usize>,
    /// Transaction type to sign.
    #[arg(long, value_enum, default_value_t = TxType::Eip1559)]
    tx_type: TxType,
    /// Timed runs of each path; the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also write the signed transactions to FILE, one 0x-prefixed hex line each, nonce
    /// order (bench/sdk-compare checks other SDKs against it).
    #[arg(long, value_name = "FILE")]
    dump: Option<PathBuf>,
    #[command(flatten)]
    output: Output,
}

/// The transaction type the bench signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum TxType {
    /// Legacy with EIP-155 replay protection.
    Legacy,
    /// EIP-2930, empty access list.
    Eip2930,
    /// EIP-1559, 1 wei tip.
    Eip1559,
}

impl TxType {
    fn builder(self) -> TxBuilder {
        match self {
            TxType::Legacy => TxBuilder::legacy(CHAIN_ID, GAS_PRICE),
            TxType::Eip2930 => TxBuilder::eip2930(CHAIN_ID, GAS_PRICE),
            TxType::Eip1559 => TxBuilder::new(CHAIN_ID, GAS_PRICE),
        }
    }
}

/// The JSON line: the signing figures, then the type and the single-thread scaling.
#[derive(Debug, Serialize)]
struct Report {
    txs: usize,
    threads: usize,
    tps: f64,
    tps_per_thread: f64,
    raw_sign_tps_per_thread: f64,
    ratio_to_raw: f64,
    tx_type: TxType,
    single_thread_tps: f64,
    speedup_over_single_thread: f64,
}

/// Wall time of one call of `f`; freeing its output is not timed.
fn timed<T>(f: impl FnOnce() -> T) -> Duration {
    let start = Instant::now();
    let output = std::hint::black_box(f());
    let elapsed = start.elapsed();
    drop(output);
    elapsed
}

/// Runs the sign bench.
pub fn run(args: SignArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.txs > 0, "--txs must be at least 1");
    let threads = args.threads.unwrap_or_else(threads);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let single = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let signer = LocalSigner::from_secret(&KEY.parse()?)?;
    let to: Address = TO.parse()?;
    let builder = args.tx_type.builder();
    let sign_all = |pool: &rayon::ThreadPool| -> Vec<RawTx> {
        pool.install(|| {
            sign_batch(&signer, args.txs, |nonce| {
                builder.transfer(nonce as u64, to, U256::from(VALUE))
            })
        })
    };
    // The curve's cost does not depend on the digest's value.
    let hashes: Vec<B256> = (0..args.txs).map(|i| B256::from(U256::from(i))).collect();
    let sign_hashes = || {
        pool.install(|| {
            hashes
                .par_iter()
                .map(|hash| signer.sign_hash(hash))
                .collect::<Vec<_>>()
        })
    };

    // One warm-up of each path (spawns the pools' threads, grows the per-thread scratch),
    // then the paths take turns run by run so the machine's drift hits all alike.
    let signed = sign_all(&pool);
    anyhow::ensure!(
        signed.len() == args.txs,
        "signed {} of {} txs",
        signed.len(),
        args.txs
    );
    if let Some(path) = &args.dump {
        dump(path, &signed)?;
    }
    drop(signed);
    sign_hashes();
    sign_all(&single);
    let (mut full, mut raw, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.runs.max(1) {
        full.push(timed(|| sign_all(&pool)));
        raw.push(timed(sign_hashes));
        if threads > 1 {
            one.push(timed(|| sign_all(&single)));
        }
    }
    let full = median(full);
    let raw = median(raw);
    let one = if threads > 1 { median(one) } else { full };

    let per_second = |d: Duration| args.txs as f64 / d.as_secs_f64();
    let tps = per_second(full);
    let raw_per_thread = per_second(raw) / threads as f64;
    let report = Report {
        txs: args.txs,
        threads,
        tps: ratio(tps, 1.0),
        tps_per_thread: ratio(tps / threads as f64, 1.0),
        raw_sign_tps_per_thread: ratio(raw_per_thread, 1.0),
        ratio_to_raw: ratio(tps / threads as f64, raw_per_thread),
        tx_type: args.tx_type,
        single_thread_tps: ratio(per_second(one), 1.0),
        speedup_over_single_thread: ratio(tps, per_second(one)),
    };
    let tx_type = args.tx_type.to_possible_value();
    println!(
        "sign, {} {} transfers, {threads} threads, median of {} runs",
        args.txs,
        tx_type.as_ref().map_or("", |v| v.get_name()),
        args.runs
    );
    println!("{:<36} {:>12}", "path", "tx/s");
    println!(
        "{:<36} {:>12.0}",
        "build + encode + sign, all threads", report.tps
    );
    println!("{:<36} {:>12.0}", "  per thread", report.tps_per_thread);
    println!(
        "{:<36} {:>12.0}",
        "bare curve sign, per thread", report.raw_sign_tps_per_thread
    );
    println!(
        "{:<36} {:>12.0}",
        "build + encode + sign, one thread", report.single_thread_tps
    );
    println!(
        "ratio to raw {:.3}, {threads} threads {:.2}x one thread",
        report.ratio_to_raw, report.speedup_over_single_thread
    );
    args.output.finish(&report)
}

/// Writes `txs` as 0x-prefixed lowercase hex, one per line.
fn dump(path: &std::path::Path, txs: &[RawTx]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for tx in txs {
        writeln!(out, "0x{}", hex::encode(&tx.bytes))?;
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}
