//! `stave bench sign`: how fast the SDK makes signed transactions, against
//! the bare curve operation it cannot beat.
//!
//! One key signs transfers with nonces `0..txs` to one address: what a load generator does
//! per sender. The full path builds, encodes, hashes and signs each
//! transaction (`stave_sdk::sign_batch`); the raw path only signs precomputed 32-byte
//! hashes with the same backend on the same threads. `ratio_to_raw` is what building and
//! encoding leave of the curve's speed; `speedup_over_single_thread` is the scaling.

use std::{
    fmt,
    io::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use rayon::prelude::*;
use serde::Serialize;
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, RawTx, TxBuilder, sign_batch};

use crate::{BenchError, CHAIN_ID, GAS_PRICE, ensure, median, ratio, threads};

/// The signing key: the dev mnemonic's first account (Hardhat's and Anvil's account 0,
/// 0xf39F…2266), a key every other SDK can be given as is. Public: never fund it.
const KEY: B256 = B256::new([
    0xac, 0x09, 0x74, 0xbe, 0xc3, 0x9a, 0x17, 0xe3, 0x6b, 0xa4, 0xa6, 0xb4, 0xd2, 0x38, 0xff, 0x94,
    0x4b, 0xac, 0xb4, 0x78, 0xcb, 0xed, 0x5e, 0xfc, 0xae, 0x78, 0x4d, 0x7b, 0xf4, 0xf2, 0xff, 0x80,
]);
/// The recipient: the dev mnemonic's second account.
const TO: Address = Address::new([
    0x70, 0x99, 0x79, 0x70, 0xc5, 0x18, 0x12, 0xdc, 0x3a, 0x01, 0x0c, 0x7d, 0x01, 0xb5, 0x0e, 0x0d,
    0x17, 0xdc, 0x79, 0xc8,
]);
/// Wei each transfer sends. Its gas price (legacy, EIP-2930) or fee cap (EIP-1559) is
/// [`GAS_PRICE`]; `bench/sdk-compare/run.sh` signs the same fields with other SDKs.
const VALUE: u64 = 1;

/// What `stave bench sign` signs, and how often.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct SignConfig {
    /// Transactions per timed run.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 20_000))]
    pub txs: usize,
    /// Signing threads; all cores when not given.
    #[cfg_attr(feature = "clap", arg(long))]
    pub threads: Option<usize>,
    /// Transaction type to sign.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TxType::Eip1559))]
    pub tx_type: TxType,
    /// Timed runs of each path; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 5))]
    pub runs: usize,
    /// Also write the signed transactions to FILE, one 0x-prefixed hex line each, nonce
    /// order (bench/sdk-compare checks other SDKs against it).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub dump: Option<PathBuf>,
}

/// The transaction type the bench signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TxType {
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

    /// Its name on the command line and in JSON.
    fn name(self) -> &'static str {
        match self {
            TxType::Legacy => "legacy",
            TxType::Eip2930 => "eip2930",
            TxType::Eip1559 => "eip1559",
        }
    }
}

/// What the sign bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct SignReport {
    /// Transactions per timed run.
    pub txs: usize,
    /// Signing threads.
    pub threads: usize,
    /// Built, encoded and signed per second on all threads.
    pub tps: f64,
    /// The same per thread.
    pub tps_per_thread: f64,
    /// Bare curve signatures per second per thread.
    pub raw_sign_tps_per_thread: f64,
    /// What building and encoding leave of the curve's speed.
    pub ratio_to_raw: f64,
    /// The transaction type.
    pub tx_type: TxType,
    /// Built, encoded and signed per second on one thread.
    pub single_thread_tps: f64,
    /// All threads over one.
    pub speedup_over_single_thread: f64,
    /// Timed runs of each path.
    #[serde(skip)]
    pub runs: usize,
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
pub fn run(config: &SignConfig) -> Result<SignReport, BenchError> {
    ensure(config.txs > 0, || "--txs must be at least 1".into())?;
    let threads = config.threads.unwrap_or_else(threads);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let single = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let signer = LocalSigner::from_secret(&KEY)?;
    let builder = config.tx_type.builder();
    let sign_all = |pool: &rayon::ThreadPool| -> Vec<RawTx> {
        pool.install(|| {
            sign_batch(&signer, config.txs, |nonce| {
                builder.transfer(nonce as u64, TO, U256::from(VALUE))
            })
        })
    };
    // The curve's cost does not depend on the digest's value.
    let hashes: Vec<B256> = (0..config.txs).map(|i| B256::from(U256::from(i))).collect();
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
    ensure(signed.len() == config.txs, || {
        format!("signed {} of {} txs", signed.len(), config.txs)
    })?;
    if let Some(path) = &config.dump {
        dump(path, &signed)?;
    }
    drop(signed);
    sign_hashes();
    sign_all(&single);
    let (mut full, mut raw, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..config.runs.max(1) {
        full.push(timed(|| sign_all(&pool)));
        raw.push(timed(sign_hashes));
        if threads > 1 {
            one.push(timed(|| sign_all(&single)));
        }
    }
    let full = median(full);
    let raw = median(raw);
    let one = if threads > 1 { median(one) } else { full };

    let per_second = |d: Duration| config.txs as f64 / d.as_secs_f64();
    let tps = per_second(full);
    let raw_per_thread = per_second(raw) / threads as f64;
    Ok(SignReport {
        txs: config.txs,
        threads,
        tps: ratio(tps, 1.0),
        tps_per_thread: ratio(tps / threads as f64, 1.0),
        raw_sign_tps_per_thread: ratio(raw_per_thread, 1.0),
        ratio_to_raw: ratio(tps / threads as f64, raw_per_thread),
        tx_type: config.tx_type,
        single_thread_tps: ratio(per_second(one), 1.0),
        speedup_over_single_thread: ratio(tps, per_second(one)),
        runs: config.runs,
    })
}

impl fmt::Display for SignReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sign, {} {} transfers, {} threads, median of {} runs",
            self.txs,
            self.tx_type.name(),
            self.threads,
            self.runs
        )?;
        writeln!(f, "{:<36} {:>12}", "path", "tx/s")?;
        for (path, tps) in [
            ("build + encode + sign, all threads", self.tps),
            ("  per thread", self.tps_per_thread),
            ("bare curve sign, per thread", self.raw_sign_tps_per_thread),
            ("build + encode + sign, one thread", self.single_thread_tps),
        ] {
            writeln!(f, "{path:<36} {tps:>12.0}")?;
        }
        writeln!(
            f,
            "ratio to raw {:.3}, {} threads {:.2}x one thread",
            self.ratio_to_raw, self.threads, self.speedup_over_single_thread
        )
    }
}

/// Writes `txs` as 0x-prefixed lowercase hex, one per line.
fn dump(path: &Path, txs: &[RawTx]) -> Result<(), BenchError> {
    let failed = || BenchError::io(format!("writing {}", path.display()));
    let file = std::fs::File::create(path)
        .map_err(BenchError::io(format!("creating {}", path.display())))?;
    let mut out = std::io::BufWriter::new(file);
    for tx in txs {
        writeln!(out, "0x{}", hex::encode(&tx.bytes)).map_err(failed())?;
    }
    out.flush().map_err(failed())
}
