//! `stave bench exec`: the execute stage on one block, serial vs parallel, per workload.
//! The block runs on a state in memory and its roots are not hashed, so a block of
//! transfers takes ~2 ms here against ~7 ms in a node (`stave bench pipeline`, which reads
//! stored state and hashes the roots), and the parallel executor's fixed costs a block
//! (the speculator's start, the check, the merge) weigh about three times as much.

use clap::Args;
use serde::Serialize;
use stave_exec::{BlockEnv, BlockInput, MemoryState, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{Address, Header};
use stave_sdk::{TxBuilder, signed_workload};
use stave_verify::verify_serial;

use super::{BlockArgs, CHAIN_ID, Output, Workload, median_time, micros, ratio, threads};

/// Arguments of `stave bench exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Workloads to run (all by default).
    #[arg(long, value_enum, num_args = 1.., default_values_t = [Workload::Transfer, Workload::Erc20, Workload::Conflict, Workload::Mixed])]
    workload: Vec<Workload>,
    #[command(flatten)]
    block: BlockArgs,
    #[command(flatten)]
    output: Output,
}

/// One workload's figures.
#[derive(Debug, Serialize)]
struct WorkloadReport {
    workload: Workload,
    block_txs: usize,
    threads: usize,
    serial_us: f64,
    parallel_us: f64,
    speedup: f64,
}

/// The JSON line.
#[derive(Debug, Serialize)]
struct Report {
    workloads: Vec<WorkloadReport>,
}

/// Runs the exec bench.
pub fn run(args: ExecArgs) -> anyhow::Result<()> {
    let threads = threads();
    let executor = ParallelExecutor::new(threads)?;
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let header = Header {
        number: 1,
        timestamp: 1_700_000_000,
        proposer: Address::repeat_byte(0xb0),
        gas_limit: stave_primitives::DEV_GAS_LIMIT,
        base_fee_per_gas: stave_primitives::DEFAULT_BASE_FEE,
        ..Header::default()
    };
    let mut workloads = Vec::new();
    for workload in &args.workload {
        let (kind, spec) = workload.setup(args.block.block_txs);
        let state = MemoryState::from_genesis(&spec);
        let txs = verify_serial(
            signed_workload(kind, &builder, args.block.block_txs)?,
            CHAIN_ID,
            None,
        )?;
        let input = BlockInput::new(
            &state,
            BlockEnv::new(CHAIN_ID, &header),
            &txs,
            Mode::Validate,
        );
        let serial = execute_serial(input)?;
        let parallel = executor.execute(input)?;
        anyhow::ensure!(
            parallel == serial,
            "{workload:?}: parallel result differs from serial"
        );
        let failed = serial
            .receipts
            .iter()
            .filter(|r| !r.receipt.status.coerce_status())
            .count();
        anyhow::ensure!(
            failed == workload.reverts(args.block.block_txs),
            "{workload:?}: {failed} txs failed"
        );
        // Timed as the node runs a block on one thread: with the executor's spare change
        // map, as the parallel runs have theirs.
        let serial_time = median_time(args.block.runs, || executor.execute_one_thread(input));
        let parallel_time = median_time(args.block.runs, || executor.execute(input));
        workloads.push(WorkloadReport {
            workload: *workload,
            block_txs: args.block.block_txs,
            threads,
            serial_us: micros(serial_time),
            parallel_us: micros(parallel_time),
            speedup: ratio(serial_time.as_secs_f64(), parallel_time.as_secs_f64()),
        });
    }
    println!(
        "execute stage on one block in memory (no stored state, no roots: `bench pipeline` times a node's), {} txs, {threads} threads, median of {} runs",
        args.block.block_txs, args.block.runs
    );
    println!(
        "{:<10} {:>12} {:>13} {:>9}",
        "workload", "serial µs", "parallel µs", "speedup"
    );
    for w in &workloads {
        println!(
            "{:<10} {:>12.0} {:>13.0} {:>8.2}x",
            format!("{:?}", w.workload).to_lowercase(),
            w.serial_us,
            w.parallel_us,
            w.speedup
        );
    }
    args.output.finish(&Report { workloads })
}
