//! The import pipeline and block building over one data dir.
//!
//! Import stages, in order, for every received block: decode (offset-indexed body, on all
//! cores, checked against `transactions_root`) → verify (senders on the check queue, the
//! sender cache first) → execute (speculative parallel revm, against committed state) →
//! check the header's gas used, receipts root and state root → commit (one LMDB write).
//! Stages run one block at a time here; overlapping consecutive blocks is issue 8.

use alloy_primitives::B256;
use stave_codec::{decode_block, encode_block_parts, encode_transactions};
use stave_exec::{ExecutionOutcome, Mode, ParallelExecutor};
use stave_primitives::{
    Block, ChainSpec, Header, Receipt, RecoveredTx, SealedBlock, StateDiff, merkle_root,
    receipt_hash, state_root,
};
use stave_storage::{
    KvStore, Table,
    commit::{BlockToCommit, Committed, commit_block, head, header},
};
use stave_verify::Verifier;

use crate::{disk_state::DiskState, error::ImportError};

/// The receipts root of a block: the Merkle root over its receipts' hashes.
fn receipts_root(receipts: &[Receipt]) -> B256 {
    merkle_root(&receipts.iter().map(receipt_hash).collect::<Vec<_>>())
}

/// Block 0 of a chain and the state it creates.
pub fn genesis(spec: &ChainSpec) -> (SealedBlock, StateDiff) {
    let diff = StateDiff::from_genesis(spec);
    let header = Header {
        number: 0,
        timestamp: spec.genesis().timestamp,
        gas_limit: spec.gas_limit(),
        base_fee_per_gas: spec.base_fee(),
        transactions_root: merkle_root(&[]),
        receipts_root: merkle_root(&[]),
        state_root: state_root(B256::ZERO, &diff),
        extra_data: spec.genesis().extra_data.clone(),
        ..Header::default()
    };
    (
        Block {
            header,
            transactions: Vec::new(),
        }
        .seal(),
        diff,
    )
}

/// A data dir's chain: its store, its chain id, and the verify and execute stages.
pub struct Chain<'s> {
    store: &'s dyn KvStore,
    chain_id: u64,
    verifier: Verifier,
    executor: ParallelExecutor,
}

/// What [`Chain::import`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// The block's number.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// False when the block was already stored (a redelivery).
    pub new: bool,
}

impl<'s> Chain<'s> {
    /// Opens the chain in `store`, committing the genesis block if the store is empty
    /// (and checking it is this genesis otherwise). Stages run on `threads` threads.
    pub fn open(
        store: &'s dyn KvStore,
        spec: &ChainSpec,
        threads: usize,
    ) -> Result<Self, ImportError> {
        let (block, diff) = genesis(spec);
        let body = encode_transactions(&[])?;
        let input = BlockToCommit {
            block: &block,
            body: &body,
            receipts: &[],
            diff: &diff,
        };
        commit_block(store, &input, true)?;
        Ok(Self {
            store,
            chain_id: spec.chain_id(),
            verifier: Verifier::new(spec.chain_id(), threads, None),
            executor: ParallelExecutor::new(threads),
        })
    }

    /// The stored head: number and hash.
    pub fn head(&self) -> Result<(u64, B256), ImportError> {
        head(self.store)?.ok_or(ImportError::NoGenesis)
    }

    fn head_header(&self) -> Result<Header, ImportError> {
        let (number, _) = self.head()?;
        header(self.store, number)?.ok_or(ImportError::NoGenesis)
    }

    fn execute(
        &self,
        header: &Header,
        txs: &[RecoveredTx],
        mode: Mode,
    ) -> Result<ExecutionOutcome, ImportError> {
        self.executor
            .execute(
                &DiskState::new(self.store),
                self.chain_id,
                header,
                txs,
                mode,
            )
            .map_err(|source| ImportError::Execute {
                number: header.number,
                source,
            })
    }

