//! Blocks on uncommitted parents, for consensus: a proposal is built ([`Chain::prepare_on`])
//! or a received one validated ([`Chain::validate_on`]) on top of speculative ancestors,
//! and committed once final ([`Chain::commit_speculative`]). Building on the stored head
//! ([`Chain::prepare`], [`Chain::build`]) is the case without ancestors.

use stave_codec::{encode_block_parts, encode_transactions};
use stave_exec::{BlockInput, Mode, Overridden, StateOverride};
use stave_primitives::{Block, Header, RecoveredTx, StateDiff, StateReader};
use stave_state::{Snapshot, SpeculativeLayer};

use super::{
    Chain,
    commit::{Flush, PreparedBlock},
    execute::{ExecuteOn, Executed, Prefetch},
    receive::{Incoming, Received},
    stage::stage,
};
use crate::error::ImportError;

/// A block executed on top of the stored head, or of other speculative blocks, but not
/// committed: a consensus proposal that may still be abandoned. Blocks built on it read its
/// state through its layer; [`Chain::commit_speculative`] commits it once it is final.
#[derive(Clone)]
pub struct SpeculativeBlock {
    /// The block and what the commit stage writes for it (its state is in `layer`).
    pub prepared: PreparedBlock,
    /// Its transactions with their senders, for the txpool once it commits.
    pub recovered: Vec<RecoveredTx>,
    layer: SpeculativeLayer,
}

impl SpeculativeBlock {
    /// Holds `prepared`'s state changes in a layer later blocks can execute on.
    pub fn new(mut prepared: PreparedBlock, recovered: Vec<RecoveredTx>) -> Self {
        let diff = std::mem::take(&mut prepared.diff);
        let layer = SpeculativeLayer::new(prepared.block.number(), prepared.block.hash(), diff);
        Self {
            prepared,
            recovered,
            layer,
        }
    }
}

impl<'s> Chain<'s> {
    /// Executes `txs` as the next block (invalid ones are left out) and returns it with
    /// everything the commit stage writes, without committing it.
    pub fn prepare(
        &self,
        txs: &[RecoveredTx],
        timestamp: u64,
    ) -> Result<PreparedBlock, ImportError> {
        self.prepare_on(&[], txs, timestamp)
    }

    /// Builds the next block from `txs` (invalid ones are left out), commits it, and
    /// returns it encoded (see docs/wire-formats.md, block form).
    pub fn build(&mut self, txs: Vec<RecoveredTx>, timestamp: u64) -> Result<Vec<u8>, ImportError> {
        let mut prepared = self.prepare(&txs, timestamp)?;
        self.commit(&mut prepared)?;
        self.flush()?;
        Ok(encode_block_parts(prepared.block.header(), &prepared.body))
    }

    /// The header a block on top of `ancestors` (speculative blocks, oldest first; none:
    /// the stored head) has as its parent.
    pub fn parent_of(&self, ancestors: &[&SpeculativeBlock]) -> Result<Header, ImportError> {
        match ancestors.last() {
            Some(newest) => Ok(newest.prepared.block.header().clone()),
            None => self.head_header(),
        }
    }

    /// The parent header and the state a block on top of `ancestors` (speculative blocks,
    /// oldest first, the first a child of the stored head) executes on.
    pub(super) fn tip(
        &self,
        ancestors: &[&SpeculativeBlock],
    ) -> Result<(Header, Snapshot<'_, 's>), ImportError> {
        let state = self.layers.latest();
        if ancestors.is_empty() {
            return Ok((self.head_header()?, state));
        }
        let (head_number, head_hash) = self.head()?;
        let mut parent = (head_number, head_hash);
        for ancestor in ancestors {
            let block = &ancestor.prepared.block;
            if block.number() != parent.0 + 1 || block.header().parent_hash != parent.1 {
                return Err(ImportError::NotChild {
                    number: block.number(),
                    head_number: parent.0,
                    head: parent.1,
                });
            }
            parent = (block.number(), block.hash());
        }
        let layers: Vec<SpeculativeLayer> = ancestors.iter().map(|b| b.layer.clone()).collect();
        Ok((self.parent_of(ancestors)?, state.with_speculative(&layers)))
    }

    /// [`Chain::prepare`] on top of `ancestors`: speculative blocks, oldest first, the
    /// first a child of the stored head (none: on the head itself).
    pub fn prepare_on(
        &self,
        ancestors: &[&SpeculativeBlock],
        txs: &[RecoveredTx],
        timestamp: u64,
    ) -> Result<PreparedBlock, ImportError> {
        let (parent, state) = self.tip(ancestors)?;
        // Transactions the pool admitted before a permission changed are left out.
        let txs = super::permissions::permitted(&state, txs)?;
        self.prepare_over(&parent, &state, &txs, timestamp, None)
    }

