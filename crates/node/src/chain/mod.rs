//! The import seam: every block that enters a data dir's chain goes through [`Chain`],
//! stage by stage, each stage with a named input and output.
//!
//! ```text
//! open ─▶ Chain (layers of the blocks after the flushed state replayed: Replayed)
//!
//! Incoming ─receive─▶ Received ─execute─▶ Executed ─commit─▶ Imported      on the stored head
//!  (bytes,   decode,   Stored |   + header   (outcome,  write,
//!   agreed   verify    Verified   checks     senders)   layer)
//!   senders)                 └─execute on speculative state─▶ SpeculativeBlock
//!                                                  ─commit_speculative─▶ PreparedBlock
//! transactions ─prepare_on─▶ PreparedBlock ─commit─▶ (stored, its state a layer)
//!                         └─▶ SpeculativeBlock (a proposal on uncommitted parents)
//! ```
//!
//! - [`open`](Chain::open) (module `open`): checks the data format, commits the genesis
//!   into an empty store, and rebuilds the state layers of the blocks after the flushed
//!   height from their journaled diffs (re-executing a block without a usable one).
//! - receive (module `receive`): decode (offset-indexed body, on all cores, checked
//!   against `transactions_root`) and verify (senders on the check queue, the sender
//!   cache first; agreed senders skip recovery). Needs no state, so it runs ahead.
//! - execute (module `execute`): speculative parallel revm against the parent's state,
//!   then the header's gas used, receipts root and state root are checked.
//! - commit (module `commit`): one LMDB write with the state journaled, and the block's
//!   state pushed as a layer; the oldest layers are flushed in batches.
//! - import (module `import`): receive → execute → commit on the stored head, one block
//!   ([`Chain::import`]) or a stream with block N+1 received (and prefetched) while block
//!   N executes and commits ([`Chain::import_stream`]).
//! - speculative (module `speculative`): building ([`Chain::prepare_on`]) and validating
//!   ([`Chain::validate_on`]) blocks on uncommitted parents, and committing them once
//!   final ([`Chain::commit_speculative`]).
//!
//! Each stage runs in a `stage` tracing span and records its wall time in the
//! [`STAGE_SECONDS`] histogram and the block's [`StageTimes`].

mod commit;
mod execute;
mod import;
mod open;
mod permissions;
mod receive;
mod speculative;
mod stage;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_primitives::B256;
use stave_codec::encode_block_parts;
use stave_exec::{BlockEnv, ParallelExecutor};
use stave_primitives::{
    Block, ChainSpec, GlobalPoolLeaves, Header, RecoveredTx, SealedBlock, StateDiff, merkle_root,
    state_root,
};
use stave_state::StateLayers;
use stave_storage::{
    KvStore,
    read::{encoded_body, head, header},
};
use stave_verify::{SenderCache, Verifier};

use crate::{error::ImportError, prefetch::Prefetcher};

pub use commit::PreparedBlock;
pub use import::Imported;
pub use open::Replayed;
pub(crate) use open::commit_genesis;
pub use receive::Incoming;
pub use speculative::SpeculativeBlock;
pub use stage::{STAGE_SECONDS, StageTimes};

/// Block 0 of a chain and the state it creates (none for a generated state, which only
/// its root names: see [`stave_primitives::GeneratedState`]).
pub fn genesis(spec: &ChainSpec) -> (SealedBlock, StateDiff) {
    let diff = StateDiff::from_genesis(spec);
    let state_root = match spec.generated_state() {
        Some(generated) => generated.state_root,
        None => state_root(B256::ZERO, &diff, &GlobalPoolLeaves),
    };
    let header = Header {
        number: 0,
        timestamp: spec.genesis().timestamp,
        gas_limit: spec.gas_limit(),
        base_fee_per_gas: spec.base_fee(),
        transactions_root: merkle_root(&[]),
        receipts_root: merkle_root(&[]),
        state_root,
        extra_data: spec.genesis().extra_data.clone(),
        ..Header::default()
    };
    (
        Block {
            header,
            transactions: Vec::new(),
        }
        .seal(),
        diff,
    )
}

/// How the stages run: the node always runs [`Parallelism::Parallel`]; the serial mode is
/// the baseline `stave bench pipeline` measures against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// Every stage on the calling thread.
    Serial,
    /// Every stage on all its threads.
    Parallel,
}

/// A data dir's chain: its store, its chain id, the verify and execute stages, and the
/// state layers the execute stage reads and the commit stage pushes to.
pub struct Chain<'s> {
    store: &'s dyn KvStore,
    chain_id: u64,
    parallelism: Parallelism,
    verifier: parking_lot::Mutex<Verifier>,
    cache: Option<Arc<SenderCache>>,
    executor: ParallelExecutor,
    layers: Arc<StateLayers<'s>>,
    replayed: Replayed,
    prefetcher: Option<Arc<Prefetcher>>,
}

