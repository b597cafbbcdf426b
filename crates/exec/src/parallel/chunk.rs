//! A chunk's life after the first: speculated on a pool thread from the state before the
//! block ([`speculate_chunk`]), then committed by the calling thread, whole when all its
//! reads still hold ([`chunk_holds`], [`record_whole_chunk`]) or else transaction by
//! transaction ([`commit_one_by_one`]).

use std::{
    collections::HashSet,
    ops::Range,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use alloy_consensus::Transaction as _;
use alloy_primitives::Address;
use revm::context_interface::ContextTr;
use stave_primitives::{RecoveredTx, StateDiff};

use crate::{
    db::{BlockDb, ChunkLogs, Committed, Overlay, Read, RecordingDb, Reusable, WriteLog},
    error::ExecError,
    evm::{BlockEvm, FeeHandler, TxRun, run_tx},
    serial::Tally,
};

/// A speculative run of one transaction and where its reads sit in its chunk's read log
/// (its writes' place is in the run); `None` when the run hit an error, which committing
/// settles by executing the transaction for real.
type Speculation = Option<(Range<usize>, TxRun)>;

/// A chunk run ahead: one speculation per transaction, everything they read and wrote in
/// order (one log each, not one per transaction: the committer checks the reads from
/// another core, and a contiguous log streams there), and the chunk's own diff, sorted.
pub(super) struct SpeculatedChunk {
    /// The chunk's transactions.
    pub(super) range: Range<usize>,
    /// One speculation per transaction (`None` past where the speculator gave up).
    pub(super) runs: Vec<Speculation>,
    /// What the runs read and wrote.
    pub(super) logs: ChunkLogs,
    /// The block gas that must be left before the chunk for all of it to fit.
    pub(super) gas: ChunkGas,
    /// The chunk's own changes, sorted.
    pub(super) diff: StateDiff,
    /// How the chunk's transactions read the proposer's account.
    pub(super) coinbase: CoinbaseReads,
    /// From the start of the block's execution until the chunk was sorted.
    pub(super) took: Duration,
}

/// What a speculator hands back: its runs, their logs, the gas they need and how they
/// read the proposer's account.
pub(super) type SpeculatorRuns = (Vec<Speculation>, ChunkLogs, ChunkGas, CoinbaseReads);

/// How a speculated chunk's transactions read the proposer's account (`COINBASE`),
/// which speculation leaves without the fees of the transactions before.
///
/// Each transaction of a block credits its fee to the proposer and touches its account
/// (Ethereum's rule, see `evm`); speculative runs leave that to the committer. A read
/// of the proposer's account is therefore exact only on the state committed before it
/// with every fee before it credited. One by one, the committer credits each fee as it
/// applies the run, so the read check compares against exactly that. A chunk committed
/// whole is checked against the state before the chunk alone, and its fees are credited
/// later: it may be committed whole only when no transaction of it read the proposer
/// after an earlier one of it ran, and none read it while fees of chunks committed whole
/// before it are uncredited.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct CoinbaseReads {
    /// A transaction of the chunk read the proposer's account.
    pub(super) read: bool,
    /// One read it after an earlier transaction of the chunk ran (whose fee it missed).
    pub(super) after_a_run: bool,
}

impl CoinbaseReads {
    /// Notes a transaction of the chunk that logged `reads`; `ran` when an earlier
    /// transaction of the chunk executed.
    fn observe(&mut self, reads: &[Read], coinbase: Address, ran: bool) {
        if reads.iter().any(|read| read.address() == coinbase) {
            self.read = true;
            self.after_a_run |= ran;
        }
    }

    /// True when the chunk may be committed whole, fees of earlier whole chunks
    /// being `uncredited` or not.
    fn allow_whole(&self, uncredited: bool) -> bool {
        !(self.after_a_run || self.read && uncredited)
    }
}

/// The block gas a speculated chunk needs left before it, summed where it ran (the
/// committer would otherwise walk every transaction of the chunk from another core).
/// Each transaction fits when its gas limit is left after what the ones before it in
/// the block used; within the chunk that is its limit plus what the chunk's earlier
/// transactions used, so the whole chunk fits exactly when the gas left before it is at
/// least the largest such sum.
#[derive(Debug, Default)]
pub(super) struct ChunkGas {
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
pub(super) fn speculate_chunk(
    mut evm: BlockEvm<RecordingDb<'_>>,
    mut writes: WriteLog,
    committed: Overlay<'_>,
    gave_up: &AtomicBool,
    txs: &[RecoveredTx],
    range: Range<usize>,
) -> Result<SpeculatorRuns, ExecError> {
    let overlay = evm.ctx.db().overlay;
    let mut handler = FeeHandler::deferring();
    let coinbase = evm.ctx.block.beneficiary;
    let mut coinbase_reads = CoinbaseReads::default();
    let mut ran = false;
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
        coinbase_reads.observe(&evm.ctx.db().reads[reads.clone()], coinbase, ran);
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
            ran = true;
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
    Ok((runs, ChunkLogs { reads, writes }, gas, coinbase_reads))
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

/// True when the whole chunk can be committed as it was speculated: every transaction
/// ran, they fit the block's gas in turn, read what the committed state holds now, and
/// read the proposer's account only where that is exact ([`CoinbaseReads`]).
///
/// The reads are checked on this thread alone: the filters of [`SortedChanges`] answer
/// most without a search, and halving the check across the executor's threads cost more
/// in hand-offs than it saved.
///
/// [`SortedChanges`]: crate::db::SortedChanges
pub(super) fn chunk_holds(
    chunk: &SpeculatedChunk,
    tally: &Tally<'_>,
    committed: &impl Committed,
) -> bool {
    chunk.gas.fits(tally.gas_left())
        && chunk.coinbase.allow_whole(tally.has_uncredited())
        && all_hold(&chunk.logs.reads, committed)
}

/// Records the receipts of a chunk that [`chunk_holds`] accepted (its diff is merged
/// whole, so the writes are dropped).
pub(super) fn record_whole_chunk(
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
pub(super) fn commit_one_by_one<'db>(
    evm: &mut BlockEvm<BlockDb<'db>>,
    handler: &mut FeeHandler<BlockEvm<BlockDb<'db>>>,
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
    fn a_chunk_fits_by_its_summed_gas_exactly_when_each_transaction_fits_in_turn() {
        let executed = |gas_used| TxRun::Executed {
            writes: 0..0,
            success: true,
            gas_used,
            fee: alloy_primitives::U256::ZERO,
            credited: false,
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
}
