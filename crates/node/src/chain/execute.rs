//! The execute stage: a block's transactions run on its parent's state (the stored head's,
//! or a speculative parent's), and for a received block the header's gas used, receipts
//! root and state root are checked against the outcome.
//!
//! Input: a [`Verified`] block and its parent's state. Output: an [`Executed`] block,
//! which the commit stage stores, or which becomes a speculative block.

use stave_exec::{BlockInput, ExecutionOutcome, Mode};
use stave_primitives::{Header, LeafHasher, RecoveredTx, SealedBlock, SerialLeaves, StateReader};

use super::{
    Chain,
    receive::Verified,
    stage::{StageTimes, stage},
};
use crate::error::ImportError;

/// Whether a block's execute stage prefetches its reads beside itself (see
/// [`Chain::with_prefetcher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prefetch {
    /// Alongside the execution, ahead of the executor: nothing was loaded for it before.
    Beside,
    /// Not now: a stream prefetched the block while its parent executed, or the stages
    /// run serially (the baseline that prefetches nothing).
    Skip,
}

/// The threads a block's execute stage runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExecuteOn {
    /// The chain's executor, on all its threads: the block runs alone, or beside stages
    /// that leave cores free.
    AllThreads,
    /// The calling thread only: the next block's signature recovery holds every core, and
    /// executing chunks beside it only takes its time (`stave bench pipeline` measures
    /// the pipeline faster this way, with the chunk executor and a cold sender cache).
    OneThread,
}

impl ExecuteOn {
    /// Where `block` executes when `more` blocks follow it in the pipeline. A block whose
    /// signatures had to be recovered (most of them not in the sender cache) is probably
    /// followed by another like it, whose recovery will hold the cores meanwhile.
    pub(super) fn beside(block: &Verified<'_>, more: bool) -> Self {
        Self::for_counts(block.recoveries, block.block.transactions().len(), more)
    }

    fn for_counts(recoveries: u64, txs: usize, more: bool) -> Self {
        if more && recoveries * 2 > txs as u64 {
            Self::OneThread
        } else {
            Self::AllThreads
        }
    }
}

/// A received block executed on its parent's state, its header checked against the
/// outcome: the execute stage's output, the commit stage's input.
pub(super) struct Executed<'b> {
    /// The block.
    pub(super) block: SealedBlock,
    /// Its body's bytes as received.
    pub(super) body: &'b [u8],
    /// Its transactions with their senders (recovered again if agreed ones failed).
    pub(super) recovered: Vec<RecoveredTx>,
    /// What executing it gave.
    pub(super) outcome: ExecutionOutcome,
    /// Signatures recovered for it: by the verify stage, and again if agreed senders
    /// did not hold.
    pub(super) recoveries: u64,
    /// Time the stages took so far.
    pub(super) times: StageTimes,
}

