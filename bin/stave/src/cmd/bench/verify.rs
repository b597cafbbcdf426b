//! `stave bench verify`: the verify stage on one block, serial, parallel with a cold
//! sender cache, and parallel with a warm one (every tx seen at admission).

use std::{sync::Arc, time::Duration};

use serde::Serialize;
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload};
use stave_verify::{SenderCache, Verifier, verify_serial};

use super::{StageArgs, median, ratio, threads};

/// Chain id of the bench workload.
const CHAIN_ID: u64 = stave_primitives::dev::DEV_CHAIN_ID;

/// The JSON line.
#[derive(Debug, Serialize)]
struct Report {
    block_txs: usize,
    threads: usize,
    serial_ms: f64,
    parallel_cold_ms: f64,
    parallel_warm_ms: f64,
    speedup_parallel_over_serial: f64,
    speedup_warm_over_cold: f64,
    ecrecover_tps_per_core: f64,
    /// Signatures recovered per block with a cold cache (every one).
    cold_recoveries_per_block: u64,
    /// Signatures recovered per block with a warm cache (none).
    warm_recoveries_per_block: u64,
}

fn ms(d: Duration) -> f64 {
    ratio(d.as_secs_f64() * 1e3, 1.0)
}

/// Runs the verify bench.
pub fn run(args: StageArgs) -> anyhow::Result<()> {
    let threads = threads();
    let txs = signed_workload(
        WorkloadKind::Transfer,
        &TxBuilder::new(CHAIN_ID, 1_000_000_000),
        args.block.block_txs,
    )?;
    let warm = Arc::new(SenderCache::default());
    let reference = verify_serial(txs.clone(), CHAIN_ID, None)?;
    for tx in &reference {
        warm.insert(tx.tx.hash(), tx.sender);
    }
    let mut cold_verifier = Verifier::new(CHAIN_ID, threads, None);
    let mut warm_verifier = Verifier::new(CHAIN_ID, threads, Some(warm));
    anyhow::ensure!(
        cold_verifier.verify(txs.clone())? == reference,
        "parallel != serial"
    );
    anyhow::ensure!(
        warm_verifier.verify(txs.clone())? == reference,
        "warm != serial"
    );

    // Modes take turns run by run, so the machine's drift hits all alike; the transaction
    // copies each run consumes are made outside the timed region.
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    let runs = args.block.runs.max(1);
    let recovered_before = [cold_verifier.recoveries(), warm_verifier.recoveries()];
    for _ in 0..runs {
        let input = txs.clone();
        let start = std::time::Instant::now();
        std::hint::black_box(verify_serial(input, CHAIN_ID, None)?);
        times[0].push(start.elapsed());
        let input = txs.clone();
        let start = std::time::Instant::now();
        std::hint::black_box(cold_verifier.verify(input)?);
        times[1].push(start.elapsed());
        let input = txs.clone();
        let start = std::time::Instant::now();
        std::hint::black_box(warm_verifier.verify(input)?);
        times[2].push(start.elapsed());
    }
    let per_block =
        |verifier: &Verifier, before: u64| (verifier.recoveries() - before) / runs as u64;
    let cold_recoveries_per_block = per_block(&cold_verifier, recovered_before[0]);
    let warm_recoveries_per_block = per_block(&warm_verifier, recovered_before[1]);
    let [serial, cold, warm] = times.map(median);
    let report = Report {
        block_txs: args.block.block_txs,
        threads,
        serial_ms: ms(serial),
        parallel_cold_ms: ms(cold),
        parallel_warm_ms: ms(warm),
        speedup_parallel_over_serial: ratio(serial.as_secs_f64(), cold.as_secs_f64()),
        speedup_warm_over_cold: ratio(cold.as_secs_f64(), warm.as_secs_f64()),
        ecrecover_tps_per_core: ratio(args.block.block_txs as f64, serial.as_secs_f64()),
        cold_recoveries_per_block,
        warm_recoveries_per_block,
    };
    println!(
        "verify stage, {} txs, {threads} threads, median of {} runs",
        args.block.block_txs, args.block.runs
    );
    println!("{:<24} {:>10}", "mode", "ms");
    println!("{:<24} {:>10.2}", "serial", report.serial_ms);
    println!(
        "{:<24} {:>10.2}",
        "parallel, cold cache", report.parallel_cold_ms
    );
    println!(
        "{:<24} {:>10.2}",
        "parallel, warm cache", report.parallel_warm_ms
    );
    println!(
        "parallel/serial {:.2}x, warm/cold {:.1}x, {:.0} recoveries/s per core",
        report.speedup_parallel_over_serial,
        report.speedup_warm_over_cold,
        report.ecrecover_tps_per_core
    );
    args.output.finish(&report)
}
