//! The parallel executor: cut the block into one contiguous chunk per thread, run every
//! chunk at once, then check the chunks against each other in block order. Needs no
//! conflict declarations from contracts.
//!
//! - The first chunk runs for real on the calling thread, exactly as the serial executor
//!   would run it. It ends where the second chunk's speculator cuts when it starts, from
//!   how far the caller has got (`Cut`), so a speculator that starts late leaves the
//!   caller more of the block.
//! - Every later chunk is speculated on the executor's own pool (threads that live across
//!   blocks), from the state before the block. Its transactions see each other's writes
//!   (the chunk keeps its own diff), and each one logs the value of every account and
//!   storage slot it read. A speculator checks its first transactions' reads against what the first
//!   chunk has written so far and stops when most no longer hold (`ConflictSamples`).
//! - Then the chunks are committed in order. A chunk whose logged reads all still hold in
//!   the state committed before it, and whose transactions fit the block's gas (the
//!   least gas left it needs was summed as it ran), computed exactly what serial
//!   execution computes (revm is deterministic in what it reads): its receipts are
//!   recorded while its diff is merged in whole. Every chunk sorts its changes as it
//!   finishes (the first chunk's thread and the speculators side by side), so merging a
//!   whole chunk is one linear pass over two sorted lists.
//! - From the first chunk that fails that check on, transactions are committed one by
//!   one: a speculation whose reads still hold against the state committed so far is
//!   applied, any other transaction is executed again on that state.
//! - Where the calling thread would wait (for a speculator, for a merge), it hashes the
//!   receipts root's leaves whose receipts are final, so fewer are left for the roots.
//!   A speculator's thread, done, waits awake for the merge it will run, the merging
//!   thread for the block's roots, and the roots' for the commit stage (`linger`).
//!
//! So the result equals [`execute_serial`]'s for any block and any thread count: every
//! result applied was computed from the values serial execution reads. Independent
//! transactions (transfers between distinct accounts, token transfers to distinct
//! holders) cost each thread its share of the execution plus one merge; a block where
//! every transaction touches one hot account costs about what serial execution does,
//! since the first chunk runs for real while the others speculate in vain.
//!
//! The proposer's fee credit is deferred to the end of the block (see `evm`), so fees do
//! not make every pair of transactions conflict.
//!
//! [`execute_serial`]: crate::execute_serial

