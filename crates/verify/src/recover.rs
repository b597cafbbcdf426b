//! The verify stage: recover every sender of a block, on all cores or serially.
//!
//! Input: a block's transactions (decoded, or as an offset-indexed list still to decode).
//! Output: [`RecoveredTx`]s in block order, or the lowest failing index.
//! Touches: the [`SenderCache`] (read only; admission fills it).
//! Parallelism: a [`CheckQueue`] with one master and `threads - 1` workers. A cached
//! transaction never enters the queue; every other one is checked against the stateless
//! rules (low `s`, chain id, signature range, intrinsic gas) and recovered with
//! libsecp256k1.

use std::sync::Arc;

use alloy_primitives::Address;
use stave_checkqueue::{Check, CheckQueue, Failure};
use stave_codec::{CodecError, IndexedList};
use stave_primitives::{RecoveredTx, SignedTx, TxError};

use crate::{cache::SenderCache, error::VerifyError};

/// Initial check storage: 8,192 transactions, more than a 2,500-tx block; the queue grows
/// once if a larger block arrives.
const INITIAL_CAPACITY: usize = 8_192;

/// One transaction to verify; keeps its recovered sender.
struct RecoverSender {
    /// Position in the block.
    index: usize,
    tx: SignedTx,
    chain_id: u64,
    /// Filled by `run`.
    sender: Address,
}

impl Check for RecoverSender {
    type Error = TxError;

    fn run(&mut self) -> Result<(), TxError> {
        self.tx.check_stateless(Some(self.chain_id))?;
        self.sender = self.tx.recover_sender()?;
        Ok(())
    }
}

/// Recovers the senders of blocks on all cores, skipping transactions in the cache.
pub struct Verifier {
    queue: CheckQueue<RecoverSender>,
    chain_id: u64,
    cache: Option<Arc<SenderCache>>,
    /// Signatures recovered so far (cache hits are not counted).
    recoveries: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("threads", &self.queue.threads())
            .field("chain_id", &self.chain_id)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `chain_id` on `threads` threads (the caller's included), consulting
    /// `cache` when given.
    pub fn new(chain_id: u64, threads: usize, cache: Option<Arc<SenderCache>>) -> Self {
        Self {
            queue: CheckQueue::new(threads, INITIAL_CAPACITY),
            chain_id,
            cache,
            recoveries: 0,
        }
    }

    /// Threads recovering senders, the caller's included.
    pub fn threads(&self) -> usize {
        self.queue.threads()
    }

    /// Signatures this verifier has recovered: transactions whose sender came from the
    /// cache are not counted.
    pub fn recoveries(&self) -> u64 {
        self.recoveries
    }

    /// Verifies decoded transactions: recovery of each starts as soon as it is queued.
    pub fn verify(&mut self, txs: Vec<SignedTx>) -> Result<Vec<RecoveredTx>, VerifyError> {
        let expected = txs.len();
        self.run(expected, txs.into_iter().map(Ok))
    }

    /// Decodes an offset-indexed list on this thread and queues each transaction the
    /// moment it is decoded, so workers recover tx i while tx i+1 decodes.
    pub fn decode_and_verify(
        &mut self,
        list: &IndexedList<'_>,
    ) -> Result<Vec<RecoveredTx>, VerifyError> {
        let txs = list.iter().enumerate().map(|(index, bytes)| {
            SignedTx::decode(bytes).map_err(|source| CodecError::Transaction { index, source })
        });
        self.run(list.len(), txs)
    }

    fn run(
        &mut self,
        expected: usize,
        txs: impl Iterator<Item = Result<SignedTx, CodecError>>,
    ) -> Result<Vec<RecoveredTx>, VerifyError> {
        // Position i: `Some` when known without the queue (cached), `None` when queued.
        let mut slots: Vec<Option<RecoveredTx>> = Vec::with_capacity(expected);
        let mut round = self.queue.round(expected);
        for (index, tx) in txs.enumerate() {
            let tx = tx?;
            if let Some(sender) = self.cache.as_deref().and_then(|c| c.get(&tx.hash())) {
                slots.push(Some(RecoveredTx { tx, sender }));
                continue;
            }
            let check = RecoverSender {
                index,
                tx,
                chain_id: self.chain_id,
                sender: Address::ZERO,
            };
            self.recoveries += 1;
            match round.push(check) {
                Ok(()) => slots.push(None),
                // Only past the queue's 2^32-check round limit: verify in place.
                Err(check) => slots.push(Some(recover_one(index, check.tx, self.chain_id)?)),
            }
        }
        let completed = round.finish().map_err(|failure| match failure {
            Failure::Failed { index, error } => VerifyError::Invalid {
                index,
                source: error,
            },
            Failure::Panicked { index } => VerifyError::Panicked { index },
        })?;
        let mut completed = completed.map(|check| (check.index, check));
        let recovered: Vec<RecoveredTx> = slots
            .into_iter()
            .enumerate()
            .filter_map(|(index, slot)| match slot {
                Some(tx) => Some(tx),
                None => completed
                    .next()
                    .filter(|(checked, _)| *checked == index)
                    .map(|(_, check)| RecoveredTx {
                        tx: check.tx,
                        sender: check.sender,
                    }),
            })
            .collect();
        if recovered.len() != expected {
            return Err(VerifyError::Shortfall {
                got: recovered.len(),
                expected,
            });
        }
        Ok(recovered)
    }
}

fn recover_one(index: usize, tx: SignedTx, chain_id: u64) -> Result<RecoveredTx, VerifyError> {
    tx.validate(Some(chain_id))
        .map_err(|source| VerifyError::Invalid { index, source })
}

/// Verifies transactions one after another on the calling thread, consulting `cache`:
/// the serial baseline of `stave bench`, and the reference the parallel path must match.
pub fn verify_serial(
    txs: Vec<SignedTx>,
    chain_id: u64,
    cache: Option<&SenderCache>,
) -> Result<Vec<RecoveredTx>, VerifyError> {
    txs.into_iter()
        .enumerate()
        .map(|(index, tx)| match cache.and_then(|c| c.get(&tx.hash())) {
            Some(sender) => Ok(RecoveredTx { tx, sender }),
            None => recover_one(index, tx, chain_id),
        })
        .collect()
}
