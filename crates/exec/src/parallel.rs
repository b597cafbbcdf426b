//! The parallel executor: speculate ahead on all cores, commit in block order, re-execute
//! what speculated on stale state. Needs no conflict declarations from contracts.
//!
//! Thread roles: `threads - 1` speculators and one committer (the calling thread).
//! Speculators claim transactions in block order from a shared counter and run each
//! against the state committed so far, recording the value of every account and storage
//! slot it read. The committer takes transactions strictly in block order:
//! - a speculation whose recorded reads all still hold in the committed state has
//!   exactly the result serial execution would have (revm is deterministic in what it
//!   reads), so its writes are applied as they are;
//! - otherwise the committer executes the transaction again, on the committed state;
//! - when it reaches a transaction no speculator has claimed yet, it claims and executes
//!   it itself; while the next one is still being speculated, it speculates on a later
//!   one itself. So on `threads` cores all `threads` threads execute.
//!
//! So the result equals [`execute_serial`]'s for any block and any thread count: every
//! applied result was computed from the very values serial execution reads. Conflicts
//! cost time, never correctness: with every transaction touching one hot account, the
//! committer would re-execute nearly every one, so once most recent speculations have
//! failed it pauses the speculators and runs transactions itself, at serial speed,
//! probing now and then whether speculation pays again (after [`SERIAL_PROBE_INTERVAL`]
//! transactions, twice as long after each probe that fails). A speculator may see
//! the committed state change between two of its reads; that only makes its speculation
//! fail validation.
//!
//! The proposer's fee credit is deferred to the end of the block (see `evm`), so fees do
//! not make every pair of transactions conflict.
//!
//! [`execute_serial`]: crate::execute_serial

use std::sync::{
    Mutex,
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
};

use parking_lot::RwLock;

use revm::context_interface::ContextTr;
use stave_primitives::{Header, RecoveredTx, StateDiff};

use crate::{
    db::{BlockDb, Overlay, Read, RecordingDb, View},
    error::ExecError,
    evm::{BlockEvm, DeferredRewardHandler, TxRun, block_evm, run_tx},
    serial::{ExecutionOutcome, Mode, Tally},
    state::StateReader,
};

/// A speculative run and what it read.
struct Speculation {
    reads: Vec<Read>,
    run: TxRun,
}

/// A speculator's result for one transaction: `None` inside when the speculative run hit
/// an error (it may have read a torn state), which the committer settles by executing.
type Slot = Mutex<Option<Option<Speculation>>>;

/// State shared by the committer and the speculators of one block.
struct Shared<'a> {
    overlay: Overlay<'a>,
    txs: &'a [RecoveredTx],
    /// One per transaction; filled once by the speculator that claimed it.
    slots: Vec<Slot>,
    /// Next transaction nobody has claimed. Relaxed suffices: a claim only decides who
    /// runs a transaction; results travel through the slots' mutexes.
    next: AtomicUsize,
    /// Set when the committer is done (or failed): speculators stop claiming.
    stop: AtomicBool,
    /// Set while the block is conflict-heavy: speculators pause rather than compete with
    /// the committer for cores and for the state lock.
    pause: AtomicBool,
}

/// A thread's EVM for speculative runs, built once per block.
struct Speculator<'a> {
    evm: BlockEvm<RecordingDb<'a>>,
    handler: DeferredRewardHandler<BlockEvm<RecordingDb<'a>>>,
}

impl<'a> Speculator<'a> {
    fn new(overlay: Overlay<'a>, chain_id: u64, header: &Header) -> Self {
        let evm = block_evm(RecordingDb::new(overlay), chain_id, header);
        Self {
            evm,
            handler: DeferredRewardHandler::default(),
        }
    }