use std::{
    collections::{HashSet, VecDeque},
    ops::Range,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use parking_lot::{Mutex, RwLock};

use alloy_consensus::Transaction as _;
use alloy_primitives::{Address, B256};
use revm::context_interface::ContextTr;
use stave_primitives::{Header, LeafHasher, RecoveredTx, SerialLeaves, SlotsHint, StateDiff};

use crate::{
    db::{
        BlockDb, Changes, ChunkLogs, Committed, Overlay, Read, RecordingDb, Reusable,
        SortedChanges, Spare, WriteLog,
    },
    error::ExecError,
    evm::{BlockEvm, DeferredRewardHandler, TxRun, block_evm, run_tx},
    serial::{ExecutionOutcome, Mode, Tally, execute_serial_on},
    state::StateReader,
};

/// A speculative run of one transaction and where its reads sit in its chunk's read log
/// (its writes' place is in the run); `None` when the run hit an error, which committing
/// settles by executing the transaction for real.
type Speculation = Option<(Range<usize>, TxRun)>;

/// A chunk run ahead: one speculation per transaction, everything they read and wrote in
/// order (one log each, not one per transaction: the committer checks the reads from
/// another core, and a contiguous log streams there), and the chunk's own diff, sorted.
struct SpeculatedChunk {
    range: Range<usize>,
    runs: Vec<Speculation>,
    logs: ChunkLogs,
    /// The block gas that must be left before the chunk for all of it to fit.
    gas: ChunkGas,
    diff: StateDiff,
    /// From the start of the block's execution until the chunk was sorted.
    took: Duration,
}

/// What a speculator hands back: its runs, their logs and the gas they need.
type SpeculatorRuns = (Vec<Speculation>, ChunkLogs, ChunkGas);

/// The block gas a speculated chunk needs left before it, summed where it ran (the
/// committer would otherwise walk every transaction of the chunk from another core).
/// Each transaction fits when its gas limit is left after what the ones before it in
/// the block used; within the chunk that is its limit plus what the chunk's earlier
/// transactions used, so the whole chunk fits exactly when the gas left before it is at
/// least the largest such sum.
#[derive(Debug, Default)]
struct ChunkGas {
    /// Gas the chunk's transactions so far used.
    used: u64,
    /// The largest limit-plus-used-before so far.
    needed: u64,
    /// A transaction did not run (an error, or the speculator gave up): the chunk cannot
    /// be committed whole.
    incomplete: bool,
}

impl ChunkGas {
    /// Counts a transaction of gas limit `limit`, about to run after the chunk's earlier
    /// transactions.
    fn admit(&mut self, limit: u64) {
        self.needed = self.needed.max(self.used.saturating_add(limit));
    }

    /// Counts what the transaction just admitted did (`None`: it did not run).
    fn ran(&mut self, run: Option<&TxRun>) {
        match run {
            Some(TxRun::Executed { gas_used, .. }) => {
                self.used = self.used.saturating_add(*gas_used);
            }
            Some(TxRun::Invalid(_)) => {}
            None => self.incomplete = true,
        }
    }

    /// The speculator stopped before the chunk's end: it cannot be committed whole.
    fn stopped(&mut self) {
        self.incomplete = true;
    }

    /// True when the whole chunk fits in `gas_left`, every transaction having run.
    fn fits(&self, gas_left: u64) -> bool {
        !self.incomplete && self.needed <= gas_left
    }
}

/// Runs transactions `range` of `txs` on `evm`, each on the state the ones before it in
/// the chunk left (the chunk's own diff over the state before the block, which `evm`'s
/// database reads and logs), writing into `writes` (empty). Gives up early (the rest of
/// the chunk unspeculated, and `gave_up` set) when samples show the chunk conflicting
/// with what the first chunk, running for real on `committed`, has already written.
fn speculate_chunk(
    mut evm: BlockEvm<RecordingDb<'_>>,
    mut writes: WriteLog,
    committed: Overlay<'_>,
    gave_up: &AtomicBool,
    txs: &[RecoveredTx],
    range: Range<usize>,
) -> Result<SpeculatorRuns, ExecError> {
    let overlay = evm.ctx.db().overlay;
    let mut handler = DeferredRewardHandler::default();
    let mut samples = ConflictSamples::default();
    let mut runs = Vec::with_capacity(range.len());
    let mut gas = ChunkGas::default();
    let upcoming = &txs[..range.end];
    for (position, index) in range.clone().enumerate() {
        evm.ctx.db().overlay.prefetch_next(upcoming, index);
        let start = evm.ctx.db().reads.len();
        gas.admit(txs[index].tx.envelope().gas_limit());
        let run = run_tx(&mut evm, &mut handler, &txs[index], index, &mut writes);
        let reads = start..evm.ctx.db().reads.len();
        gas.ran(run.as_ref().ok());
        let Ok(run) = run else {
            runs.push(None);
            continue;
        };
        if let TxRun::Executed {
            writes: written, ..
        } = &run
        {
            overlay.apply(&writes, written.clone());
        }
        if position < ConflictSamples::POSITIONS {
            // Never wait for the first chunk's writes: a busy lock skips the sample.
            let logged = &evm.ctx.db().reads[reads.clone()];
            let sample = committed.try_with_changes(|changes| all_hold(logged, changes));
            if let Some(holds) = sample
                && samples.observe(holds)
            {
                gave_up.store(true, Ordering::Relaxed);
                gas.stopped();
                break;
            }
        }
        runs.push(Some((reads, run)));
    }
    runs.resize_with(range.len(), || None);
    let reads = std::mem::take(&mut evm.ctx.db_mut().reads);
    Ok((runs, ChunkLogs { reads, writes }, gas))
}

/// The reads of a speculated chunk's first transactions, checked against what the first
/// chunk has written so far. A read that no longer holds dooms its transaction's
/// speculation; when most samples are doomed (every transaction pays one hot account, say),
/// speculating on would only cost the committer a failed validation per transaction, so
/// the speculator stops. Only the first transactions are sampled: each check reads the
/// first chunk's state while that thread writes it.
#[derive(Default)]
struct ConflictSamples {
    checked: u32,
    doomed: u32,
}

impl ConflictSamples {
    /// How many of a chunk's first transactions are sampled.
    const POSITIONS: usize = 16;

    /// Counts one sample; true when the chunk should be given up.
    fn observe(&mut self, holds: bool) -> bool {
        self.checked += 1;
        self.doomed += u32::from(!holds);
        self.checked >= 8 && self.doomed * 2 > self.checked
    }
}

/// True when every logged read still gives the same value after the `committed` changes
/// (stops at the first that does not).
fn all_hold(reads: &[Read], committed: &impl Committed) -> bool {
    reads.iter().all(|read| read.holds(committed))
}

/// Transactions `range` split into `parts` contiguous chunks as even as can be.
fn chunks(range: Range<usize>, parts: usize) -> Vec<Range<usize>> {
    let len = range.len();
    (0..parts)
        .map(|part| range.start + len * part / parts..range.start + len * (part + 1) / parts)
        .filter(|chunk| !chunk.is_empty())
        .collect()
}

/// Transactions `range` split into `parts` contiguous chunks: the first `share` of them
/// (in [`FirstShare::ONE`]ths) in the first, the rest as even as can be.
fn shared_chunks(range: Range<usize>, parts: usize, share: u32) -> Vec<Range<usize>> {
    if parts < 2 {
        return chunks(range, parts);
    }
    let first_end = range.start + range.len() * share as usize / FirstShare::ONE as usize;
    let mut all = chunks(range.start..first_end, 1);
    all.extend(chunks(first_end..range.end, parts - 1));
    all
}

/// The first chunk's share of a block, learned from the blocks before it. The first chunk
/// runs for real, while the others speculate, log every read and write and check samples
/// of their reads, so a speculated transaction may cost more than a real one, and more so
/// while a new executor's logs grow. It starts from [`FirstShare::SPECULATION_COST`]; each
/// block whose chunks all ran tells the share at which they would have finished together,
/// and the next block's first chunk gets the median of the last [`FirstShare::BLOCKS`].
///
/// A median, not an average: a block executed beside other work (the node's import
/// pipeline flushes state layers to disk meanwhile) comes out 0.3-3.5 ms unbalanced, its
/// speculator slow; it is an odd block out, and should not move the share of the blocks
/// that follow it alone. `stave bench pipeline` (2,500 transfers a block, 10 runs each)
/// runs one such block before every four alone (its pipelined import, then the staged
/// one). When each block moved the share half way to its own, the four alone were
/// unbalanced by a median of 153-206 µs; with the median of 7, 114-178 µs.
#[derive(Debug)]
struct FirstShare {
    /// The share before any block was learned from.
    initial: u32,
    /// The shares the last blocks (at most [`FirstShare::BLOCKS`]) would have finished
    /// together with, oldest first.
    recent: Mutex<VecDeque<u32>>,
}

impl FirstShare {
    /// The whole block.
    const ONE: u32 = 1 << 16;
    /// Transactions a chunk needs for its time to say anything.
    const MIN_TXS: usize = 64;
    /// What a speculated transaction costs, in real ones, until blocks say otherwise.
    /// Measured on 2,500-transaction blocks, 2 threads, bench-fast: 1.0-1.16 in a new
    /// executor's first blocks (the chunks would have finished together with 51-54% of
    /// the block in the first), 1.0-1.04 once its logs have grown (50-51%), for transfers
    /// and ERC-20 transfers alike.
    const SPECULATION_COST: f64 = 1.1;
    /// Blocks the share is the median of: the odd blocks out among them do not move it
    /// while they are fewer than half, and a lasting change moves it within four blocks.
    const BLOCKS: usize = 7;

    /// The share at which the chunks would finish together on `threads` threads if a
    /// speculated transaction cost [`FirstShare::SPECULATION_COST`].
    fn new(threads: usize) -> Self {
        let share = Self::balanced(threads.max(1), 1.0, 1.0 / Self::SPECULATION_COST);
        Self {
            initial: (share * f64::from(Self::ONE)) as u32,
            recent: Mutex::new(VecDeque::with_capacity(Self::BLOCKS + 1)),
        }
    }

    /// The first chunk's share (of 1) at which it and `threads - 1` others finish
    /// together, when it runs `first_rate` transactions a second and they `later_rate`.
    fn balanced(threads: usize, first_rate: f64, later_rate: f64) -> f64 {
        first_rate / (first_rate + (threads - 1) as f64 * later_rate)
    }

    /// The share the next block's first chunk gets.
    fn get(&self) -> u32 {
        let mut recent: Vec<u32> = self.recent.lock().iter().copied().collect();
        recent.sort_unstable();
        recent
            .get(recent.len() / 2)
            .copied()
            .unwrap_or(self.initial)
    }

    /// Learns from a block on `threads` threads whose first chunk of `first` transactions
    /// was done after `first_took`, and whose slowest other chunk, of `later`
    /// transactions, after `later_took`.
    fn learn(
        &self,
        threads: usize,
        (first, first_took): (usize, Duration),
        (later, later_took): (usize, Duration),
    ) {
        if threads < 2 || first.min(later) < Self::MIN_TXS {
            return;
        }
        let first_rate = first as f64 / first_took.as_secs_f64().max(1e-9);
        let later_rate = later as f64 / later_took.as_secs_f64().max(1e-9);
        let one = f64::from(Self::ONE);
        // Never less than half an even share, nor more than three quarters of the block.
        let balanced = (Self::balanced(threads, first_rate, later_rate) * one)
            .clamp(one / (2 * threads) as f64, one * 0.75);
        let mut recent = self.recent.lock();
        recent.push_back(balanced as u32);
        if recent.len() > Self::BLOCKS {
            recent.pop_front();
        }
    }
}

/// Executes blocks on several threads, one contiguous chunk of the block each.
///
/// The chunks after the first run on a pool of the executor's own with one thread fewer
/// than it executes on, since the caller runs the first. On rayon's global pool (a thread
/// per core, the caller's thread on top) the worker that picked up a speculator woke
/// the idle one, which spun in `sched_yield` while both cores executed: the executing
/// threads were each switched out for ~3 ms of an 11 ms chunk (ERC-20, 2 cores,
/// `perf record -e sched:sched_switch`).
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

    /// Executes `txs` on `base` under `header`; the result equals [`crate::execute_serial`]'s.
    pub fn execute(
        &self,
        base: &dyn StateReader,
        chain_id: u64,
        header: &Header,
        txs: &[RecoveredTx],
        mode: Mode,
    ) -> Result<ExecutionOutcome, ExecError> {
        let threads = self.threads();
        let chunks = shared_chunks(0..txs.len(), threads, self.share.get());
        let (Some(pool), Some((_, later))) = (
            &self.pool,
            chunks
                .split_first()
                .filter(|(_, later)| !later.is_empty() && Cut::fits(txs.len())),
        ) else {
            return self.execute_one_thread(base, chain_id, header, txs, mode);
        };
        let started = Instant::now();
        let spare = &*self.spare;
        let spare_logs = &*self.logs;
        let committed = RwLock::new(spare.take());
        let hits = AtomicU64::new(0);
        let overlay = Overlay::new(base, &committed, &hits);
        let mut evm = block_evm(BlockDb::new(overlay), chain_id, header);
        let mut handler = DeferredRewardHandler::default();
        let mut tally = Tally::new(header, mode, txs.len());
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
                    let evm = block_evm(RecordingDb::new(own, reads), chain_id, header);
                    let runs = speculate_chunk(evm, writes, overlay, gave_up, txs, range.clone());
                    *slot = Some(runs.map(|(runs, logs, gas)| SpeculatedChunk {
                        range: range.clone(),
                        runs,
                        logs,
                        gas,
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
                let logs = commit_one_by_one(&mut evm, &mut handler, &mut tally, txs, chunk)?;
                spare_logs.keep(logs);
            }
        }
        overlay.report_hits();
        let diff = block.map_or_else(|| overlay.take_diff(0), SortedChanges::into_diff);
        spare.keep(committed.into_inner());
        tally.finish(base, diff, slots)
    }

    /// Executes `txs` on `base` under `header` on the calling thread alone, as
    /// [`crate::execute_serial`] does, with the executor's spare change map.
    pub fn execute_one_thread(
        &self,
        base: &dyn StateReader,
        chain_id: u64,
        header: &Header,
        txs: &[RecoveredTx],
        mode: Mode,
    ) -> Result<ExecutionOutcome, ExecError> {
        let changes = RwLock::new(self.spare.take());
        let outcome = execute_serial_on(&changes, base, chain_id, header, txs, mode);
        self.spare.keep(changes.into_inner());
        outcome
    }
}

/// Parts a list of leaves is cut into per executing thread: the threads take parts in
/// turn until none are left, so leaves that cost more (a receipt leaf of 32 transfers is
/// ~320 bytes, a state leaf ~3 KB), a thread woken late or one switched out leave no
/// thread idle for long at the end.
const LEAF_PARTS_PER_THREAD: usize = 4;

/// A block's roots are hashed on the executor's threads, the caller's among them, each
/// taking the next part not yet taken: a block's 5,000 changed accounts take ~1.1 ms of
/// keccak on one thread.
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

/// True when the whole chunk can be committed as it was speculated: every transaction
/// ran, they fit the block's gas in turn, and read what the committed state holds now.
///
/// The reads are checked on this thread alone: the filters of [`SortedChanges`] answer
/// most in a few nanoseconds, and halving the check across the executor's threads took
/// 100-160 µs a block of transfers where this thread alone takes 25-30.
fn chunk_holds(chunk: &SpeculatedChunk, tally: &Tally<'_>, committed: &impl Committed) -> bool {
    chunk.gas.fits(tally.gas_left()) && all_hold(&chunk.logs.reads, committed)
}

/// Runs `there` on `pool` and `here` on this thread, and returns both results. Unlike
/// `pool.join` called from outside the pool, the calling thread works too. `here` is
/// handed a probe that tells whether `there` is done, to stop work it does meanwhile.
fn side_by_side<T: Send, H>(
    pool: &rayon::ThreadPool,
    there: impl FnOnce() -> T + Send,
    here: impl FnOnce(&dyn Fn() -> bool) -> H,
) -> (T, H) {
    let mut far = None;
    let spawned = Spawned::default();
    let near = pool.in_place_scope(|scope| {
        spawned.spawn(scope, || far = Some(there()));
        let near = here(&|| spawned.done());
        spawned.wait();
        near
    });
    (far.expect("the scope ran the spawned task"), near)
}

/// How long a pool thread that [`linger`]s waits awake for its next job.
const LINGER_FOR: Duration = Duration::from_micros(500);

/// Where a thread is in a [`linger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lingering {
    /// Not lingering.
    No,
    /// Waiting for its next job, or running it.
    Yes,
    /// The job it ran asked to linger again.
    Renewed,
}

