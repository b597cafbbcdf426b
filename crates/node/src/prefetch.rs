//! Prefetching: load what a block's transactions will read before they run, into the
//! state layers' origin pool (L1.5) and clean cache (L3). It lives with the import
//! pipeline that drives it (`Chain::import_stream` prefetches block N+1 from while block
//! N executes until N+1 has executed; a block built, validated or imported alone is
//! prefetched beside its execution), so that the state layers need not depend on the
//! executor.
//!
//! Every transaction's sender and recipient accounts are loaded directly; a transaction
//! that calls code or creates a contract also runs alone as a call (no nonce check, no
//! fee) on a snapshot, so the slots and code it touches are loaded too. A plain transfer
//! reads nothing else, and running the EVM for it would cost as much CPU as executing
//! it; so does a call on a warm state, where it loads nothing. So a prefetch stops once
//! [`WARM_RUN`] transactions in a row found their state in memory, judged by how long
//! their loads took (the EVM's work between them not counted), not by which layer served
//! them: a load the OS page cache serves is an order of magnitude faster than one from the
//! disk, and prefetching what the page cache holds only takes the executor's CPU. Judging
//! by the accounts alone misjudged ERC-20 transfers, whose senders' account pages were in
//! the page cache while their balance slots were not.
//! Prefetching reads through the same layers as execution and only ever caches values from
//! below the diff layers, which are the same for any snapshot: it cannot change a result,
//! only its speed.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use stave_exec::{BlockEnv, CallRequest};
use stave_primitives::{RecoveredTx, StateReader as _};
use stave_state::Snapshot;

/// How many threads a node prefetches on unless told otherwise. The threads mostly wait
/// on the disk rather than compute, so the count follows the disk's appetite for
/// concurrent reads, not the cores (see MEASUREMENTS.md, prefetch threads).
pub const DEFAULT_PREFETCH_THREADS: usize = 32;

/// Transactions in a row a prefetch thread finds entirely in memory before the prefetch
/// stops: on a state that is mostly cold a run this long is vanishingly rare, on a warm
/// one it comes within the first few dozen.
pub const WARM_RUN: u32 = 32;

/// A load from below the state layers that takes at least this long on average came from
/// the disk; one from the OS page cache takes a fraction of it (MEASUREMENTS.md, eighth
/// session). A thread preempted mid-load only makes a warm transaction look cold, which
/// prefetching tolerates.
pub const DISK_LOAD: Duration = Duration::from_micros(10);

/// Loads what blocks' transactions will read, on a pool of threads that wait on the disk.
///
/// A prefetch first probes on its caller's thread, and only when it meets a transaction
/// whose reads came from the disk does it wake the pool. A warm state is thus probed on
/// one thread and costs the executor nothing more, where waking dozens of pool threads on
/// a few cores for every block (rayon's spin before they sleep again) took much of a
/// warm import's CPU. Threads started afresh for each cold block instead were slower than
/// the kept pool (MEASUREMENTS.md, eighth session).
pub struct Prefetcher {
    pool: rayon::ThreadPool,
    disk_load: Duration,
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("threads", &self.pool.current_num_threads())
            .field("disk_load", &self.disk_load)
            .finish()
    }
}

/// What one prefetching thread shares with the others of its prefetch.
struct Loading<'a, 'l, 's> {
    snapshot: &'a Snapshot<'l, 's>,
    env: BlockEnv<'a>,
    txs: &'a [RecoveredTx],
    /// The next transaction no thread has taken.
    next: AtomicUsize,
    /// Set once a thread found the state warm: every thread stops.
    warm: AtomicBool,
    stop: &'a AtomicBool,
    /// Loads at least this slow on average came from the disk.
    disk_load: Duration,
}

/// Why [`Loading::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// No transaction left, told to stop, or the state is warm.
    Done,
    /// It met a transaction whose reads came from the disk (after loading them), as the
    /// probe asked.
    MetCold,
}

impl Loading<'_, '_, '_> {
    /// Takes transactions in order and loads their reads until [`Ended::Done`]; with
    /// `probe`, returns [`Ended::MetCold`] at the first cold one.
    fn run(&self, probe: bool) -> Ended {
        let mut warm_run = 0;
        while !self.stop.load(Ordering::Relaxed) && !self.warm.load(Ordering::Relaxed) {
            let Some(tx) = self.txs.get(self.next.fetch_add(1, Ordering::Relaxed)) else {
                return Ended::Done;
            };
            let call = CallRequest::from_tx(tx);
            let before = stave_state::prefetch_disk_loads();
            let _sender = self.snapshot.account(call.from);
            let runs_code = match call.to {
                Some(to) => self
                    .snapshot
                    .account(to)
                    .ok()
                    .flatten()
                    .is_some_and(|account| account.code_hash != alloy_primitives::KECCAK256_EMPTY),
                None => true,
            };
            if runs_code {
                // Failures (reverts, invalid calls) are expected: the reads count.
                let _ignored = stave_exec::call(self.snapshot, self.env, &call);
            }
            let cold = stave_state::prefetch_disk_loads()
                .since(before)
                .averaged_at_least(self.disk_load);
            if !cold {
                warm_run += 1;
                if warm_run >= WARM_RUN {
                    self.warm.store(true, Ordering::Relaxed);
                }
                continue;
            }
            warm_run = 0;
            if probe {
                return Ended::MetCold;
            }
        }
        Ended::Done
    }
}

impl Prefetcher {
    /// A prefetcher on up to `threads` threads judging loads at least `disk_load` slow on
    /// average to come from the disk, shareable, or none when `threads` is 0 (what
    /// [`crate::Chain::with_prefetcher`] takes). [`DISK_LOAD`] suits a local SSD; a slower
    /// disk (a network volume) wants a higher bound; zero counts every load below the
    /// state layers as cold.
    pub fn with_threads(threads: usize, disk_load: Duration) -> std::io::Result<Option<Arc<Self>>> {
        (threads > 0)
            .then(|| Self::new(threads, disk_load).map(Arc::new))
            .transpose()
    }

    /// A prefetcher on a pool of `threads` threads (at least one), judging as
    /// [`Prefetcher::with_threads`] says.
    pub fn new(threads: usize, disk_load: Duration) -> std::io::Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("prefetch-{i}"))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self { pool, disk_load })
    }

    /// Loads what `txs` will read from `snapshot`: senders and recipients, and for
    /// transactions that run code, whatever a speculative run in `env` touches. Returns
    /// when done, or soon after `stop` is set: the transactions not started by then are
    /// left for execution to read, so a prefetch that cannot finish before the block
    /// executes never holds the block up. Once a thread finds [`WARM_RUN`] transactions
    /// in a row entirely in memory (the layers', or the OS page cache), every thread
    /// stops: the state is warm, and reading it again ahead of the executor would only
    /// take the executor's CPU.
    pub fn prefetch(
        &self,
        snapshot: &Snapshot<'_, '_>,
        env: BlockEnv<'_>,
        txs: &[RecoveredTx],
        stop: &AtomicBool,
    ) {
        let snapshot = snapshot.for_prefetch();
        // Every thread takes the next transaction not taken yet, so the prefetch moves
        // through the block in order, as execution does, staying ahead of it, rather
        // than each thread starting in a different part of the block.
        let loading = Loading {
            snapshot: &snapshot,
            env,
            txs,
            next: AtomicUsize::new(0),
            warm: AtomicBool::new(false),
            stop,
            disk_load: self.disk_load,
        };
        if loading.run(true) == Ended::MetCold {
            self.pool.broadcast(|_| loading.run(false));
        }
        snapshot.publish_prefetched();
    }
}
