//! The serial executor: transactions one after another on one thread. The reference the
//! parallel executor must equal, byte for byte.
//!
//! Input: the state before the block, its header, its recovered transactions.
//! Output: receipts, gas used, fees, and the block's [`StateDiff`].

use std::{ops::Range, sync::atomic::AtomicU64};

use alloy_consensus::Transaction as _;
use alloy_primitives::{B256, Bloom, U256};
use parking_lot::RwLock;
use revm::context_interface::ContextTr;
use stave_primitives::{
    Header, LeafHasher, Receipt, ReceiptLeaves, RecoveredTx, SlotsHint, StateDiff, StateReader,
    receipts_and_state_roots,
};

use crate::{
    db::{BlockDb, Changes, Overlay, Reusable, WriteLog, credit},
    env::{BlockInput, Mode},
    error::ExecError,
    evm::{BlockEvm, FeeHandler, TxRun, block_evm, run_tx},
};

/// A transaction left out of a block being built, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTx {
    /// Position in the input.
    pub index: usize,
    /// Why it could not be included.
    pub reason: String,
}

/// The result of executing a block.
#[derive(Debug, Clone)]
pub struct ExecutionOutcome {
    /// Positions (in the input) of the included transactions, in order.
    pub included: Vec<usize>,
    /// One receipt per included transaction.
    pub receipts: Vec<Receipt>,
    /// Gas the block used.
    pub gas_used: u64,
    /// Priority fees credited to the proposer, transaction by transaction, in wei.
    pub fees: U256,
    /// Every state change, the proposer's credit included.
    pub diff: StateDiff,
    /// Transactions left out (always empty in [`Mode::Validate`]).
    pub skipped: Vec<SkippedTx>,
    /// The first leaves of the receipts root, hashed while an executing thread would
    /// otherwise have waited: [`ExecutionOutcome::roots`] skips them.
    receipt_leaves: ReceiptLeaves,
    /// What the thread that merged `diff` learned of its slots, for the roots.
    slots: SlotsHint,
}

impl ExecutionOutcome {
    /// The outcome with `before` (changes made to the state before the block ran, such as
    /// a dev node's `anvil_setBalance`) applied under its own changes.
    pub fn after(mut self, mut before: StateDiff) -> Self {
        before.append(std::mem::take(&mut self.diff));
        self.diff = before;
        // What the executing threads learned of the slots no longer covers the diff.
        self.slots = SlotsHint::Unknown;
        self
    }

    /// The block's `receipts_root` and `state_root` over `parent_root`, as
    /// [`receipts_and_state_roots`] gives them for `receipts` and `diff` as executed,
    /// their leaves hashed by `hasher` (bar those hashed during execution).
    pub fn roots(&self, parent_root: B256, hasher: &dyn LeafHasher) -> (B256, B256) {
        receipts_and_state_roots(
            &self.receipts,
            &self.receipt_leaves,
            parent_root,
            &self.diff,
            self.slots,
            hasher,
        )
    }
}

/// Outcomes are equal when they hold the same results: how many receipt leaves were
/// hashed ahead (which depends on how the threads met), and what was learned of the
/// slots ahead, are work done, not results.
impl PartialEq for ExecutionOutcome {
    fn eq(&self, other: &Self) -> bool {
        let Self {
            included,
            receipts,
            gas_used,
            fees,
            diff,
            skipped,
            receipt_leaves: _,
            slots: _,
        } = self;
        *included == other.included
            && *receipts == other.receipts
            && *gas_used == other.gas_used
            && *fees == other.fees
            && *diff == other.diff
            && *skipped == other.skipped
    }
}

impl Eq for ExecutionOutcome {}

/// The block's running totals, fed transaction by transaction in block order by the
/// serial executor and by the parallel executor's committer alike.
pub(crate) struct Tally<'h> {
    header: &'h Header,
    mode: Mode,
    outcome: ExecutionOutcome,
    /// Fees of recorded speculative runs not yet credited to the proposer (`Some` even
    /// when zero: each such run touched the proposer's account, EIP-161).
    uncredited: Option<U256>,
}

impl<'h> Tally<'h> {
    pub(crate) fn new(header: &'h Header, mode: Mode, txs: usize) -> Self {
        let outcome = ExecutionOutcome {
            included: Vec::with_capacity(txs),
            receipts: Vec::with_capacity(txs),
            gas_used: 0,
            fees: U256::ZERO,
            diff: StateDiff::default(),
            skipped: Vec::new(),
            receipt_leaves: ReceiptLeaves::default(),
            slots: SlotsHint::Unknown,
        };
        Self {
            header,
            mode,
            outcome,
            uncredited: None,
        }
    }

    /// True when recorded runs' fees are still to be credited: the proposer's account
    /// in the committed state lacks them.
    pub(crate) fn has_uncredited(&self) -> bool {
        self.uncredited.is_some()
    }

    /// Credits the fees recorded but not yet credited to the proposer in `overlay`, the
    /// committed state.
    pub(crate) fn credit_fees(&mut self, overlay: &Overlay<'_>) -> Result<(), ExecError> {
        if let Some(amount) = self.uncredited.take() {
            overlay.credit(self.header.proposer, amount)?;
        }
        Ok(())
    }

    /// Leaves transaction `index` out (building) or fails the block (validating).
    fn refuse(&mut self, index: usize, reason: String) -> Result<(), ExecError> {
        match self.mode {
            Mode::Validate => Err(ExecError::InvalidTx { index, reason }),
            Mode::Build => {
                self.outcome.skipped.push(SkippedTx { index, reason });
                Ok(())
            }
        }
    }