thread_local! {
    static LINGERING: std::cell::Cell<Lingering> = const { std::cell::Cell::new(Lingering::No) };
}

/// Called at the end of a job on `pool` that another job on it follows closely (a
/// speculator by the merge, the merge by the block's roots, the roots by the commit
/// stage's halves): keeps the thread awake for `wait` ([`LINGER_FOR`]) in a job of its
/// own (the calling job ends, and the scope it belongs to can), running the next job as
/// it comes. A rayon worker left without work sleeps after a few yields, and a sleeping
/// thread came back 30-60 µs later (see [`Spawned`]). A job run while lingering that
/// lingers too extends the wait rather than nesting another.
///
/// `bench exec`, medians over 17 blocks of 2,500 transfers (11 of ERC-20 transfers), from
/// the check of a speculated chunk to the end of its merge: transfers 176-187 µs with the
/// speculators' threads left to sleep, 124-132 µs with them awake; ERC-20 transfers
/// 261-307 µs and 206-226 µs.
fn linger(pool: &rayon::ThreadPool, wait: Duration) {
    if LINGERING.with(|state| state.get()) != Lingering::No {
        LINGERING.with(|state| state.set(Lingering::Renewed));
        return;
    }
    pool.spawn(move || {
        LINGERING.with(|state| state.set(Lingering::Yes));
        let mut until = Instant::now() + wait;
        while Instant::now() < until {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {
                    let asked = LINGERING.with(|state| state.replace(Lingering::Yes));
                    if asked != Lingering::Renewed {
                        break;
                    }
                    until = Instant::now() + wait;
                }
                _ => std::hint::spin_loop(),
            }
        }
        LINGERING.with(|state| state.set(Lingering::No));
    });
}

