//! `stave bench exec`: the execute stage on one block, serial vs parallel, per workload.
//! The block runs on a state in memory and its roots are not hashed, so it takes a
//! fraction of a node's time for the same block (`stave bench pipeline` reads stored
//! state and hashes the roots), and the parallel executor's fixed costs a block (the
//! speculator's start, the check, the merge) weigh more here than in a node.

use std::fmt;

use serde::Serialize;
use stave_exec::{BlockEnv, BlockInput, MemoryState, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{Address, Header};
use stave_sdk::{Targets, TxBuilder, Workload, signed_workload};
use stave_verify::verify_serial;

use crate::{
    BenchError, BlockConfig, CHAIN_ID, GAS_PRICE, ensure, median_time, micros, ratio, threads,
};

/// The workloads `stave bench exec` runs, and its block.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ExecConfig {
    /// Workloads to run (all by default).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, num_args = 1.., default_values_t = Workload::ALL)
    )]
    pub workload: Vec<Workload>,
    /// The block and its runs.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub block: BlockConfig,
}

/// One workload's figures.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    /// The workload.
    pub workload: Workload,
    /// Transactions in the block.
    pub block_txs: usize,
    /// Threads the parallel executor used.
    pub threads: usize,
    /// The block on one thread.
    pub serial_us: f64,
    /// The block on the parallel executor.
    pub parallel_us: f64,
    /// Serial over parallel.
    pub speedup: f64,
}

/// What the exec bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct ExecReport {
    /// One entry per workload, in the order asked for.
    pub workloads: Vec<WorkloadReport>,
    /// The block and its runs.
    #[serde(skip)]
    pub block: BlockConfig,
    /// Threads the parallel executor used.
    #[serde(skip)]
    pub threads: usize,
}

/// Runs the exec bench.
pub fn run(config: &ExecConfig) -> Result<ExecReport, BenchError> {
    let threads = threads();
    let executor =
        ParallelExecutor::new(threads).map_err(BenchError::io("starting the executor"))?;
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let header = Header {
        number: 1,
        timestamp: 1_700_000_000,
        proposer: Address::repeat_byte(0xb0),
        gas_limit: stave_primitives::DEV_GAS_LIMIT,
        base_fee_per_gas: stave_primitives::DEFAULT_BASE_FEE,
        ..Header::default()
    };
    let block_txs = config.block.block_txs;
    let mut workloads = Vec::new();
    for &workload in &config.workload {
        let spec = workload.genesis(CHAIN_ID, block_txs as u64, &Targets::default());
        let state = MemoryState::from_genesis(&spec);
        let txs = verify_serial(
            signed_workload(workload, &builder, block_txs)?,
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
        ensure(parallel == serial, || {
            format!("{workload:?}: parallel result differs from serial")
        })?;
        let failed = serial
            .receipts
            .iter()
            .filter(|r| !r.receipt.status.coerce_status())
            .count();
        ensure(failed == workload.reverts(block_txs), || {
            format!("{workload:?}: {failed} txs failed")
        })?;
        // Timed as the node runs a block on one thread: with the executor's spare change
        // map, as the parallel runs have theirs.
        let serial_time = median_time(config.block.runs, || executor.execute_one_thread(input));
        let parallel_time = median_time(config.block.runs, || executor.execute(input));
        workloads.push(WorkloadReport {
            workload,
            block_txs,
            threads,
            serial_us: micros(serial_time),
            parallel_us: micros(parallel_time),
            speedup: ratio(serial_time.as_secs_f64(), parallel_time.as_secs_f64()),
        });
    }
    Ok(ExecReport {
        workloads,
        block: config.block,
        threads,
    })
}

impl fmt::Display for ExecReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "execute stage on one block in memory (no stored state, no roots: `bench pipeline` times a node's), {} txs, {} threads, median of {} runs",
            self.block.block_txs, self.threads, self.block.runs
        )?;
        writeln!(
            f,
            "{:<10} {:>12} {:>13} {:>9}",
            "workload", "serial µs", "parallel µs", "speedup"
        )?;
        for w in &self.workloads {
            writeln!(
                f,
                "{:<10} {:>12.0} {:>13.0} {:>8.2}x",
                w.workload.name(),
                w.serial_us,
                w.parallel_us,
                w.speedup
            )?;
        }
        Ok(())
    }
}
