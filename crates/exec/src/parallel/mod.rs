//! The parallel executor: cut the block into one contiguous chunk per thread, run every
//! chunk at once, then check the chunks against each other in block order. Needs no
//! conflict declarations from contracts, and always gives what [`execute_serial`] gives,
//! byte for byte (the differential proptests in `tests/parallel.rs` check it on 1, 2 and
//! 8 threads).
//!
//! # Cutting the block
//!
//! The first chunk runs for real on the calling thread, exactly as the serial executor
//! would run it; every later chunk is speculated on the executor's own pool. A speculated
//! transaction costs more than a real one (it logs every read and write, and samples its
//! reads), so the first chunk's share is learned from the blocks before ([`FirstShare`]:
//! the median of the shares at which the last blocks' chunks would have finished
//! together). The second chunk's speculator applies that share when it starts, to what
//! the caller has not claimed yet ([`Cut`]): until then the caller runs on into the
//! second chunk, so a speculator that starts late leaves the caller more of the block.
//!
//! # Speculating
//!
//! The pool has one thread fewer than the executor executes on, since the caller runs the
//! first chunk; its threads live across blocks, and so do their allocator caches. (On
//! rayon's global pool, a thread per core with the caller on top, the idle third thread
//! spun in `sched_yield` beside the two executing ones and stole their cores.) Each later
//! chunk runs from the state before the block, on a diff of its own, so its transactions
//! see each other's writes. Every account and storage value a transaction reads goes into
//! one contiguous read log per chunk (`db::RecordingDb`) and every write into another
//! (`db::WriteLog`); both logs, like the change maps, are kept from block to block
//! (`db::Spare`), so they need not grow again. A speculator checks its first transactions'
//! reads against what the first chunk has written so far and stops when most no longer
//! hold (`chunk::ConflictSamples`): a block where every transaction pays one hot account
//! would only cost the committer a failed check per transaction. Every chunk sorts its
//! own changes as it finishes, on its own thread, the first chunk's thread and the
//! speculators side by side.
//!
//! # Committing in block order
//!
//! A chunk whose logged reads all still hold against the state committed before it, and
//! whose transactions fit the block's gas (the least gas left it needs was summed as it
//! ran: `chunk::ChunkGas`), computed exactly what serial execution computes, since revm is
//! deterministic in what it reads. It is taken whole: its receipts are recorded while its
//! sorted diff is merged in place into the first chunk's sorted list
//! (`StateDiff::append`, room reserved when the first chunk sorted), one linear pass over
//! two sorted lists. Reads of accounts, and of slots, that the merged changes' filters
//! have never seen pass without a search (`db::SortedChanges`). The reads are checked on
//! the calling thread alone: a check split across threads cost more in hand-offs than it
//! saved.
//!
//! From the first chunk that fails that check on, transactions are committed one by one
//! on the committer's hash map: a speculation whose reads still hold, and that read
//! nothing a left-out or re-executed transaction of its chunk wrote (`chunk::Tainted`),
//! is applied; any other transaction is executed again on the committed state. So the
//! result equals [`execute_serial`]'s for any block and any thread count: every result
//! applied was computed from the values serial execution reads.
//!
//! Independent transactions (transfers between distinct accounts, token transfers to
//! distinct holders) cost each thread its share of the execution plus one merge; a block
//! where every transaction touches one hot account costs about what serial execution
//! does, since the first chunk runs for real while the others speculate in vain.
//!
//! # Hand-offs and idle time
//!
//! The calling thread is not one of the pool's, so it spins a little for the jobs it
//! handed out (`threads::Spawned`) rather than sleep in rayon's scope and be woken late;
//! for the same reason a pool thread whose job another follows closely (speculator →
//! merge → the block's roots → the commit stage's halves) waits for it awake, running it
//! as it comes (`threads::linger`). Where the calling thread would wait (for a
//! speculator, for a merge), it hashes the receipts root's leaves whose receipts are
//! final (`ReceiptLeaves`, skipped by [`ExecutionOutcome::roots`]), and the thread that
//! merged the last chunk tells the roots whether the block wrote any slot (`SlotsHint`),
//! so they lay out the state's units without reading every change again. The roots
//! themselves are hashed on the executor's threads ([`LeafHasher`] for
//! [`ParallelExecutor`]). Both executing loops hint the next transaction's sender and
//! recipient to the state (`StateReader::prefetch_account`), so that the state layers
//! load the bloom line they will test.
//!
//! # Fees and revm's shared values
//!
//! Every transaction credits its priority fee to the proposer as it ends, as on
//! Ethereum. Runs for real (the first chunk, re-executions) credit it themselves;
//! speculative runs do not (a custom revm handler, see `evm`), or every pair of
//! transactions would conflict on the proposer's account. The committer credits a
//! speculated run's fee as it applies it, or, for chunks committed whole, once those
//! chunks are done (or before the first transaction committed one by one). A
//! transaction that read the proposer's account is thereby checked against it with every
//! earlier fee credited, and re-executed if that differs (`chunk::CoinbaseReads`);
//! transactions that never touch the proposer stay parallel. Analysed contract code is cached per database for the block, and each
//! database has an empty code of its own for accounts without code: revm's
//! `Bytecode::default()` is one `Arc` for the process, and two threads cloning it on every
//! account load bounced its count between their cores. For the same reason an address the
//! state does not hold is handed to revm as an empty account carrying that code, not as
//! `None`; under the rules this chain runs (post-EIP-161, no EIP-7702) revm treats the two
//! alike.
//!
//! # Modules
//!
//! - `share`: how the block is cut ([`FirstShare`], [`shared_chunks`]).
//! - `cut`: where the first chunk ends ([`Cut`]).
//! - `chunk`: speculating a chunk and committing it, whole or one by one.
//! - `threads`: the hand-offs between the caller and the pool.
//!
//! [`execute_serial`]: crate::execute_serial
//! [`LeafHasher`]: stave_primitives::LeafHasher