/// Where the first chunk, run for real on the calling thread, ends and the second,
/// speculated on the pool, begins: decided by the second's speculator when it starts, from
/// how far the caller has got. Until then the caller runs on into the second chunk. A
/// speculator whose pool thread woke late (more than 300 µs after the block began in 41 of
/// 720 blocks of 2,500 transfers, 1.4 ms late on average, session 47) then leaves the caller
/// more of the block instead of the block waiting for the speculator's whole planned chunk
/// (most late starts here came with the caller stalled too, and cost their delay still).
/// Staged transfer blocks at 100,000 transactions (bench-fast timelines, 720 blocks each):
/// the chunks' sorted ends apart p10 / p90 −303 / +324 µs with the cut planned before the
/// block, −170 / +135 µs with the cut made at the speculator's start. Release pairs: transfer
/// execute 1.772 → 1.779x (8, 10,000 transactions) and 1.795 → 1.807x (4, 100,000),
/// ERC-20 1.809 → 1.809x (4), conflict 1.048 → 1.028x (11).
///
/// The caller claims a few transactions at a time and the speculator cuts once, both in one
/// word (claimed, end), so a claim never runs past the cut and the cut never falls before
/// a claim.
#[derive(Debug)]
struct Cut(AtomicU64);

impl Cut {
    /// Transactions the caller claims at a time.
    const STEP: u64 = 8;