    /// [`Chain::prepare_on`] the stored head with `edits` made to its state first: a dev
    /// node's `anvil_setBalance` and the like, committed with the block it mines next. The
    /// block's state root covers the edits, so only a chain that never edits its state
    /// can be imported again elsewhere.
    pub fn prepare_edited(
        &self,
        txs: &[RecoveredTx],
        timestamp: u64,
        edits: &StateOverride,
    ) -> Result<PreparedBlock, ImportError> {
        let (parent, state) = self.tip(&[])?;
        let edited = Overridden::new(&state, Some(edits), None)
            .map_err(|error| ImportError::Edit(error.to_string()))?;
        let txs = super::permissions::permitted(&edited, txs)?;
        let before = edited
            .diff()
            .map_err(|error| ImportError::Edit(error.to_string()))?;
        self.prepare_over(&parent, &edited, &txs, timestamp, Some(before))
    }

    /// Builds a block of `txs` (those of them that execute) on `parent`, whose state is
    /// `state`, without the permission check [`Chain::prepare_on`] makes first.
    /// `before`, if given, are changes made to `state` before the block (see
    /// [`Chain::prepare_edited`]): `state` already reads them, and they are committed with
    /// the block's own.
    pub(super) fn prepare_over(
        &self,
        parent: &Header,
        state: &dyn StateReader,
        txs: &[RecoveredTx],
        timestamp: u64,
        before: Option<StateDiff>,
    ) -> Result<PreparedBlock, ImportError> {
        let mut header = Header {
            parent_hash: parent.hash_slow(),
            number: parent.number + 1,
            timestamp,
            gas_limit: parent.gas_limit,
            base_fee_per_gas: parent.base_fee_per_gas,
            ..Header::default()
        };
        let (outcome, _) = stage("execute", header.number, || {
            self.beside_prefetch(&header, txs, || {
                self.execute(
                    BlockInput::new(state, self.env(&header), txs, Mode::Build),
                    ExecuteOn::AllThreads,
                )
            })
        });
        let outcome = match before {
            Some(before) => outcome?.after(before),
            None => outcome?,
        };
        let (transactions, senders) = outcome
            .included
            .iter()
            .map(|&i| (txs[i].tx.clone(), txs[i].sender))
            .unzip();
        header.gas_used = outcome.gas_used;
        (header.receipts_root, header.state_root) =
            outcome.roots(parent.state_root, self.leaf_hasher(ExecuteOn::AllThreads));
        let mut block = Block {
            header,
            transactions,
        };
        block.header.transactions_root = block.compute_transactions_root();
        let body = encode_transactions(&block.transactions)?;
        Ok(PreparedBlock {
            block: block.seal(),
            body,
            receipts: outcome.receipts,
            senders,
            diff: outcome.diff,
        })
    }

    /// Decodes, verifies and executes an encoded block on top of `ancestors` (speculative
    /// blocks, oldest first, the first a child of the stored head) and checks its header,
    /// without committing it: a consensus engine's verification of a proposal (or of a
    /// finalized ancestor it lacks, which may come with agreed senders). Its timestamp
    /// must lie between its parent's and `latest_timestamp`.
    pub fn validate_on<'b>(
        &self,
        ancestors: &[&SpeculativeBlock],
        incoming: impl Into<Incoming<'b>>,
        latest_timestamp: u64,
    ) -> Result<SpeculativeBlock, ImportError> {
        let (parent, state) = self.tip(ancestors)?;
        let received = self.receive(incoming.into())?;
        let (number, header) = match &received {
            Received::Stored { block, .. } => (block.number(), block.header()),
            Received::Verified(verified) => (verified.block.number(), verified.block.header()),
        };
        if number != parent.number + 1 || header.parent_hash != parent.hash_slow() {
            return Err(ImportError::NotChild {
                number,
                head_number: parent.number,
                head: parent.hash_slow(),
            });
        }
        let timestamp = header.timestamp;
        if timestamp < parent.timestamp || timestamp > latest_timestamp {
            return Err(ImportError::BadTimestamp {
                number,
                timestamp,
                earliest: parent.timestamp,
                latest: latest_timestamp,
            });
        }
        // A block already stored at this height is final: nothing may replace it.
        let Received::Verified(verified) = received else {
            return Err(ImportError::NotChild {
                number,
                head_number: parent.number,
                head: parent.hash_slow(),
            });
        };
        let Executed {
            block,
            body,
            recovered,
            outcome,
            ..
        } = self.execute_verified(
            verified,
            &state,
            &parent,
            ExecuteOn::AllThreads,
            Prefetch::Beside,
        )?;
        Ok(SpeculativeBlock::new(
            PreparedBlock::received(block, body, outcome, &recovered),
            recovered,
        ))
    }

    /// Commits a speculative block once it is final (it must be a child of the head) and
    /// hands back the block (its state now in the layers) and its transactions.
    pub fn commit_speculative(
        &self,
        block: SpeculativeBlock,
    ) -> Result<(PreparedBlock, Vec<RecoveredTx>), ImportError> {
        let SpeculativeBlock {
            mut prepared,
            recovered,
            layer,
        } = block;
        prepared.diff = layer.into_diff();
        let (committed, _) = stage("commit", prepared.block.number(), || {
            self.commit_parts(&mut prepared, Flush::Later)
        });
        committed.map(|_| (prepared, recovered))
    }
}