    /// Whether transaction `index` fits the block's remaining gas; refuses it if not.
    pub(crate) fn fits(&mut self, index: usize, tx: &RecoveredTx) -> Result<bool, ExecError> {
        let remaining = self.gas_left();
        if fits_gas(tx, remaining) {
            return Ok(true);
        }
        let gas_limit = tx.tx.envelope().gas_limit();
        self.refuse(
            index,
            format!("gas limit {gas_limit} exceeds the block's remaining {remaining}"),
        )?;
        Ok(false)
    }

    /// Hashes the next leaf of the receipts root if its receipts are all recorded; false
    /// when they are not (see [`ReceiptLeaves`]).
    pub(crate) fn hash_receipt_leaf(&mut self) -> bool {
        self.outcome
            .receipt_leaves
            .hash_next(&self.outcome.receipts)
    }

    /// Gas the block has left for the transactions still to come.
    pub(crate) fn gas_left(&self) -> u64 {
        self.header.gas_limit - self.outcome.gas_used
    }

    /// Records the run of transaction `index` and hands back where its writes sit in their
    /// log, for the caller to apply to the block's state (none when the transaction is
    /// left out).
    pub(crate) fn record(
        &mut self,
        index: usize,
        run: TxRun,
    ) -> Result<Option<Range<usize>>, ExecError> {
        match run {
            TxRun::Invalid(reason) => self.refuse(index, reason).map(|()| None),
            TxRun::Executed {
                writes,
                success,
                gas_used,
                fee,
                credited,
                logs,
                bloom,
            } => {
                if !credited {
                    self.uncredited = Some(self.uncredited.unwrap_or_default() + fee);
                }
                let outcome = &mut self.outcome;
                outcome.fees += fee;
                outcome.gas_used += gas_used;
                let receipt = alloy_consensus::Receipt {
                    status: success.into(),
                    cumulative_gas_used: outcome.gas_used,
                    logs,
                };
                outcome.receipts.push(Receipt {
                    receipt,
                    logs_bloom: bloom.map_or(Bloom::ZERO, |bloom| *bloom),
                });
                outcome.included.push(index);
                Ok(Some(writes))
            }
        }
    }

    /// Records the run of transaction `index`, whose writes sit in `log`, and applies them
    /// to `db`, then its fee if the run did not credit it.
    pub(crate) fn commit(
        &mut self,
        index: usize,
        run: TxRun,
        log: &WriteLog,
        db: &mut BlockDb<'_>,
    ) -> Result<(), ExecError> {
        if let Some(writes) = self.record(index, run)? {
            db.overlay.apply(log, writes);
        }
        self.credit_fees(&db.overlay)
    }

    /// Executes the transactions of `txs` at `indices` (in order) one after another on
    /// `evm`, each on the state the ones before it left.
    pub(crate) fn execute_in_order<'db>(
        &mut self,
        evm: &mut BlockEvm<BlockDb<'db>>,
        handler: &mut FeeHandler<BlockEvm<BlockDb<'db>>>,
        txs: &[RecoveredTx],
        indices: impl IntoIterator<Item = usize>,
    ) -> Result<(), ExecError> {
        // Each transaction's writes are applied at once: one log, emptied every time.
        let mut writes = WriteLog::default();
        for index in indices {
            let tx = &txs[index];
            evm.ctx.db().overlay.prefetch_next(txs, index);
            if self.fits(index, tx)? {
                writes.clear();
                let run = run_tx(evm, handler, tx, index, &mut writes)?;
                self.commit(index, run, &writes, evm.ctx.db_mut())?;
            }
        }
        Ok(())
    }

    /// Credits the proposer in `diff`, the changes of the block's transactions over
    /// `base`, with the fees not yet credited, and hands over the outcome with it and
    /// with `slots`, what is known of `diff`'s slots (the credit writes none).
    pub(crate) fn finish(
        mut self,
        base: &dyn StateReader,
        mut diff: StateDiff,
        slots: SlotsHint,
    ) -> Result<ExecutionOutcome, ExecError> {
        if let Some(amount) = self.uncredited {
            credit(&mut diff, base, self.header.proposer, amount)?;
        }
        self.outcome.diff = diff;
        self.outcome.slots = slots;
        Ok(self.outcome)
    }
}

/// Whether `tx` may run with `gas_left` of the block's gas: its whole gas limit must fit,
/// whatever it ends up using.
fn fits_gas(tx: &RecoveredTx, gas_left: u64) -> bool {
    tx.tx.envelope().gas_limit() <= gas_left
}

/// Executes `input`'s transactions in order on its state, in its environment.
pub fn execute_serial(input: BlockInput<'_>) -> Result<ExecutionOutcome, ExecError> {
    execute_serial_on(&RwLock::new(Changes::default()), input)
}

/// [`execute_serial`] with the block's changes in `changes` (empty), left empty after.
pub(crate) fn execute_serial_on(
    changes: &RwLock<Changes>,
    input: BlockInput<'_>,
) -> Result<ExecutionOutcome, ExecError> {
    let hits = AtomicU64::new(0);
    let overlay = Overlay::new(input.state, changes, &hits);
    let mut evm = block_evm(BlockDb::new(overlay), input.env);
    let mut handler = FeeHandler::crediting();
    let txs = input.txs;
    let mut tally = Tally::new(input.env.header, input.mode, txs.len());
    tally.execute_in_order(&mut evm, &mut handler, txs, 0..txs.len())?;
    overlay.report_hits();
    tally.finish(input.state, overlay.take_diff(0), SlotsHint::Unknown)
}
