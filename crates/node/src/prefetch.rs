//! Prefetching: load what the next block's transactions will read before they run, into
//! the state layers' origin pool (L1.5) and clean cache (L3). It lives with the import
//! pipeline that drives it (`Chain::import_stream` prefetches block N+1 while block N
//! executes), so that the state layers need not depend on the executor.
//!
//! Every transaction's sender and recipient accounts are loaded directly; a transaction
//! that calls code or creates a contract also runs alone as a call (no nonce check, no
//! fee) on a snapshot, so the slots and code it touches are loaded too. A plain transfer
//! reads nothing else, and running the EVM for it would cost as much CPU as executing it.
//! Prefetching reads through the same layers as execution and only ever caches values from
//! below the diff layers, which are the same for any snapshot: it cannot change a result,
//! only its speed.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use rayon::prelude::*;
use stave_exec::{BlockEnv, CallRequest};
use stave_primitives::{RecoveredTx, StateReader as _};
use stave_state::Snapshot;

/// How many threads a node prefetches on unless told otherwise. The threads mostly wait
/// on the disk rather than compute, so the count follows the disk's appetite for
/// concurrent reads, not the cores (see MEASUREMENTS.md, prefetch threads).
pub const DEFAULT_PREFETCH_THREADS: usize = 4;

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
    /// transactions that run code, whatever a speculative run in `env` touches. Returns when done, or soon after `stop` is set: the transactions not
    /// started by then are left for execution to read, so a prefetch that cannot finish
    /// before the block executes never holds the block up.
    pub fn prefetch(
        &self,
        snapshot: &Snapshot<'_, '_>,
        env: BlockEnv<'_>,
        txs: &[RecoveredTx],
        stop: &AtomicBool,
    ) {
        let snapshot = snapshot.for_prefetch();
        self.pool.install(|| {
            txs.par_iter().for_each(|tx| {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let call = CallRequest::from_tx(tx);
                let _sender = snapshot.account(call.from);
                let runs_code = match call.to {
                    Some(to) => snapshot.account(to).ok().flatten().is_some_and(|account| {
                        account.code_hash != alloy_primitives::KECCAK256_EMPTY
                    }),
                    None => true,
                };
                if runs_code {
                    // Failures (reverts, invalid calls) are expected: the reads count.
                    let _ignored = stave_exec::call(&snapshot, env, &call);
                }
            });
        });
        snapshot.publish_prefetched();
    }
}