    /// True when a block of `txs` transactions can be cut: each count fits half the word.
    fn fits(txs: usize) -> bool {
        u32::try_from(txs).is_ok()
    }

    /// Nothing claimed yet, and the caller may run up to `end` ([`Cut::fits`]).
    fn new(end: usize) -> Self {
        Self(AtomicU64::new(end as u64))
    }

    /// The word's halves: (claimed, end).
    fn split(word: u64) -> (u64, u64) {
        (word >> 32, word & u64::from(u32::MAX))
    }

    /// The caller's next transactions: up to [`Cut::STEP`] after those it claimed, none at
    /// or past the cut; empty once it has claimed up to it.
    fn claim(&self) -> Range<usize> {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let (claimed, end) = Self::split(word);
            let next = (claimed + Self::STEP).min(end);
            if next == claimed {
                return claimed as usize..claimed as usize;
            }
            match self.0.compare_exchange_weak(
                word,
                next << 32 | end,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return claimed as usize..next as usize,
                Err(now) => word = now,
            }
        }
    }

    /// Every transaction the caller claims, in order, until it has claimed up to the cut.
    fn claims(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::from_fn(|| Some(self.claim()).filter(|next| !next.is_empty())).flatten()
    }

    /// Cuts where `at` says for the transactions claimed so far, though never before them
    /// nor past where the caller may run, and returns the cut. Called once.
    fn cut(&self, at: impl Fn(usize) -> usize) -> usize {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let (claimed, end) = Self::split(word);
            let cut = (at(claimed as usize) as u64).clamp(claimed, end);
            match self.0.compare_exchange_weak(
                word,
                claimed << 32 | cut,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return cut as usize,
                Err(now) => word = now,
            }
        }
    }

    /// Where the caller stops: the cut, once made.
    fn end(&self) -> usize {
        Self::split(self.0.load(Ordering::Acquire)).1 as usize
    }
}