mod chunk;
mod cut;
mod share;
mod threads;

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use alloy_primitives::B256;
use parking_lot::RwLock;
use stave_primitives::{LeafHasher, SerialLeaves, SlotsHint};

use crate::{
    db::{BlockDb, Changes, ChunkLogs, Overlay, RecordingDb, SortedChanges, Spare},
    env::BlockInput,
    error::ExecError,
    evm::{FeeHandler, block_evm},
    serial::{ExecutionOutcome, Tally, execute_serial_on},
};

use self::{
    chunk::{SpeculatedChunk, chunk_holds, commit_one_by_one, record_whole_chunk, speculate_chunk},
    cut::Cut,
    share::{FirstShare, shared_chunks},
    threads::{LINGER_FOR, Spawned, linger, side_by_side},
};

/// Executes blocks on several threads, one contiguous chunk of the block each.
///
/// The chunks after the first run on a pool of the executor's own with one thread fewer
/// than it executes on, since the caller runs the first. On rayon's global pool (a thread
/// per core, the caller's thread on top) the worker that picked up a speculator woke
/// the idle one, which spun in `sched_yield` while both cores executed, and the executing
/// threads were switched out for a large part of their chunks.
#[derive(Debug, Clone)]
pub struct ParallelExecutor {
    /// Runs the chunks after the first; `None` on one thread.
    pool: Option<Arc<rayon::ThreadPool>>,
    /// The change maps of earlier blocks, emptied, for the next.
    spare: Arc<Spare<Changes>>,
    /// The speculators' logs of earlier blocks, emptied, for the next.
    logs: Arc<Spare<ChunkLogs>>,
    /// How much of a block the first chunk takes.
    share: Arc<FirstShare>,
}

