//! `stave bench verify`: the verify stage on one block, serial, parallel with a cold
//! sender cache, and parallel with a warm one (every tx seen at admission).

use std::{fmt, sync::Arc, time::Instant};

use serde::Serialize;
use stave_sdk::{TxBuilder, Workload, signed_workload};
use stave_verify::{SenderCache, Verifier, verify_serial};

use crate::{BenchError, BlockConfig, CHAIN_ID, GAS_PRICE, ensure, median, ms, ratio, threads};

/// What the verify bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Transactions in the block.
    pub block_txs: usize,
    /// Threads the parallel verifiers used.
    pub threads: usize,
    /// Serial recovery.
    pub serial_ms: f64,
    /// Parallel, nothing cached.
    pub parallel_cold_ms: f64,
    /// Parallel, every sender cached.
    pub parallel_warm_ms: f64,
    /// Serial over parallel cold.
    pub speedup_parallel_over_serial: f64,
    /// Parallel cold over parallel warm.
    pub speedup_warm_over_cold: f64,
    /// Signatures one core recovers per second.
    pub ecrecover_tps_per_core: f64,
    /// Signatures recovered per block with a cold cache (every one).
    pub cold_recoveries_per_block: u64,
    /// Signatures recovered per block with a warm cache (none).
    pub warm_recoveries_per_block: u64,
    /// Timed runs per mode.
    #[serde(skip)]
    pub runs: usize,
}

/// Runs the verify bench.
pub fn run(config: &BlockConfig) -> Result<VerifyReport, BenchError> {
    let threads = threads();
    let txs = signed_workload(
        Workload::Transfer,
        &TxBuilder::new(CHAIN_ID, GAS_PRICE),
        config.block_txs,
    )?;
    let warm = Arc::new(SenderCache::default());
    let reference = verify_serial(txs.clone(), CHAIN_ID, None)?;
    for tx in &reference {
        warm.insert(tx.tx.hash(), tx.sender);
    }
    let mut cold_verifier = Verifier::new(CHAIN_ID, threads, None);
    let mut warm_verifier = Verifier::new(CHAIN_ID, threads, Some(warm));
    ensure(cold_verifier.verify(txs.clone())? == reference, || {
        "parallel != serial".into()
    })?;
    ensure(warm_verifier.verify(txs.clone())? == reference, || {
        "warm != serial".into()
    })?;

    // Modes take turns run by run, so the machine's drift hits all alike; the transaction
    // copies each run consumes are made outside the timed region.
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    let runs = config.runs.max(1);
    let recovered_before = [cold_verifier.recoveries(), warm_verifier.recoveries()];
    for _ in 0..runs {
        let input = txs.clone();
        let start = Instant::now();
        std::hint::black_box(verify_serial(input, CHAIN_ID, None)?);
        times[0].push(start.elapsed());
        let input = txs.clone();
        let start = Instant::now();
        std::hint::black_box(cold_verifier.verify(input)?);
        times[1].push(start.elapsed());
        let input = txs.clone();
        let start = Instant::now();
        std::hint::black_box(warm_verifier.verify(input)?);
        times[2].push(start.elapsed());
    }
    let per_block =
        |verifier: &Verifier, before: u64| (verifier.recoveries() - before) / runs as u64;
    let cold_recoveries_per_block = per_block(&cold_verifier, recovered_before[0]);
    let warm_recoveries_per_block = per_block(&warm_verifier, recovered_before[1]);
    let [serial, cold, warm] = times.map(median);
    Ok(VerifyReport {
        block_txs: config.block_txs,
        threads,
        serial_ms: ms(serial),
        parallel_cold_ms: ms(cold),
        parallel_warm_ms: ms(warm),
        speedup_parallel_over_serial: ratio(serial.as_secs_f64(), cold.as_secs_f64()),
        speedup_warm_over_cold: ratio(cold.as_secs_f64(), warm.as_secs_f64()),
        ecrecover_tps_per_core: ratio(config.block_txs as f64, serial.as_secs_f64()),
        cold_recoveries_per_block,
        warm_recoveries_per_block,
        runs: config.runs,
    })
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "verify stage, {} txs, {} threads, median of {} runs",
            self.block_txs, self.threads, self.runs
        )?;
        writeln!(f, "{:<24} {:>10}", "mode", "ms")?;
        for (mode, ms) in [
            ("serial", self.serial_ms),
            ("parallel, cold cache", self.parallel_cold_ms),
            ("parallel, warm cache", self.parallel_warm_ms),
        ] {
            writeln!(f, "{mode:<24} {ms:>10.2}")?;
        }
        writeln!(
            f,
            "parallel/serial {:.2}x, warm/cold {:.1}x, {:.0} recoveries/s per core",
            self.speedup_parallel_over_serial,
            self.speedup_warm_over_cold,
            self.ecrecover_tps_per_core
        )
    }
}
