//! A Stave block as the consensus engine sees it: its wire bytes (docs/wire-formats.md), its
//! height, its hash and its parent's hash.

use std::sync::Arc;

use alloy_primitives::B256;
use bytes::{Buf, BufMut};
use commonware_codec::{EncodeSize, Error as CodecError, Read, Write};
use commonware_consensus::{Block, BoundedBlock, Heightable, types::Height};
use commonware_cryptography::{Digestible, sha256::Digest};
use stave_primitives::{ChainSpec, Header, SealedBlock};

/// Largest encoded block a peer may send (the network's frame limit, docs/wire-formats.md).
pub const MAX_BLOCK_BYTES: usize = 32 << 20;

/// A block agreed on by consensus: the exact bytes the import pipeline decodes, and the
/// header fields the engine orders blocks by. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ConsensusBlock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    header: Header,
    hash: B256,
    transactions: usize,
    bytes: Vec<u8>,
}

/// The engine's name for a block: its Stave block hash (keccak of the header), carried in
/// commonware's 32-byte digest type.
pub fn digest_of(hash: B256) -> Digest {
    Digest(hash.0)
}

/// The block hash a digest names.
pub fn hash_of(digest: &Digest) -> B256 {
    B256::from(digest.0)
}

impl ConsensusBlock {
    /// `block` with its wire form `bytes` (which must encode it).
    pub fn new(block: &SealedBlock, bytes: Vec<u8>) -> Self {
        Self(Arc::new(Inner {
            header: block.header().clone(),
            hash: block.hash(),
            transactions: block.transactions().len(),
            bytes,
        }))
    }

    /// Block 0 of the chain `spec` describes, with its (empty) wire body.
    pub fn genesis(spec: &ChainSpec) -> Self {
        let (block, _) = stave_node::genesis(spec);
        let body = stave_codec::encode_transactions(&[])
            .expect("an empty transaction list always encodes");
        Self::new(
            &block,
            stave_codec::encode_block_parts(block.header(), &body),
        )
    }

    /// Decodes a block received from a peer, checking its body against the header's
    /// transactions root, so a block is never accepted with a body other than its own.
    pub fn decode(bytes: Vec<u8>) -> Result<Self, stave_codec::CodecError> {
        let block = stave_codec::decode_block(&bytes)?;
        Ok(Self::new(&block, bytes))
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.0.header
    }

    /// The block hash.
    pub fn hash(&self) -> B256 {
        self.0.hash
    }

    /// The block number.
    pub fn number(&self) -> u64 {
        self.0.header.number
    }

    /// How many transactions the block carries.
    pub fn transaction_count(&self) -> usize {
        self.0.transactions
    }

    /// The wire form (docs/wire-formats.md, block wire form).
    pub fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }
}

impl Digestible for ConsensusBlock {
    type Digest = Digest;

    fn digest(&self) -> Digest {
        digest_of(self.0.hash)
    }
}

impl Heightable for ConsensusBlock {
    fn height(&self) -> Height {
        Height::new(self.number())
    }
}

impl Block for ConsensusBlock {
    fn parent(&self) -> Digest {
        digest_of(self.0.header.parent_hash)
    }
}

impl Write for ConsensusBlock {
    fn write(&self, buf: &mut impl BufMut) {
        buf.put_u32(self.0.bytes.len() as u32);
        buf.put_slice(&self.0.bytes);
    }
}

impl EncodeSize for ConsensusBlock {
    fn encode_size(&self) -> usize {
        4 + self.0.bytes.len()
    }
}

impl Read for ConsensusBlock {
    type Cfg = ();

    fn read_cfg(buf: &mut impl Buf, _: &()) -> Result<Self, CodecError> {
        if buf.remaining() < 4 {
            return Err(CodecError::EndOfBuffer);
        }
        let len = buf.get_u32() as usize;
        if len > MAX_BLOCK_BYTES {
            return Err(CodecError::InvalidLength(len));
        }
        if buf.remaining() < len {
            return Err(CodecError::EndOfBuffer);
        }
        let mut bytes = vec![0; len];
        buf.copy_to_slice(&mut bytes);
        // More transactions than the gas limit allows are refused before any is decoded
        // (decoding allocates per transaction the list declares).
        stave_net::compact::check_block(&bytes)
            .map_err(|error| CodecError::Wrapped("stave block", Box::new(error)))?;
        Self::decode(bytes).map_err(|error| CodecError::Wrapped("stave block", Box::new(error)))
    }
}

impl BoundedBlock for ConsensusBlock {
    fn max_encode_size(_: &()) -> usize {
        4 + MAX_BLOCK_BYTES
    }
}