/// Block `number` of `store` in its wire form (see docs/wire-formats.md, block form):
/// what `stave export` writes and what peers syncing from this node receive.
pub fn encoded_block(store: &dyn KvStore, number: u64) -> Result<Option<Vec<u8>>, ImportError> {
    let Some(header) = header(store, number)? else {
        return Ok(None);
    };
    let body = encoded_body(store, number)?.unwrap_or_default();
    Ok(Some(encode_block_parts(&header, &body)))
}

impl<'s> Chain<'s> {
    /// The store the chain lives in.
    pub fn store(&self) -> &'s dyn KvStore {
        self.store
    }

    /// The chain's state: diff layers over the flushed state on disk.
    pub fn layers(&self) -> Arc<StateLayers<'s>> {
        self.layers.clone()
    }

    /// The stored head: number and hash.
    pub fn head(&self) -> Result<(u64, B256), ImportError> {
        head(self.store)?.ok_or(ImportError::NoGenesis)
    }

    /// Block `number` in its wire form (see docs/wire-formats.md, block form), as `stave
    /// export` writes it.
    pub fn encoded_block(&self, number: u64) -> Result<Option<Vec<u8>>, ImportError> {
        encoded_block(self.store, number)
    }

    /// The stored head's header.
    fn head_header(&self) -> Result<Header, ImportError> {
        let (number, _) = self.head()?;
        header(self.store, number)?.ok_or(ImportError::NoGenesis)
    }

    /// The environment block `header` of this chain executes in.
    fn env<'h>(&self, header: &'h Header) -> BlockEnv<'h> {
        BlockEnv::new(self.chain_id, header)
    }

    /// Whether stages run on all their threads.
    fn parallel(&self) -> bool {
        self.parallelism == Parallelism::Parallel
    }

    /// The chain with `prefetcher` loading what blocks will read before they read it: the
    /// next block of a stream while one executes ([`Chain::import_stream`]), and a single
    /// block's transactions beside its execution (building, validating, importing one).
    /// `None` turns prefetching off.
    pub fn with_prefetcher(mut self, prefetcher: Option<Arc<Prefetcher>>) -> Self {
        self.prefetcher = prefetcher;
        self
    }

    /// Runs `execute` (the execution of `txs` in a block with `header`) with the
    /// prefetcher, if any, loading what they read beside it, ahead of the executor on the
    /// transactions it has not reached. The prefetch reads the stored head's layers: what
    /// it caches comes from below the diff layers, the same for every snapshot, so it
    /// needs none of the uncommitted parents `execute` may run on. It stops when
    /// `execute` returns.
    fn beside_prefetch<T>(
        &self,
        header: &Header,
        txs: &[RecoveredTx],
        execute: impl FnOnce() -> T,
    ) -> T {
        if self.prefetcher.is_none() || txs.is_empty() {
            return execute();
        }
        std::thread::scope(|scope| {
            let prefetching =
                Prefetching::spawn(scope, |stop| self.run_prefetch(header, txs, stop));
            let result = execute();
            prefetching.finish();
            result
        })
    }

    /// Prefetches what `txs` (of a block with `header`) read until done or `stop` is set;
    /// how long it ran (`None` without a prefetcher).
    fn run_prefetch(
        &self,
        header: &Header,
        txs: &[RecoveredTx],
        stop: &AtomicBool,
    ) -> Option<Duration> {
        let prefetcher = self.prefetcher.as_deref()?;
        let clock = Instant::now();
        prefetcher.prefetch(&self.layers.latest(), self.env(header), txs, stop);
        Some(clock.elapsed())
    }
}

/// A prefetch running on a thread of a scope until it is told to stop: beside a block's
/// execution, or in a stream from when the block is received until it has executed.
struct Prefetching<'scope> {
    stop: Arc<AtomicBool>,
    handle: std::thread::ScopedJoinHandle<'scope, Option<Duration>>,
}

impl<'scope> Prefetching<'scope> {
    /// Runs `prefetch` on a thread of `scope`, handing it the flag that tells it to stop;
    /// it returns how long it prefetched, if it did.
    fn spawn<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        prefetch: impl FnOnce(&AtomicBool) -> Option<Duration> + Send + 'scope,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = scope.spawn({
            let stop = stop.clone();
            move || prefetch(&stop)
        });
        Self { stop, handle }
    }

    /// Stops the prefetch (what it has not loaded, execution reads for itself), waits for
    /// its thread and records how long it ran; a panic on it goes on here.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok(Some(elapsed)) => stage::record("prefetch", elapsed),
            Ok(None) => {}
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
