//! The commit stage: one LMDB write of the block with its state journaled, then its state
//! diff moved into the state layers (which flush the oldest ones to disk in batches).
//!
//! Input: a [`PreparedBlock`], the block with everything the commit stage writes for it.
//! Output: [`Committed`] (new, or already stored), the block's state now in the layers.

use std::sync::atomic::{AtomicBool, Ordering};

use alloy_primitives::Address;
use stave_exec::ExecutionOutcome;
use stave_primitives::{Receipt, RecoveredTx, SealedBlock, StateDiff};
use stave_storage::commit::{
    BlockState, BlockToCommit, Committed, TxPositions, commit_block, commit_block_with,
    encode_receipts,
};

use super::{Chain, stage::stage};
use crate::error::ImportError;

/// An executed block and everything the commit stage writes for it: the output of the
/// execute stage (or of building a block), the commit stage's input.
#[derive(Debug, Clone)]
pub struct PreparedBlock {
    /// The block, sealed.
    pub block: SealedBlock,
    /// Its body: the offset-indexed transaction list.
    pub body: Vec<u8>,
    /// One receipt per transaction.
    pub receipts: Vec<Receipt>,
    /// One sender per transaction.
    pub senders: Vec<Address>,
    /// Its state changes.
    pub diff: StateDiff,
}

impl PreparedBlock {
    /// A received block once executed: its body's bytes as they came, and the senders of
    /// its `recovered` transactions.
    pub(super) fn received(
        block: SealedBlock,
        body: &[u8],
        outcome: ExecutionOutcome,
        recovered: &[RecoveredTx],
    ) -> Self {
        Self {
            block,
            body: body.to_vec(),
            receipts: outcome.receipts,
            senders: recovered.iter().map(|tx| tx.sender).collect(),
            diff: outcome.diff,
        }
    }

    /// The commit stage's view of it: the block data, and its state journaled for the
    /// state layers that hold it until they flush.
    pub fn input(&self) -> BlockToCommit<'_> {
        BlockToCommit {
            block: &self.block,
            body: &self.body,
            receipts: &self.receipts,
            senders: &self.senders,
            state: BlockState::Journaled(&self.diff),
        }
    }
}

/// Whether committing a block also flushes the oldest state layers (or something else
/// flushes them, in the background).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flush {
    Now,
    Later,
}

impl Chain<'_> {
    /// Commits a block [`Chain::prepare`] made (the commit stage), moving its state diff
    /// into the state layers. It does not flush them: call [`Chain::flush`], which may run
    /// on another thread while the next block is prepared and committed.
    pub fn commit(&self, prepared: &mut PreparedBlock) -> Result<Committed, ImportError> {
        let number = prepared.block.number();
        let (committed, _) = stage("commit", number, || {
            self.commit_parts(prepared, Flush::Later)
        });
        committed
    }

    /// Writes the oldest state layers to disk if enough have piled up (see
    /// [`stave_state::StateLayers::flush`]); safe beside [`Chain::prepare`] and
    /// [`Chain::commit`].
    pub fn flush(&self) -> Result<(), ImportError> {
        self.layers.flush(self.parallel())?;
        Ok(())
    }

    /// Writes every state layer to disk, for a node that stops cleanly: its next start
    /// re-executes nothing. Not to be called while blocks are still being committed.
    pub fn flush_all(&self) -> Result<(), ImportError> {
        self.layers.flush_all(self.parallel())?;
        Ok(())
    }

    /// Takes the chain back to block `number` (a dev chain's `evm_revert`): drops the state
    /// layers of the blocks after it, then the blocks themselves from the store. Returns
    /// how many blocks went. The state of `number` must still be in the layers (see
    /// [`stave_state::StateLayers::pin`]); a crash between the two steps leaves the
    /// blocks stored, and a restart replays them.
    pub fn unwind_to(&self, number: u64) -> Result<u64, ImportError> {
        self.layers.unwind(number)?;
        Ok(stave_storage::commit::unwind_blocks(self.store, number)?)
    }

    /// Writes the block with its state journaled, then moves its state diff into the
    /// layers and flushes the oldest ones if enough piled up. A block already stored
    /// changes nothing.
    ///
    /// The stage's two halves are independent until the layer is published: in parallel
    /// the block's layer (bloom filter, account index, transaction positions) is prepared
    /// on the executor's thread while this one encodes and writes the block, and is
    /// published once the block is stored; serially the layer is prepared after the
    /// write, only for a new block.
    ///
    /// In parallel the executor's thread first encodes the receipts' part of the batch
    /// and hands it to this thread, which meanwhile encodes the rest and puts it in the
    /// write transaction (or encodes them too, if the other thread has not started on
    /// them by then): the write's fsyncs make this thread's half the longer, and a block
    /// whose receipts carry logs takes a while to encode them. The batch is not encoded on
    /// rayon's pool: with the other core preparing the layer, that put three threads on
    /// two cores, and `stave bench commit` measured it slower.
    pub(super) fn commit_parts(
        &self,
        prepared: &mut PreparedBlock,
        flush: Flush,
    ) -> Result<Committed, ImportError> {
        let block = &prepared.block;
        let input = prepared.input();
        let prepare = || {
            self.layers
                .prepare(block.number(), &prepared.diff, TxPositions::of(block))
        };
        let (committed, layer) = if self.parallel() {
            // Whichever thread comes to the receipts first encodes them: the executor's
            // thread, unless it was woken so late that this one has put the rest already.
            let receipts_taken = AtomicBool::new(false);
            let take_receipts = || !receipts_taken.swap(true, Ordering::AcqRel);
            let (receipts_sender, receipts) = std::sync::mpsc::sync_channel(1);
            let input = &input;
            let (layer, committed) = self.executor.join(
                // The sender moves in, so a panic over there drops it and ends the wait here.
                move || {
                    if take_receipts() {
                        // Buffered: sent even if the writer no longer waits for it.
                        let _ = receipts_sender.send(encode_receipts(input));
                    }
                    prepare()
                },
                || {
                    commit_block_with(self.store, input, false, &mut || {
                        if take_receipts() {
                            return encode_receipts(input);
                        }
                        // An error only if the other thread panicked before it sent them.
                        receipts.recv().unwrap_or_else(|_| encode_receipts(input))
                    })
                },
            );
            (committed, Some(layer))
        } else {
            (commit_block(self.store, &input, false), None)
        };
        if !matches!(committed, Ok(Committed::New)) {
            if let Some(Ok(layer)) = layer {
                self.layers.discard(layer, &prepared.diff);
            }
            return Ok(committed?);
        }
        let layer = match layer {
            Some(layer) => layer?,
            None => prepare()?,
        };
        let hash = block.hash();
        self.layers
            .publish(layer, hash, std::mem::take(&mut prepared.diff))?;
        if flush == Flush::Now {
            self.layers.flush(self.parallel())?;
        }
        Ok(Committed::New)
    }
}