    /// Claims the next unclaimed transaction, runs it, and leaves the result in its slot.
    /// False when none is left.
    fn speculate_next(&mut self, shared: &Shared<'_>) -> bool {
        let index = shared.next.fetch_add(1, Ordering::Relaxed);
        let Some(tx) = shared.txs.get(index) else {
            return false;
        };
        self.evm.ctx.db_mut().reads.clear();
        let speculation = run_tx(&mut self.evm, &mut self.handler, tx, index)
            .ok()
            .map(|run| Speculation {
                reads: std::mem::take(&mut self.evm.ctx.db_mut().reads),
                run,
            });
        *lock(&shared.slots[index]) = Some(speculation);
        true
    }
}

impl Shared<'_> {
    /// A speculator thread: claim and run transactions until none are left.
    fn speculate(&self, chain_id: u64, header: &Header) {
        let mut speculator = Speculator::new(self.overlay, chain_id, header);
        while !self.stop.load(Ordering::Relaxed) {
            if self.pause.load(Ordering::Relaxed) {
                std::thread::yield_now();
            } else if !speculator.speculate_next(self) {
                return;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// True when every recorded read still gives the same value (stops at the first that
/// does not).
fn all_hold(reads: &[Read], view: View<'_>) -> Result<bool, ExecError> {
    for read in reads {
        if !read.holds(view)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Transactions the committer runs alone, speculators paused, before it first tries
/// speculation again: 64, so a probe that fails (about nine wasted speculations until the
/// tracker trips again) costs a few percent.
const SERIAL_PROBE_INTERVAL: usize = 64;
/// The longest serial run between probes: each probe that finds the conflicts still there
/// doubles the run, up to this, so a block that conflicts throughout pays for a handful of
/// probes rather than one every 64 transactions.
const MAX_SERIAL_PROBE_INTERVAL: usize = 1024;
/// A probe failed when the tracker trips again within this many transactions of it.
const PROBE_VERDICT: usize = 32;

/// When the committer, running alone through a conflict-heavy stretch, tries speculation
/// again.
struct Probes {
    /// Serial transactions before the next probe.
    interval: usize,
    /// Serial transactions since the last probe (or since the conflicts began).
    serial_run: usize,
    /// Where speculation last resumed.
    last_probe: Option<usize>,
}

impl Probes {
    fn new() -> Self {
        Self {
            interval: SERIAL_PROBE_INTERVAL,
            serial_run: 0,
            last_probe: None,
        }
    }

    /// The tracker tripped at transaction `index`: serial runs begin. Soon after a probe,
    /// the probe failed and the next run is twice as long; otherwise a new conflict-heavy
    /// stretch starts from the shortest run.
    fn tripped(&mut self, index: usize) {
        let probe_failed = self
            .last_probe
            .is_some_and(|probe| index - probe <= PROBE_VERDICT);
        self.interval = if probe_failed {
            (self.interval * 2).min(MAX_SERIAL_PROBE_INTERVAL)
        } else {
            SERIAL_PROBE_INTERVAL
        };
        self.serial_run = 0;
    }

    /// Counts one serial transaction at `index`; true when it is time to probe.
    fn ran_serially(&mut self, index: usize) -> bool {
        self.serial_run += 1;
        if self.serial_run < self.interval {
            return false;
        }
        self.last_probe = Some(index);
        true
    }
}

/// Which of the last 16 validated speculations failed, as bits (newest lowest).
#[derive(Default)]
struct ConflictTracker(u16);

impl ConflictTracker {
    fn observe(&mut self, failed: bool) {
        self.0 = self.0 << 1 | u16::from(failed);
    }

    /// More than half of the recent speculations failed: the block is conflict-heavy, and
    /// waiting for speculation only delays the committer.
    fn high(&self) -> bool {
        self.0.count_ones() > 8
    }
}

/// Executes blocks with speculation on several threads.
#[derive(Debug, Clone, Copy)]
pub struct ParallelExecutor {
    threads: usize,
}

impl ParallelExecutor {
    /// An executor on `threads` threads in all, the caller's included (at least 1).
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
        }
    }

    /// Threads that execute, the caller's included.
    pub fn threads(&self) -> usize {
        self.threads
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
        let diff = RwLock::new(StateDiff::default());
        let hits = AtomicU64::new(0);
        let shared = Shared {
            overlay: Overlay::new(base, &diff, &hits),
            txs,
            slots: (0..txs.len()).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            pause: AtomicBool::new(false),
        };
        std::thread::scope(|scope| {
            for _ in 1..self.threads {
                scope.spawn(|| shared.speculate(chain_id, header));
            }
            let outcome = commit(&shared, chain_id, header, mode);
            shared.stop.store(true, Ordering::Relaxed);
            outcome
        })
    }
}

/// The committer: takes every transaction in block order.
fn commit(
    shared: &Shared<'_>,
    chain_id: u64,
    header: &Header,
    mode: Mode,
) -> Result<ExecutionOutcome, ExecError> {
    let mut evm = block_evm(BlockDb::new(shared.overlay), chain_id, header);
    let mut handler = DeferredRewardHandler::default();
    // While a speculator still runs the next transaction to commit, the committer
    // speculates on a later one instead of idling.
    let mut helper = Speculator::new(shared.overlay, chain_id, header);
    let mut tally = Tally::new(header, mode, shared.txs.len());
    let mut conflicts = ConflictTracker::default();
    let mut probes = Probes::new();
    let mut serial = false;
    for (index, tx) in shared.txs.iter().enumerate() {
        let speculation = if serial {
            // Speculation has been failing: speculators are paused and the committer runs
            // transactions itself, claiming them so speculation resumes past this point.
            shared.next.fetch_max(index + 1, Ordering::Relaxed);
            lock(&shared.slots[index]).take().flatten()
        } else {
            loop {
                if let Some(speculation) = lock(&shared.slots[index]).take() {
                    break speculation;
                }
                // Unclaimed: run it here, for real, rather than wait for a speculator.
                if shared
                    .next
                    .compare_exchange(index, index + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    break None;
                }
                if !helper.speculate_next(shared) {
                    std::thread::yield_now();
                }
            }
        };
        if !tally.fits(index, tx)? {
            continue;
        }
        let valid = match speculation {
            Some(Speculation { reads, run }) => {
                let holds = shared.overlay.with_view(|view| all_hold(&reads, view))?;
                conflicts.observe(!holds);
                holds.then_some(run)
            }
            None => None,
        };
        let run = match valid {
            Some(run) => run,
            None => run_tx(&mut evm, &mut handler, tx, index)?,
        };
        tally.record(index, run, evm.ctx.db_mut())?;
        if serial && probes.ran_serially(index) {
            // Try speculation again: the conflicts may be over.
            conflicts = ConflictTracker::default();
        } else if !serial && conflicts.high() {
            probes.tripped(index);
        }
        serial = conflicts.high();
        shared.pause.store(serial, Ordering::Relaxed);
    }
    tally.finish(evm.ctx.db_mut())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serial transactions until the next probe, starting at `index`.
    fn run_until_probe(probes: &mut Probes, index: &mut usize) -> usize {
        let start = *index;
        loop {
            *index += 1;
            if probes.ran_serially(*index) {
                return *index - start;
            }
        }
    }

    #[test]
    fn probes_that_fail_double_the_serial_run_up_to_the_cap_and_success_resets_it() {
        let mut probes = Probes::new();
        let mut index = 10;
        probes.tripped(index);
        let mut runs = Vec::new();
        for _ in 0..6 {
            runs.push(run_until_probe(&mut probes, &mut index));
            // The tracker trips again right after the probe: it failed.
            index += 9;
            probes.tripped(index);
        }
        assert_eq!(runs, [64, 128, 256, 512, 1024, 1024]);
        // Speculation paid for a while before the next trip: back to the shortest run.
        index += PROBE_VERDICT + 1;
        probes.tripped(index);
        assert_eq!(
            run_until_probe(&mut probes, &mut index),
            SERIAL_PROBE_INTERVAL
        );
    }
}
