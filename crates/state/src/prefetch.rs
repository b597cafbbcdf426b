//! Prefetching: run the next block's transactions ahead of time, throw the results away,
//! and keep what they read in the origin pool (L1.5) and the clean cache (L3).
//!
//! Each transaction runs alone as a call (no nonce check, no fee) on a snapshot, so a
//! prefetch never depends on the order or success of the others. It reads through the same
//! layers as execution and only ever caches values read from below the diff layers, which
//! are the same for any snapshot: prefetching cannot change a result, only its speed.

use rayon::prelude::*;
use stave_exec::CallRequest;
use stave_primitives::{Header, RecoveredTx};

use crate::layers::Snapshot;

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
    /// The default thread count: 3/5 of the cores, at least one.
    pub fn default_threads() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores * 3 / 5).max(1)
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

    /// Runs `txs` against `snapshot` in `header`'s environment and discards the results;
    /// returns when all have run. Failures (a reverted or invalid tx) are expected and
    /// ignored: the reads they made are what counts.
    pub fn prefetch(
        &self,
        snapshot: &Snapshot<'_, '_>,
        chain_id: u64,
        header: &Header,
        txs: &[RecoveredTx],
    ) {
        let snapshot = snapshot.for_prefetch();
        self.pool.install(|| {
            txs.par_iter().for_each(|tx| {
                let _ignored =
                    stave_exec::call(&snapshot, chain_id, header, &CallRequest::from_tx(tx));
            });
        });
    }
}
