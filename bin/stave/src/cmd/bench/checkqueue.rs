//! `stave bench checkqueue`: per-job cost of the lock-free queue, Bitcoin Core's
//! mutex-and-condvar queue, and rayon, on empty jobs (pure queue overhead, which exposes
//! contention) and on ecrecover jobs (the real load).

use std::time::Instant;

use alloy_consensus::crypto::secp256k1::recover_signer;
use clap::Args;
use rayon::prelude::*;
use serde::Serialize;
use stave_checkqueue::{Check, CheckQueue, baseline::MutexCheckQueue};
use stave_primitives::{B256, U256};
use stave_sdk::{TxBuilder, WorkloadKind, signed_workload};

use super::{Output, ratio, threads};

/// Arguments of `stave bench checkqueue`.
#[derive(Debug, Args)]
pub struct CheckqueueArgs {
    /// Jobs per round: one block's worth.
    #[arg(long, default_value_t = 2_500)]
    round_jobs: usize,
    /// Rounds of empty jobs.
    #[arg(long, default_value_t = 400)]
    empty_rounds: usize,
    /// Rounds of ecrecover jobs.
    #[arg(long, default_value_t = 8)]
    ecrecover_rounds: usize,
    #[command(flatten)]
    output: Output,
}

/// Per-job cost of each queue on one kind of job.
#[derive(Debug, Serialize)]
struct QueueReport {
    jobs: usize,
    threads: usize,
    lockfree_ns_per_job: f64,
    mutex_ns_per_job: f64,
    rayon_ns_per_job: f64,
    ratio_mutex_over_lockfree: f64,
}

/// The JSON line: empty jobs at the top level, ecrecover under `ecrecover`.
#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    empty: QueueReport,
    ecrecover: QueueReport,
}

/// A job that does nothing but read its own word: what is left is the queue's cost.
struct Empty(u64);

impl Check for Empty {
    type Error = ();
    fn run(&mut self) -> Result<(), ()> {
        std::hint::black_box(self.0);
        Ok(())
    }
}

/// One signature recovery with libsecp256k1, as the verify stage does per transaction.
#[derive(Clone, Copy)]
struct Ecrecover {
    hash: B256,
    signature: stave_primitives::Signature,
}

impl Check for Ecrecover {
    type Error = ();
    fn run(&mut self) -> Result<(), ()> {
        recover_signer(&self.signature, self.hash)
            .map(drop)
            .map_err(drop)
    }
}

/// Times `rounds` rounds of jobs on each queue and returns the ns per job of each.
///
/// Both queues are fed one check at a time, as the verify stage feeds them (each
/// transaction is queued as soon as it is decoded; Bitcoin Core likewise adds each
/// transaction's checks as it goes). rayon gets the whole round at once, its best case.
/// The queues take turns round by round, so drift in the machine's speed hits all alike.
fn compare<C: Check + Send>(
    threads: usize,
    rounds: usize,
    make: impl Fn() -> Vec<C>,
) -> anyhow::Result<QueueReport> {
    let mut lockfree = CheckQueue::new(threads, 0);
    let mutex = MutexCheckQueue::new(threads);
    let (mut lockfree_time, mut mutex_time, mut rayon_time) = Default::default();
    let mut jobs = 0;
    for _ in 0..rounds {
        let checks = make();
        jobs += checks.len();
        let start = Instant::now();
        let mut round = lockfree.round(checks.len());
        for check in checks {
            round
                .push(check)
                .map_err(|_| anyhow::anyhow!("round sized for its checks"))?;
        }
        anyhow::ensure!(round.finish().is_ok(), "lock-free queue: a check failed");
        lockfree_time += start.elapsed();

        let checks = make();
        let start = Instant::now();
        for check in checks {
            mutex.add(vec![check]);
        }
        anyhow::ensure!(mutex.wait(), "mutex queue: a check failed");
        mutex_time += start.elapsed();

        let mut checks = make();
        let start = Instant::now();
        anyhow::ensure!(
            checks.par_iter_mut().all(|c| c.run().is_ok()),
            "rayon: a check failed"
        );
        rayon_time += start.elapsed();
    }
    let per_job = |d: std::time::Duration| d.as_nanos() as f64 / jobs as f64;
    Ok(QueueReport {
        jobs,
        threads,
        lockfree_ns_per_job: ratio(per_job(lockfree_time), 1.0),
        mutex_ns_per_job: ratio(per_job(mutex_time), 1.0),
        rayon_ns_per_job: ratio(per_job(rayon_time), 1.0),
        ratio_mutex_over_lockfree: ratio(per_job(mutex_time), per_job(lockfree_time)),
    })
}

/// Runs the check queue bench.
pub fn run(args: CheckqueueArgs) -> anyhow::Result<()> {
    let threads = threads();
    let txs = signed_workload(
        WorkloadKind::Transfer,
        &TxBuilder::new(stave_primitives::dev::DEV_CHAIN_ID, 1_000_000_000),
        args.round_jobs,
    )?;
    let signatures: Vec<Ecrecover> = txs
        .iter()
        .map(|tx| Ecrecover {
            hash: tx.envelope().signature_hash(),
            signature: *tx.envelope().signature(),
        })
        .collect();
    anyhow::ensure!(signatures.iter().all(|s| s.signature.s() > U256::ZERO));
    let report = Report {
        empty: compare(threads, args.empty_rounds, || {
            (0..args.round_jobs as u64).map(Empty).collect()
        })?,
        ecrecover: compare(threads, args.ecrecover_rounds, || signatures.clone())?,
    };
    println!(
        "check queues, {threads} threads, rounds of {} jobs",
        args.round_jobs
    );
    println!(
        "{:<10} {:>9} {:>14} {:>14} {:>14} {:>13}",
        "jobs", "count", "lock-free ns", "mutex ns", "rayon ns", "mutex/lockfree"
    );
    for (name, r) in [("empty", &report.empty), ("ecrecover", &report.ecrecover)] {
        println!(
            "{:<10} {:>9} {:>14.1} {:>14.1} {:>14.1} {:>12.2}x",
            name,
            r.jobs,
            r.lockfree_ns_per_job,
            r.mutex_ns_per_job,
            r.rayon_ns_per_job,
            r.ratio_mutex_over_lockfree
        );
    }
    args.output.finish(&report)
}