/// Jobs spawned on the executor's pool from the calling thread, which waits for them by
/// spinning before it leaves their scope. The calling thread is not one of the pool's: in
/// rayon's scope it sleeps until the last job ends, and a sleeping thread here came back
/// 30-60 µs after it (a futex wake and an inter-processor interrupt on a virtual
/// machine), at up to three hand-offs a block.
#[derive(Debug, Default)]
struct Spawned(AtomicUsize);

impl Spawned {
    /// How long the calling thread spins before it lets the scope put it to sleep: about
    /// the gap between two chunks of a transfer block that finish apart.
    const SPIN_FOR: Duration = Duration::from_micros(300);

    /// Spawns `job` in `scope`, counted until it has run.
    fn spawn<'scope>(
        &'scope self,
        scope: &rayon::Scope<'scope>,
        job: impl FnOnce() + Send + 'scope,
    ) {
        self.0.fetch_add(1, Ordering::Relaxed);
        scope.spawn(move |_| {
            job();
            self.0.fetch_sub(1, Ordering::Release);
        });
    }

    /// True when every spawned job has run.
    fn done(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// Spins until every spawned job has run, or for [`Spawned::SPIN_FOR`] at most.
    fn wait(&self) {
        let started = Instant::now();
        while !self.done() && started.elapsed() < Self::SPIN_FOR {
            std::hint::spin_loop();
        }
    }
}

/// Records the receipts of a chunk that [`chunk_holds`] accepted (its diff is merged
/// whole, so the writes are dropped).
fn record_whole_chunk(
    tally: &mut Tally<'_>,
    range: Range<usize>,
    runs: Vec<Speculation>,
) -> Result<(), ExecError> {
    for (index, run) in range.zip(runs) {
        if let Some((_, run)) = run {
            tally.record(index, run)?;
        }
    }
    Ok(())
}

/// Commits a chunk transaction by transaction: a speculation whose reads still hold is
/// applied, anything else is executed again on the committed state. Hands back the
/// chunk's logs, to keep.
fn commit_one_by_one<'db>(
    evm: &mut BlockEvm<BlockDb<'db>>,
    handler: &mut DeferredRewardHandler<BlockEvm<BlockDb<'db>>>,
    tally: &mut Tally<'_>,
    txs: &[RecoveredTx],
    chunk: SpeculatedChunk,
) -> Result<ChunkLogs, ExecError> {
    let SpeculatedChunk {
        range, runs, logs, ..
    } = chunk;
    let mut tainted = Tainted::default();
    // The writes of transactions executed again, applied at once.
    let mut rewrites = WriteLog::default();
    for (index, speculation) in range.zip(runs) {
        let tx = &txs[index];
        if !tally.fits(index, tx)? {
            tainted.add(&speculation, &logs.writes);
            continue;
        }
        let overlay = evm.ctx.db_mut().overlay;
        let holds = match &speculation {
            Some((logged, _)) => {
                let logged = &logs.reads[logged.clone()];
                !tainted.read_by(logged)
                    && overlay.with_changes(|changes| all_hold(logged, changes))
            }
            None => false,
        };
        match speculation {
            Some((_, run)) if holds => tally.commit(index, run, &logs.writes, evm.ctx.db_mut())?,
            speculation => {
                tainted.add(&speculation, &logs.writes);
                rewrites.clear();
                let run = run_tx(evm, handler, tx, index, &mut rewrites)?;
                tally.commit(index, run, &rewrites, evm.ctx.db_mut())?;
            }
        }
    }
    Ok(logs)
}

/// Accounts a speculator's chunk holds values of that were never committed: written by
/// a speculation that was left out (block gas) or executed again. A later speculation of
/// the chunk that read one of them may have read a value serial execution never
/// produced, and the committed state cannot tell (the key may be one no committed
/// transaction wrote), so it is executed again too.
#[derive(Default)]
struct Tainted(HashSet<Address>);

impl Tainted {
    /// Taints every account `speculation` wrote into its chunk (its writes sit in `log`).
    fn add(&mut self, speculation: &Speculation, log: &WriteLog) {
        if let Some((_, TxRun::Executed { writes, .. })) = speculation {
            self.0.extend(log.addresses(writes.clone()));
        }
    }

