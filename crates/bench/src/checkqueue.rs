//! `stave bench checkqueue`: per-job cost of the lock-free queue, Bitcoin Core's
//! mutex-and-condvar queue, and rayon, on empty jobs (pure queue overhead, which exposes
//! contention) and on ecrecover jobs (the real load).

use std::{fmt, time::Instant};

use alloy_consensus::crypto::secp256k1::recover_signer;
use rayon::prelude::*;
use serde::Serialize;
use stave_checkqueue::{Check, CheckQueue, baseline::MutexCheckQueue};
use stave_primitives::{B256, U256};
use stave_sdk::{TxBuilder, Workload, signed_workload};

use crate::{BenchError, CHAIN_ID, GAS_PRICE, ensure, ratio, threads};

/// The rounds `stave bench checkqueue` runs.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CheckqueueConfig {
    /// Jobs per round: one block's worth.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub round_jobs: usize,
    /// Rounds of empty jobs.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 400))]
    pub empty_rounds: usize,
    /// Rounds of ecrecover jobs.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 8))]
    pub ecrecover_rounds: usize,
}

/// Per-job cost of each queue on one kind of job.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// Jobs run on each queue.
    pub jobs: usize,
    /// Threads each queue ran on.
    pub threads: usize,
    /// The lock-free queue.
    pub lockfree_ns_per_job: f64,
    /// Bitcoin Core's mutex-and-condvar queue.
    pub mutex_ns_per_job: f64,
    /// rayon, given each round whole.
    pub rayon_ns_per_job: f64,
    /// The mutex queue's cost over the lock-free one's.
    pub ratio_mutex_over_lockfree: f64,
}

/// What the check queue bench measured: empty jobs at the top level of its JSON line,
/// ecrecover jobs under `ecrecover`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckqueueReport {
    /// Empty jobs: the queues' own cost.
    #[serde(flatten)]
    pub empty: QueueReport,
    /// Signature recoveries: the real load.
    pub ecrecover: QueueReport,
    /// Jobs per round.
    #[serde(skip)]
    pub round_jobs: usize,
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
) -> Result<QueueReport, BenchError> {
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
            let pushed = round.push(check).is_ok();
            ensure(pushed, || "a round sized for its checks is full".into())?;
        }
        ensure(round.finish().is_ok(), || {
            "lock-free queue: a check failed".into()
        })?;
        lockfree_time += start.elapsed();

        let checks = make();
        let start = Instant::now();
        for check in checks {
            mutex.add(vec![check]);
        }
        ensure(mutex.wait(), || "mutex queue: a check failed".into())?;
        mutex_time += start.elapsed();

        let mut checks = make();
        let start = Instant::now();
        let passed = checks.par_iter_mut().all(|c| c.run().is_ok());
        ensure(passed, || "rayon: a check failed".into())?;
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
pub fn run(config: &CheckqueueConfig) -> Result<CheckqueueReport, BenchError> {
    let threads = threads();
    let txs = signed_workload(
        Workload::Transfer,
        &TxBuilder::new(CHAIN_ID, GAS_PRICE),
        config.round_jobs,
    )?;
    let signatures: Vec<Ecrecover> = txs
        .iter()
        .map(|tx| Ecrecover {
            hash: tx.envelope().signature_hash(),
            signature: *tx.envelope().signature(),
        })
        .collect();
    ensure(
        signatures.iter().all(|s| s.signature.s() > U256::ZERO),
        || "a signature has s = 0".into(),
    )?;
    Ok(CheckqueueReport {
        empty: compare(threads, config.empty_rounds, || {
            (0..config.round_jobs as u64).map(Empty).collect()
        })?,
        ecrecover: compare(threads, config.ecrecover_rounds, || signatures.clone())?,
        round_jobs: config.round_jobs,
    })
}

impl fmt::Display for CheckqueueReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "check queues, {} threads, rounds of {} jobs",
            self.empty.threads, self.round_jobs
        )?;
        writeln!(
            f,
            "{:<10} {:>9} {:>14} {:>14} {:>14} {:>13}",
            "jobs", "count", "lock-free ns", "mutex ns", "rayon ns", "mutex/lockfree"
        )?;
        for (name, r) in [("empty", &self.empty), ("ecrecover", &self.ecrecover)] {
            writeln!(
                f,
                "{:<10} {:>9} {:>14.1} {:>14.1} {:>14.1} {:>12.2}x",
                name,
                r.jobs,
                r.lockfree_ns_per_job,
                r.mutex_ns_per_job,
                r.rayon_ns_per_job,
                r.ratio_mutex_over_lockfree
            )?;
        }
        Ok(())
    }
}