    /// Builds the next block from `txs` (invalid ones are left out), commits it, and
    /// returns it encoded (DESIGN.md §3.2).
    pub fn build(&mut self, txs: Vec<RecoveredTx>, timestamp: u64) -> Result<Vec<u8>, ImportError> {
        let parent = self.head_header()?;
        let mut header = Header {
            parent_hash: parent.hash_slow(),
            number: parent.number + 1,
            timestamp,
            gas_limit: parent.gas_limit,
            base_fee_per_gas: parent.base_fee_per_gas,
            ..Header::default()
        };
        let outcome = self.execute(&header, &txs, Mode::Build)?;
        let transactions: Vec<_> = outcome
            .included
            .iter()
            .map(|&i| txs[i].tx.clone())
            .collect();
        header.gas_used = outcome.gas_used;
        header.receipts_root = receipts_root(&outcome.receipts);
        header.state_root = state_root(parent.state_root, &outcome.diff);
        let mut block = Block {
            header,
            transactions,
        };
        block.header.transactions_root = block.compute_transactions_root();
        let body = encode_transactions(&block.transactions)?;
        let encoded = encode_block_parts(&block.header, &body);
        let block = block.seal();
        let input = BlockToCommit {
            block: &block,
            body: &body,
            receipts: &outcome.receipts,
            diff: &outcome.diff,
        };
        commit_block(self.store, &input, true)?;
        Ok(encoded)
    }

    /// Block `number` in its wire form (DESIGN.md §3.2), as `stave export` writes it.
    pub fn encoded_block(&self, number: u64) -> Result<Option<Vec<u8>>, ImportError> {
        let Some(header) = header(self.store, number)? else {
            return Ok(None);
        };
        let body = self
            .store
            .get(Table::Bodies, &number.to_be_bytes())?
            .unwrap_or_default();
        Ok(Some(encode_block_parts(&header, &body)))
    }

    /// Runs an encoded block through decode, verify, execute and commit. A block already
    /// stored is accepted again without effect.
    pub fn import(&mut self, bytes: &[u8]) -> Result<Imported, ImportError> {
        let block = decode_block(bytes)?;
        let number = block.number();
        let (head_number, head_hash) = self.head()?;
        if number <= head_number {
            let stored = header(self.store, number)?.map(|h| h.hash_slow());
            if stored == Some(block.hash()) {
                return Ok(Imported {
                    number,
                    hash: block.hash(),
                    new: false,
                });
            }
        }
        if number != head_number + 1 || block.header().parent_hash != head_hash {
            return Err(ImportError::NotChild {
                number,
                parent: block.header().parent_hash,
                head_number,
                head: head_hash,
            });
        }
        let parent = self.head_header()?;
        let recovered = self
            .verifier
            .verify(block.transactions().to_vec())
            .map_err(|source| ImportError::Verify { number, source })?;
        let outcome = self.execute(block.header(), &recovered, Mode::Validate)?;
        let claims = [
            (
                "gas_used",
                block.header().gas_used.to_string(),
                outcome.gas_used.to_string(),
            ),
            (
                "receipts_root",
                block.header().receipts_root.to_string(),
                receipts_root(&outcome.receipts).to_string(),
            ),
            (
                "state_root",
                block.header().state_root.to_string(),
                state_root(parent.state_root, &outcome.diff).to_string(),
            ),
        ];
        if let Some((field, claimed, computed)) = claims.into_iter().find(|(_, a, b)| a != b) {
            return Err(ImportError::HeaderMismatch {
                number,
                field,
                claimed,
                computed,
            });
        }
        // Decoding accepted only the canonical encoding, so this is the body as received.
        let body = encode_transactions(block.transactions())?;
        let input = BlockToCommit {
            block: &block,
            body: &body,
            receipts: &outcome.receipts,
            diff: &outcome.diff,
        };
        let committed = commit_block(self.store, &input, true)?;
        Ok(Imported {
            number,
            hash: block.hash(),
            new: committed == Committed::New,
        })
    }
}