impl ParallelExecutor {
    /// An executor on `threads` threads in all, the caller's included (at least 1); fails
    /// when the operating system refuses to start them.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let pool = if threads > 1 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads - 1)
                .thread_name(|i| format!("stave-exec-{i}"))
                .build()
                .map_err(std::io::Error::other)?;
            Some(Arc::new(pool))
        } else {
            None
        };
        Ok(Self {
            pool,
            spare: Arc::default(),
            logs: Arc::default(),
            share: Arc::new(FirstShare::new(threads)),
        })
    }

    /// Threads that execute, the caller's included.
    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or(1, |pool| pool.current_num_threads() + 1)
    }

    /// Runs `there` on one of the executor's threads and `here` on the caller's, side by
    /// side (one after the other on one thread), for two independent halves of a stage
    /// between blocks, when the executor's threads are idle. `there` should not use rayon:
    /// on the executor's thread it would run on the executor's pool, not the global one.
    pub fn join<T: Send, H>(
        &self,
        there: impl FnOnce() -> T + Send,
        here: impl FnOnce() -> H,
    ) -> (T, H) {
        match &self.pool {
            Some(pool) => side_by_side(pool, there, |_| here()),
            None => (there(), here()),
        }
    }

    /// Executes `input`'s transactions on its state; the result equals
    /// [`crate::execute_serial`]'s.
    pub fn execute(&self, input: BlockInput<'_>) -> Result<ExecutionOutcome, ExecError> {
        let BlockInput {
            state: base,
            env,
            txs,
            mode,
        } = input;
        let threads = self.threads();
        let chunks = shared_chunks(0..txs.len(), threads, self.share.get());
        let (Some(pool), Some((_, later))) = (
            &self.pool,
            chunks
                .split_first()
                .filter(|(_, later)| !later.is_empty() && Cut::fits(txs.len())),
        ) else {
            return self.execute_one_thread(input);
        };
        let started = Instant::now();
        let spare = &*self.spare;
        let spare_logs = &*self.logs;
        let committed = RwLock::new(spare.take());
        let hits = AtomicU64::new(0);
        let overlay = Overlay::new(base, &committed, &hits);
        let mut evm = block_evm(BlockDb::new(overlay), env);
        let mut handler = FeeHandler::crediting();
        let mut tally = Tally::new(env.header, mode, txs.len());
        // Each speculating thread counts its own reads served by block changes: one shared
        // counter would bounce its cache line between cores on every such read.
        let chunk_hits: Vec<AtomicU64> = later.iter().map(|_| AtomicU64::default()).collect();
        let mut speculated: Vec<Option<Result<SpeculatedChunk, ExecError>>> =
            later.iter().map(|_| None).collect();
        let gave_up = &AtomicBool::new(false);
        // Speculators run on the executor's pool, whose threads (and their allocator
        // caches) live across blocks; the first chunk runs here, then sorts its changes
        // while the speculators sort theirs, unless one gave up (its chunk will be
        // committed one by one, on the hash map). The first chunk may run on into the
        // second until the second's speculator starts and cuts between them.
        let cut = &Cut::new(later[0].end);
        let speculators = Spawned::default();
        let first_ran = pool.in_place_scope(|scope| {
            for (position, ((planned, hits), slot)) in later
                .iter()
                .zip(&chunk_hits)
                .zip(&mut speculated)
                .enumerate()
            {
                speculators.spawn(scope, move || {
                    let range = if position == 0 {
                        // Where the planned cut would leave the two chunks' shares of the
                        // transactions the caller has not claimed yet.
                        let (first_end, end) = (planned.start, planned.end);
                        cut.cut(|claimed| claimed + (end - claimed) * first_end / end)..end
                    } else {
                        planned.clone()
                    };
                    let mut changes = RwLock::new(spare.take());
                    let own = Overlay::new(base, &changes, hits);
                    let ChunkLogs { reads, writes } = spare_logs.take();
                    let evm = block_evm(RecordingDb::new(own, reads), env);
                    let runs = speculate_chunk(evm, writes, overlay, gave_up, txs, range.clone());
                    *slot = Some(runs.map(|(runs, logs, gas, coinbase)| SpeculatedChunk {
                        range: range.clone(),
                        runs,
                        logs,
                        gas,
                        coinbase,
                        diff: changes.get_mut().take_diff(0),
                        took: started.elapsed(),
                    }));
                    spare.keep(changes.into_inner());
                    // This thread will most likely merge the chunk: it waits awake, unless
                    // a speculator gave up (the chunks are then committed one by one).
                    if !gave_up.load(Ordering::Relaxed) {
                        linger(pool, LINGER_FOR);
                    }
                });
            }
            let ran = tally
                .execute_in_order(&mut evm, &mut handler, txs, cut.claims())
                .map(|()| {
                    // Room for the later chunks' changes to be merged in place: two
                    // accounts a transaction (a transfer's sender and recipient). A block
                    // whose later transactions change more grows the list once, in the merge.
                    let room = 2 * (txs.len() - cut.end());
                    (!gave_up.load(Ordering::Relaxed)).then(|| {
                        (
                            SortedChanges::new(overlay.take_diff(room)),
                            started.elapsed(),
                        )
                    })
                });
            // Waiting for a speculator, this thread hashes its chunk's receipts ahead.
            while !speculators.done() && tally.hash_receipt_leaf() {}
            speculators.wait();
            ran
        });
        let first_ran = first_ran?;
        let speculated = speculated
            .into_iter()
            .map(|chunk| chunk.expect("the scope ran every speculator"))
            .collect::<Result<Vec<_>, _>>()?;
        // The block's changes so far: sorted while chunks are merged whole, or else in
        // the committer's hash map (`overlay`).
        let mut block = first_ran.map(|(sorted, took)| {
            if let Some(slowest) = speculated.iter().max_by_key(|chunk| chunk.took) {
                self.share.learn(
                    threads,
                    (cut.end(), took),
                    (slowest.range.len(), slowest.took),
                );
            }
            sorted
        });
        let hits_in_chunks: u64 = chunk_hits.iter().map(|h| h.load(Ordering::Relaxed)).sum();
        hits.fetch_add(hits_in_chunks, Ordering::Relaxed);
        let mut whole = true;
        // Learned by the thread that merges the last chunk, if it merges whole.
        let mut slots = SlotsHint::Unknown;
        let chunks_left = speculated.len();
        for (index, chunk) in speculated.into_iter().enumerate() {
            // Nothing is checked against the changes after the last chunk is merged.
            let checked_after = index + 1 < chunks_left;
            whole = whole
                && match &block {
                    Some(sorted) => chunk_holds(&chunk, &tally, sorted),
                    None => overlay.with_changes(|changes| chunk_holds(&chunk, &tally, changes)),
                };
            if whole {
                // The receipts and the diff, side by side.
                let SpeculatedChunk {
                    range,
                    runs,
                    logs,
                    diff,
                    ..
                } = chunk;
                let mut sorted = block
                    .take()
                    .unwrap_or_else(|| SortedChanges::new(overlay.take_diff(0)));
                let (merged_slots, recorded) = side_by_side(
                    pool,
                    || {
                        sorted.append(diff, checked_after);
                        // The block's changes are all here, in this core's cache.
                        let slots = if checked_after {
                            SlotsHint::Unknown
                        } else {
                            sorted.slots()
                        };
                        // The next chunk's merge, or the block's roots, comes next.
                        linger(pool, LINGER_FOR);
                        slots
                    },
                    |merged| {
                        let recorded = record_whole_chunk(&mut tally, range, runs);
                        // Then receipts are hashed ahead until the merge is done.
                        while !merged() && tally.hash_receipt_leaf() {}
                        recorded
                    },
                );
                recorded?;
                spare_logs.keep(logs);
                block = Some(sorted);
                slots = merged_slots;
            } else {
                if let Some(sorted) = block.take() {
                    overlay.replace(Changes::from_diff(sorted.into_diff()));
                }
                // One by one, each read of the proposer is checked against its account
                // with every fee before it credited.
                tally.credit_fees(&overlay)?;
                let logs = commit_one_by_one(&mut evm, &mut handler, &mut tally, txs, chunk)?;
                spare_logs.keep(logs);
            }
        }
        overlay.report_hits();
        let diff = block.map_or_else(|| overlay.take_diff(0), SortedChanges::into_diff);
        spare.keep(committed.into_inner());
        tally.finish(base, diff, slots)
    }

    /// Executes `input` on the calling thread alone, as [`crate::execute_serial`] does,
    /// with the executor's spare change map.
    pub fn execute_one_thread(&self, input: BlockInput<'_>) -> Result<ExecutionOutcome, ExecError> {
        let changes = RwLock::new(self.spare.take());
        let outcome = execute_serial_on(&changes, input);
        self.spare.keep(changes.into_inner());
        outcome
    }
}

