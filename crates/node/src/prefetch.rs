//! Prefetching: load what a block's transactions will read before they run, into the
//! state layers' origin pool (L1.5) and clean cache (L3). It lives with the import
//! pipeline that drives it (`Chain::import_stream` prefetches block N+1 from while block
//! N executes until N+1 has executed; a block built, validated or imported alone is
//! prefetched beside its execution), so that the state layers need not depend on the
//! executor.
//!
//! Every transaction's sender and recipient accounts are loaded directly; a transaction
//! that calls code or creates a contract, and whose accounts were not all in memory, also
//! runs alone as a call (no nonce check, no fee) on a snapshot, so the slots and code it
//! touches are loaded too. A plain transfer reads nothing else, and running the EVM for it
//! would cost as much CPU as executing it; so would running a call on a warm state, where
//! it loads nothing.
//! Prefetching reads through the same layers as execution and only ever caches values from
//! below the diff layers, which are the same for any snapshot: it cannot change a result,
//! only its speed.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use stave_exec::{BlockEnv, CallRequest};
use stave_primitives::{RecoveredTx, StateReader as _};
use stave_state::Snapshot;

/// How many threads a node prefetches on unless told otherwise. The threads mostly wait
/// on the disk rather than compute, so the count follows the disk's appetite for
/// concurrent reads, not the cores (see MEASUREMENTS.md, prefetch threads).
pub const DEFAULT_PREFETCH_THREADS: usize = 32;

/// Transactions in a row a prefetch thread finds entirely in memory before it stops: on
/// a state that is mostly cold a run this long is vanishingly rare, on a warm one it comes
/// within the first few dozen.
pub const WARM_RUN: u32 = 32;

/// Threads that run transactions speculatively.
pub struct Prefetcher {
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("threads", &self.pool.current_num_threads())
            .finish()
    }
}

impl Prefetcher {
    /// A prefetcher on `threads` threads, shareable, or none when `threads` is 0 (what
    /// [`crate::Chain::with_prefetcher`] takes).
    pub fn with_threads(threads: usize) -> std::io::Result<Option<Arc<Self>>> {
        (threads > 0)
            .then(|| Self::new(threads).map(Arc::new))
            .transpose()
    }

    /// A prefetcher on `threads` threads of its own.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("prefetch-{i}"))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self { pool })
    }

    /// Loads what `txs` will read from `snapshot`: senders and recipients, and for
    /// transactions that run code, whatever a speculative run in `env` touches. Returns
    /// when done, or soon after `stop` is set: the transactions not started by then are
    /// left for execution to read, so a prefetch that cannot finish before the block
    /// executes never holds the block up. A thread that finds [`WARM_RUN`] transactions
    /// in a row entirely in memory stops early: the state is warm, and reading it again
    /// ahead of the executor would only take the executor's CPU.
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
        let next = AtomicUsize::new(0);
        self.pool.broadcast(|_| {
            let mut warm_run = 0;
            while !stop.load(Ordering::Relaxed) && warm_run < WARM_RUN {
                let Some(tx) = txs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                let call = CallRequest::from_tx(tx);
                let loads_before = stave_state::prefetch_disk_loads();
                let _sender = snapshot.account(call.from);
                let runs_code = match call.to {
                    Some(to) => snapshot.account(to).ok().flatten().is_some_and(|account| {
                        account.code_hash != alloy_primitives::KECCAK256_EMPTY
                    }),
                    None => true,
                };
                // A transaction whose accounts were all in memory most likely touches
                // state in memory too: running it would only take CPU from execution.
                let cold = stave_state::prefetch_disk_loads() > loads_before;
                if !cold {
                    warm_run += 1;
                    continue;
                }
                warm_run = 0;
                if runs_code {
                    // Failures (reverts, invalid calls) are expected: the reads count.
                    let _ignored = stave_exec::call(&snapshot, env, &call);
                }
            }
        });
        snapshot.publish_prefetched();
    }
}
