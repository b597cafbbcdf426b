//! The receive stage: decode and verify. It needs no state, so it can run ahead of the
//! blocks before (`Chain::import_stream` receives block N+1 while block N executes).
//!
//! Input: an [`Incoming`] block (its wire form, perhaps with agreed senders). Output: a
//! [`Received`] block, either already stored (a redelivery, not verified again) or
//! [`Verified`]: decoded, checked against its transactions root, and its transactions'
//! senders recovered (or agreed) and their stateless rules checked.

use alloy_primitives::Address;
use stave_codec::split_block;
use stave_primitives::{RecoveredTx, SealedBlock};
use stave_storage::read::header;
use stave_verify::{VerifyError, verify_serial};

use super::{
    Chain,
    stage::{StageTimes, stage},
};
use crate::error::ImportError;

/// A block as it enters the chain, the receive stage's input: its wire form and, for a
/// finalized block a node catches up on, the senders of its transactions as enough
/// validators agree on them. Agreed senders skip recovery; the header's gas used and
/// roots still check the outcome, and a block that fails them is verified again from its
/// signatures.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'b> {
    /// The block's wire form (see docs/wire-formats.md, block form).
    pub bytes: &'b [u8],
    /// One sender per transaction, in block order, if agreed on.
    pub agreed_senders: Option<&'b [Address]>,
}

impl<'b> From<&'b [u8]> for Incoming<'b> {
    fn from(bytes: &'b [u8]) -> Self {
        Self {
            bytes,
            agreed_senders: None,
        }
    }
}

/// The receive stage's output.
pub(super) enum Received<'b> {
    /// The chain already stores this block: a redelivery, neither verified nor executed
    /// again.
    Stored {
        /// The block, decoded.
        block: SealedBlock,
        /// Time the decode stage took.
        times: StageTimes,
    },
    /// A block the chain does not store, decoded and verified: the execute stage's input.
    Verified(Verified<'b>),
}

/// A decoded block whose transactions have their senders.
pub(super) struct Verified<'b> {
    /// The block, its transactions root checked.
    pub(super) block: SealedBlock,
    /// Its body's bytes as received: the commit stage stores them as they are.
    pub(super) body: &'b [u8],
    /// Its transactions with their senders.
    pub(super) recovered: Vec<RecoveredTx>,
    /// Signatures the verify stage recovered (the rest came from the sender cache).
    pub(super) recoveries: u64,
    /// Whether the senders are agreed ones rather than recovered (see [`Incoming`]).
    pub(super) agreed: bool,
    /// Time the decode and verify stages took.
    pub(super) times: StageTimes,
}

impl Chain<'_> {
    /// The decode and verify stages. A block already stored skips verification; agreed
    /// senders skip recovery (the stateless rules still apply).
    pub(super) fn receive<'b>(&self, incoming: Incoming<'b>) -> Result<Received<'b>, ImportError> {
        let mut times = StageTimes::default();
        let (head_number, _) = self.head()?;
        // Spans and metrics carry the height the block should have; apply checks it.
        let expected = head_number + 1;
        let (decoded, elapsed) = stage("decode", expected, || {
            let parts = split_block(incoming.bytes)?;
            let body = parts.body;
            let block = if self.parallel() {
                parts.seal()
            } else {
                parts.seal_serial()
            };
            block.map(|block| (block, body))
        });
        times.decode = elapsed;
        let (block, body) = decoded?;
        let number = block.number();
        let stored = header(self.store, number)?.map(|h| h.hash_slow());
        if stored == Some(block.hash()) {
            return Ok(Received::Stored { block, times });
        }
        let agreed = incoming
            .agreed_senders
            .filter(|senders| senders.len() == block.transactions().len());
        let ((recovered, recoveries), elapsed) = stage("verify", number, || match agreed {
            Some(senders) => (self.with_senders(&block, senders), 0),
            None => self.recover(&block),
        });
        times.verify = elapsed;
        Ok(Received::Verified(Verified {
            block,
            body,
            recovered: recovered?,
            recoveries,
            agreed: agreed.is_some(),
            times,
        }))
    }

    /// Checks `block`'s transactions and recovers their senders (the sender cache
    /// first); also returns how many signatures it recovered.
    pub(super) fn recover(
        &self,
        block: &SealedBlock,
    ) -> (Result<Vec<RecoveredTx>, ImportError>, u64) {
        let txs = block.transactions().to_vec();
        let mut recoveries = 0;
        let recovered = if self.parallel() {
            let mut verifier = self.verifier.lock();
            let before = verifier.recoveries();
            let recovered = verifier.verify(txs);
            recoveries = verifier.recoveries() - before;
            recovered
        } else {
            verify_serial(txs, self.chain_id, self.cache.as_deref())
        };
        let recovered = recovered.map_err(|source| ImportError::Verify {
            number: block.number(),
            source: Box::new(source),
        });
        (recovered, recoveries)
    }

    /// `block`'s transactions with `senders` (one each), checked against the stateless
    /// rules but not recovered.
    fn with_senders(
        &self,
        block: &SealedBlock,
        senders: &[Address],
    ) -> Result<Vec<RecoveredTx>, ImportError> {
        metrics::counter!("stave_agreed_senders_total").increment(senders.len() as u64);
        block
            .transactions()
            .iter()
            .zip(senders)
            .enumerate()
            .map(|(index, (tx, &sender))| {
                tx.check_stateless(Some(self.chain_id))
                    .map_err(|source| ImportError::Verify {
                        number: block.number(),
                        source: Box::new(VerifyError::Invalid { index, source }),
                    })?;
                Ok(RecoveredTx {
                    tx: tx.clone(),
                    sender,
                })
            })
            .collect()
    }
}
