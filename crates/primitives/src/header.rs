//! Block headers, blocks, and their sealed (hashed once) forms.

use alloy_primitives::{Address, B256, Bytes, keccak256};
use alloy_rlp::{RlpDecodable, RlpEncodable};

use crate::{SignedTx, merkle::merkle_root};

/// A block header. Its RLP encoding is what the block hash commits to.
#[derive(Debug, Clone, Default, PartialEq, Eq, RlpEncodable, RlpDecodable)]
pub struct Header {
    /// Hash of the parent block's header.
    pub parent_hash: B256,
    /// Height; genesis is 0.
    pub number: u64,
    /// Unix time in seconds at which the proposer built the block.
    pub timestamp: u64,
    /// Validator that proposed the block; fees are credited to it.
    pub proposer: Address,
    /// Most gas the block's transactions may use together.
    pub gas_limit: u64,
    /// Gas the block's transactions used.
    pub gas_used: u64,
    /// EIP-1559 base fee per gas, in wei.
    pub base_fee_per_gas: u64,
    /// [`merkle_root`] of the transaction hashes, so a body can be checked before execution.
    pub transactions_root: B256,
    /// [`crate::receipts_root`] of the block's receipts.
    pub receipts_root: B256,
    /// Commitment to the state after the block.
    pub state_root: B256,
    /// Free-form bytes from the proposer.
    pub extra_data: Bytes,
}

impl Header {
    /// keccak-256 of the RLP encoding. Costs a full encode: use [`SealedHeader`] to keep it.
    pub fn hash_slow(&self) -> B256 {
        keccak256(alloy_rlp::encode(self))
    }

    /// Computes the hash once and keeps it with the header.
    pub fn seal(self) -> SealedHeader {
        let hash = self.hash_slow();
        SealedHeader { header: self, hash }
    }
}

/// A header with its hash, computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedHeader {
    header: Header,
    hash: B256,
}

impl SealedHeader {
    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The block hash.
    pub fn hash(&self) -> B256 {
        self.hash
    }

    /// The header, giving up the hash.
    pub fn into_header(self) -> Header {
        self.header
    }
}

/// A block: a header and its transactions, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The header.
    pub header: Header,
    /// The transactions, in execution order.
    pub transactions: Vec<SignedTx>,
}

impl Block {
    /// The transactions root this block's body implies (computed, not read from the header).
    pub fn compute_transactions_root(&self) -> B256 {
        let hashes: Vec<B256> = self.transactions.iter().map(SignedTx::hash).collect();
        merkle_root(&hashes)
    }

    /// Hashes the header once.
    pub fn seal(self) -> SealedBlock {
        let header = self.header.seal();
        SealedBlock {
            header,
            transactions: self.transactions,
        }
    }
}

/// A block whose header hash has been computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBlock {
    header: SealedHeader,
    transactions: Vec<SignedTx>,
}

impl SealedBlock {
    /// Seals a header whose hash the caller already knows to be right (for example one
    /// read back from storage under that hash).
    pub fn new_unchecked(header: Header, hash: B256, transactions: Vec<SignedTx>) -> Self {
        Self {
            header: SealedHeader { header, hash },
            transactions,
        }
    }

    /// The sealed header.
    pub fn sealed_header(&self) -> &SealedHeader {
        &self.header
    }

    /// The header.
    pub fn header(&self) -> &Header {
        self.header.header()
    }

    /// The block hash.
    pub fn hash(&self) -> B256 {
        self.header.hash()
    }

    /// The block height.
    pub fn number(&self) -> u64 {
        self.header.header().number
    }

    /// The transactions, in order.
    pub fn transactions(&self) -> &[SignedTx] {
        &self.transactions
    }

    /// The unsealed block.
    pub fn unseal(self) -> Block {
        Block {
            header: self.header.into_header(),
            transactions: self.transactions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_rlp::Decodable;

    #[test]
    fn header_rlp_round_trips_and_hash_commits_to_every_field() {
        let header = Header {
            parent_hash: B256::repeat_byte(1),
            number: 7,
            timestamp: 1_700_000_000,
            proposer: Address::repeat_byte(2),
            gas_limit: 30_000_000,
            gas_used: 21_000,
            base_fee_per_gas: 7,
            transactions_root: B256::repeat_byte(3),
            receipts_root: B256::repeat_byte(4),
            state_root: B256::repeat_byte(5),
            extra_data: Bytes::from_static(b"stave"),
        };
        let bytes = alloy_rlp::encode(&header);
        assert_eq!(
            Header::decode(&mut bytes.as_slice()).expect("decodes"),
            header
        );
        let sealed = header.clone().seal();
        assert_eq!(sealed.hash(), keccak256(&bytes));
        let mut changed = header;
        changed.gas_used += 1;
        assert_ne!(changed.hash_slow(), sealed.hash());
    }
}