    /// True when one of `reads` is of a tainted account.
    fn read_by(&self, reads: &[Read]) -> bool {
        !self.0.is_empty() && reads.iter().any(|read| self.0.contains(&read.address()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speculator_stops_when_most_of_at_least_eight_samples_are_doomed() {
        let stops_after = |outcomes: &[bool]| {
            let mut samples = ConflictSamples::default();
            outcomes.iter().position(|holds| samples.observe(*holds))
        };
        assert_eq!(stops_after(&[false; 16]), Some(7));
        // One hot payment in five (the mixed workload) keeps it going.
        let mixed: Vec<bool> = (0..16).map(|i| i % 5 != 2).collect();
        assert_eq!(stops_after(&mixed), None);
        assert_eq!(
            stops_after(&[true, false, false, false, false, true, false, false]),
            Some(7)
        );
    }

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

    #[test]
    fn a_chunk_fits_by_its_summed_gas_exactly_when_each_transaction_fits_in_turn() {
        let executed = |gas_used| TxRun::Executed {
            writes: 0..0,
            success: true,
            gas_used,
            fee: alloy_primitives::U256::ZERO,
            logs: Vec::new(),
            bloom: None,
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % bound
        };
        let (mut fitting, mut not) = (0, 0);
        for _ in 0..2_000 {
            let runs: Vec<(u64, Option<TxRun>)> = (0..1 + next(6))
                .map(|_| {
                    let limit = 21_000 + next(80_000);
                    let run = match next(10) {
                        0 => None,
                        1 => Some(TxRun::Invalid("nonce".into())),
                        _ => Some(executed(limit - next(limit - 20_000))),
                    };
                    (limit, run)
                })
                .collect();
            let gas_left = 21_000 + next(400_000);
            let mut gas = ChunkGas::default();
            for (limit, run) in &runs {
                gas.admit(*limit);
                gas.ran(run.as_ref());
            }
            // The committer's walk, transaction by transaction.
            let mut left = gas_left;
            let walked = runs.iter().all(|(limit, run)| {
                let fits = run.is_some() && *limit <= left;
                if let Some(TxRun::Executed { gas_used, .. }) = run {
                    left = left.saturating_sub(*gas_used);
                }
                fits
            });
            let limits: Vec<u64> = runs.iter().map(|(limit, _)| *limit).collect();
            assert_eq!(
                gas.fits(gas_left),
                walked,
                "{gas_left} left, limits {limits:?}"
            );
            if walked {
                fitting += 1;
            } else {
                not += 1;
            }
        }
        assert!(fitting > 200 && not > 200, "{fitting} fit, {not} do not");
    }

    #[test]
    fn the_caller_claims_up_to_the_cut_and_the_cut_never_falls_before_a_claim() {
        let cut = Cut::new(30);
        assert_eq!(cut.claim(), 0..8);
        assert_eq!(cut.claim(), 8..16);
        assert_eq!(cut.cut(|claimed| claimed + 5), 21);
        assert_eq!(cut.claim(), 16..21);
        assert_eq!(cut.claim(), 21..21);
        assert_eq!(cut.end(), 21);
        // Before what was claimed: the cut is where the claims end.
        let near = Cut::new(30);
        assert_eq!(near.claim(), 0..8);
        assert_eq!(near.cut(|_| 3), 8);
        assert_eq!(near.claim(), 8..8);
        // Past where the caller may run: the cut is there.
        let far = Cut::new(30);
        assert_eq!(far.claim(), 0..8);
        assert_eq!(far.cut(|_| 99), 30);
        assert_eq!(far.end(), 30);

        // Cut while the caller claims, at all sorts of moments: its claims and the
        // speculator's range split the transactions exactly.
        for delay in 0..200 {
            let cut = Cut::new(1_000);
            let (claims, at) = std::thread::scope(|scope| {
                let caller = scope.spawn(|| cut.claims().collect::<Vec<_>>());
                for _ in 0..delay * 10 {
                    std::hint::spin_loop();
                }
                let at = cut.cut(|claimed| claimed + (1_000 - claimed) / 2);
                (caller.join().expect("the caller claims"), at)
            });
            assert_eq!(claims, (0..at).collect::<Vec<_>>(), "delay {delay}");
            assert_eq!(cut.end(), at);
        }
    }

    #[test]
    fn the_caller_spins_for_its_jobs_but_not_past_its_bound() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread");
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (mut quick, mut held) = (false, None);
        let spawned = Spawned::default();
        pool.in_place_scope(|scope| {
            spawned.spawn(scope, || quick = true);
            // A job that waits for this thread: the spin gives up after its bound, or
            // this thread would never release it.
            let held = &mut held;
            spawned.spawn(scope, move || {
                *held = Some(released.recv_timeout(Duration::from_secs(10)).is_ok());
            });
            let spinning = Instant::now();
            spawned.wait();
            assert!(spinning.elapsed() >= Spawned::SPIN_FOR);
            release.send(()).expect("the job waits");
        });
        assert!(quick);
        assert_eq!(held, Some(true), "released by this thread, not timed out");
        assert_eq!(spawned.0.into_inner(), 0, "every job counted out");
    }

    #[test]
    fn a_lingering_thread_runs_the_next_job_and_lingers_on_only_when_it_asks() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread");
        // Long enough for this thread to hand the next job over however late it wakes.
        let long = Duration::from_secs(10);
        let state = || pool.install(|| LINGERING.with(std::cell::Cell::get));
        pool.install(|| linger(&pool, long));
        assert_eq!(state(), Lingering::Yes, "run by the lingering thread");
        assert_eq!(state(), Lingering::No, "that job did not ask for more");
        pool.install(|| linger(&pool, long));
        let asked = pool.install(|| {
            linger(&pool, long);
            LINGERING.with(std::cell::Cell::get)
        });
        assert_eq!(asked, Lingering::Renewed, "no second linger nested");
        assert_eq!(state(), Lingering::Yes, "the linger went on");
        assert_eq!(state(), Lingering::No);
        pool.install(|| linger(&pool, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(state(), Lingering::No, "a linger ends on its own");
    }

    #[test]
    fn the_first_chunk_takes_its_share_and_the_others_split_the_rest() {
        let quarter = FirstShare::ONE / 4;
        for (len, parts, share, first) in [
            (100, 2, 3 * quarter, 75),
            (100, 3, quarter, 25),
            (101, 2, 2 * quarter, 50),
            (7, 1, quarter, 7),
        ] {
            let chunks = shared_chunks(5..5 + len, parts, share);
            let covered: Vec<usize> = chunks.iter().flat_map(|c| c.clone()).collect();
            assert_eq!(covered, (5..5 + len).collect::<Vec<_>>(), "{chunks:?}");
            assert_eq!(chunks.len(), parts);
            assert_eq!(chunks[0].len(), first, "{chunks:?}");
            let later = chunks[1..].iter().map(|c| c.len());
            let spread = later.clone().max().unwrap_or(0) - later.min().unwrap_or(0);
            assert!(spread <= 1, "{chunks:?}");
        }
    }

    #[test]
    fn the_first_share_moves_to_where_the_chunks_finish_together() {
        let ms = Duration::from_millis;
        let share = FirstShare::new(2);
        let of_one = |share: &FirstShare| f64::from(share.get()) / f64::from(FirstShare::ONE);
        let cost = FirstShare::SPECULATION_COST;
        assert!((of_one(&share) - cost / (1.0 + cost)).abs() < 0.001);
        // A block cut at the share learned so far, whose first chunk takes 2 ms a
        // transaction and whose later one `later_cost` ms.
        let block = |share: &FirstShare, later_cost: u64| {
            let first = (share.get() as usize * 2500).div_ceil(FirstShare::ONE as usize);
            let later = 2500 - first;
            share.learn(
                2,
                (first, ms(2 * first as u64)),
                (later, ms(later as u64 * later_cost)),
            );
        };
        // Speculated transactions take 1.5 times as long: the chunks finish together when
        // the first takes 60% of the block.
        block(&share, 3);
        assert!((of_one(&share) - 0.6).abs() < 0.001, "{}", of_one(&share));
        // A block run beside other work, its speculator twice as slow, is one odd
        // block out: the next one is cut as before.
        for _ in 0..FirstShare::BLOCKS {
            block(&share, 3);
        }
        block(&share, 6);
        assert!((of_one(&share) - 0.6).abs() < 0.001, "{}", of_one(&share));
        // A lasting change is followed within half the blocks remembered.
        for _ in 0..FirstShare::BLOCKS.div_ceil(2) {
            block(&share, 2);
        }
        assert!((of_one(&share) - 0.5).abs() < 0.001, "{}", of_one(&share));
        // Chunks too small to time, or one thread, teach nothing.
        let before = share.get();
        for _ in 0..FirstShare::BLOCKS {
            share.learn(2, (10, ms(1)), (2490, ms(100)));
            share.learn(1, (2500, ms(1)), (2500, ms(100)));
        }
        assert_eq!(share.get(), before);
        // However slow the speculators, the first chunk keeps at most three quarters.
        for _ in 0..FirstShare::BLOCKS {
            share.learn(4, (1000, ms(1)), (1000, ms(1000)));
        }
        assert!(share.get() <= FirstShare::ONE * 3 / 4, "{}", share.get());
        assert!(share.get() >= FirstShare::ONE * 3 / 4 - 16);
    }

    #[test]
    fn chunks_cover_the_range_in_order_and_differ_by_at_most_one() {
        for len in 0..40 {
            for parts in 1..10 {
                let chunks = chunks(3..3 + len, parts);
                let covered: Vec<usize> = chunks.iter().flat_map(|c| c.clone()).collect();
                assert_eq!(
                    covered,
                    (3..3 + len).collect::<Vec<_>>(),
                    "{len} in {parts}"
                );
                assert_eq!(chunks.len(), parts.min(len));
                let sizes = chunks.iter().map(|c| c.len());
                let spread = sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0);
                assert!(spread <= 1, "{len} in {parts}: {chunks:?}");
            }
        }
    }
}