/// Parts a list of leaves is cut into per executing thread: the threads take parts in
/// turn until none are left, so leaves that cost more (a state leaf is far longer than a
/// receipt leaf), a thread woken late or one switched out leave no thread idle for long
/// at the end.
const LEAF_PARTS_PER_THREAD: usize = 4;

/// A block's roots are hashed on the executor's threads, the caller's among them, each
/// taking the next part not yet taken: the keccak of a block's changed accounts is too
/// much for one thread.
impl LeafHasher for ParallelExecutor {
    fn parts(&self) -> usize {
        self.threads() * LEAF_PARTS_PER_THREAD
    }

    fn hash_parts(
        &self,
        parts: usize,
        hash_part: &(dyn Fn(usize) -> Vec<B256> + Sync),
    ) -> Vec<Vec<B256>> {
        let Some(pool) = &self.pool else {
            return SerialLeaves.hash_parts(parts, hash_part);
        };
        let next = AtomicUsize::new(0);
        let hashed: Vec<OnceLock<Vec<B256>>> = (0..parts).map(|_| OnceLock::new()).collect();
        let take_parts = || {
            loop {
                let part = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = hashed.get(part) else { break };
                // Each index is taken once, so each slot is set once.
                let _ = slot.set(hash_part(part));
            }
        };
        let helpers = Spawned::default();
        pool.in_place_scope(|scope| {
            for _ in 0..pool.current_num_threads().min(parts.saturating_sub(1)) {
                helpers.spawn(scope, || {
                    take_parts();
                    // The commit stage's halves ([`ParallelExecutor::join`]) come next.
                    linger(pool, LINGER_FOR);
                });
            }
            take_parts();
            helpers.wait();
        });
        hashed
            .into_iter()
            .map(|part| part.into_inner().expect("every part was taken and hashed"))
            .collect()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_hashed_on_the_executors_threads_equal_roots_hashed_on_one() {
        let encode = |item: &u64, out: &mut Vec<u8>| out.extend_from_slice(&item.to_be_bytes());
        for len in [0, 31, 600, 5000] {
            let items: Vec<u64> = (0..len).collect();
            let serial = stave_primitives::chunked_root(&items, encode, &SerialLeaves);
            for threads in [1, 2, 3] {
                let executor = ParallelExecutor::new(threads).expect("threads");
                assert_eq!(executor.parts(), threads * LEAF_PARTS_PER_THREAD);
                for parts in [1, threads, executor.parts()] {
                    let hashed =
                        executor.hash_parts(parts, &|part| vec![B256::with_last_byte(part as u8)]);
                    let expected: Vec<Vec<B256>> = (0..parts)
                        .map(|part| vec![B256::with_last_byte(part as u8)])
                        .collect();
                    assert_eq!(hashed, expected, "each part hashed once, in order");
                }
                let root = stave_primitives::chunked_root(&items, encode, &executor);
                assert_eq!(root, serial, "{len} items on {threads} threads");
            }
        }
    }
}