impl Chain<'_> {
    /// Executes `input` `on` these threads.
    pub(super) fn execute(
        &self,
        input: BlockInput<'_>,
        on: ExecuteOn,
    ) -> Result<ExecutionOutcome, ImportError> {
        if self.on_executor(on) {
            self.executor.execute(input)
        } else {
            self.executor.execute_one_thread(input)
        }
        .map_err(|source| ImportError::Execute {
            number: input.env.header.number,
            source: Box::new(source),
        })
    }

    /// Whether a block executed `on` these threads runs on the executor's threads.
    fn on_executor(&self, on: ExecuteOn) -> bool {
        self.parallel() && on == ExecuteOn::AllThreads
    }

    /// Where the roots of a block executed `on` these threads are hashed: on the
    /// executor's threads with it, else on this thread.
    pub(super) fn leaf_hasher(&self, on: ExecuteOn) -> &dyn LeafHasher {
        if self.on_executor(on) {
            &self.executor
        } else {
            &SerialLeaves
        }
    }

    /// The execute stage for `verified` (its reads prefetched beside it if `prefetch`
    /// says so), a child of `parent`, on `state` (the state after
    /// `parent`), with the header's checks. Senders that were agreed rather than recovered
    /// (see [`super::Incoming`]) and fail the checks give way to the signatures: they are
    /// recovered and the block runs once more.
    pub(super) fn execute_verified<'b>(
        &self,
        verified: Verified<'b>,
        state: &dyn StateReader,
        parent: &Header,
        on: ExecuteOn,
        prefetch: Prefetch,
    ) -> Result<Executed<'b>, ImportError> {
        let Verified {
            block,
            body,
            mut recovered,
            mut recoveries,
            agreed,
            mut times,
        } = verified;
        let number = block.number();
        let execute = |recovered: &[RecoveredTx]| {
            stage("execute", number, || {
                let run = || self.execute_checked(state, &block, recovered, parent, on);
                match prefetch {
                    Prefetch::Beside => self.beside_prefetch(block.header(), recovered, run),
                    Prefetch::Skip => run(),
                }
            })
        };
        let (outcome, elapsed) = execute(&recovered);
        times.execute += elapsed;
        let outcome = match outcome {
            Err(error) if agreed => {
                // The validators who agreed were wrong: signatures decide, not them.
                tracing::warn!(number, %error, "agreed senders do not hold; recovering them");
                metrics::counter!("stave_agreed_senders_refuted_total").increment(1);
                let ((verified, recovered_now), elapsed) =
                    stage("verify", number, || self.recover(&block));
                times.verify += elapsed;
                recovered = verified?;
                recoveries += recovered_now;
                let (outcome, elapsed) = execute(&recovered);
                times.execute += elapsed;
                outcome?
            }
            outcome => outcome?,
        };
        Ok(Executed {
            block,
            body,
            recovered,
            outcome,
            recoveries,
            times,
        })
    }

    /// Executes `block` on `state` (the state after `parent`) and checks the header's gas
    /// used, receipts root and state root against the outcome.
    fn execute_checked(
        &self,
        state: &dyn StateReader,
        block: &SealedBlock,
        recovered: &[RecoveredTx],
        parent: &Header,
        on: ExecuteOn,
    ) -> Result<ExecutionOutcome, ImportError> {
        let header = block.header();
        // A proposer must not slip in what the pool would refuse.
        super::permissions::check_block(state, header.number, recovered)?;
        let outcome = self.execute(
            BlockInput::new(state, self.env(header), recovered, Mode::Validate),
            on,
        )?;
        let (receipts_root, state_root) = outcome.roots(parent.state_root, self.leaf_hasher(on));
        let claims = [
            (
                "gas_used",
                header.gas_used.to_string(),
                outcome.gas_used.to_string(),
            ),
            (
                "receipts_root",
                header.receipts_root.to_string(),
                receipts_root.to_string(),
            ),
            (
                "state_root",
                header.state_root.to_string(),
                state_root.to_string(),
            ),
        ];
        match claims
            .into_iter()
            .find(|(_, claimed, computed)| claimed != computed)
        {
            Some((field, claimed, computed)) => Err(ImportError::HeaderMismatch {
                number: header.number,
                field,
                claimed,
                computed,
            }),
            None => Ok(outcome),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ExecuteOn;

    #[test]
    fn execution_leaves_the_cores_to_recovery_only_while_another_block_recovers_beside_it() {
        use ExecuteOn::{AllThreads, OneThread};
        // (signatures recovered, transactions, another block follows) → threads.
        let cases = [
            // Senders recovered, another block follows: one thread.
            ((2_500, 2_500, true), OneThread),
            ((1_251, 2_500, true), OneThread),
            // The last block runs alone.
            ((2_500, 2_500, false), AllThreads),
            // Senders mostly from the cache: the next block's verify leaves cores free.
            ((1_250, 2_500, true), AllThreads),
            ((0, 2_500, true), AllThreads),
            ((0, 0, true), AllThreads),
        ];
        for ((recoveries, txs, more), expected) in cases {
            assert_eq!(
                ExecuteOn::for_counts(recoveries, txs, more),
                expected,
                "{recoveries} of {txs} recovered, more: {more}"
            );
        }
    }
}
