//! The block wire form (see docs/wire-formats.md, block wire form): `RLP[header,
//! body_bytes]`, where `body_bytes` is an RLP byte string holding the offset-indexed
//! transaction list.
//!
//! Decoding checks the body against the header's `transactions_root` before returning, so
//! no later stage ever sees a body that its header does not commit to.

use alloy_primitives::{B256, keccak256};
use alloy_rlp::{Decodable, Encodable};
use stave_primitives::{Block, Header, SealedBlock, SignedTx, merkle_root};

use crate::{
    error::CodecError,
    transactions::{decode_transactions, decode_transactions_serial, encode_transactions},
};

/// Encodes a block: its header's RLP and its transactions as an offset-indexed list
/// (encoded on all cores), wrapped in one RLP list.
pub fn encode_block(block: &Block) -> Result<Vec<u8>, CodecError> {
    let body = encode_transactions(&block.transactions)?;
    Ok(encode_block_parts(&block.header, &body))
}

/// Wraps an already encoded body with its header (for bodies kept in their wire form).
pub fn encode_block_parts(header: &Header, body: &[u8]) -> Vec<u8> {
    let payload_length = header.length() + body.length();
    let mut out = Vec::with_capacity(payload_length + 9);
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(&mut out);
    header.encode(&mut out);
    body.encode(&mut out);
    out
}

/// Decodes a block and checks its body against its `transactions_root`.
///
/// The block hash is keccak-256 of the header bytes exactly as received, after checking
/// that they are the canonical encoding of the decoded header.
pub fn decode_block(bytes: &[u8]) -> Result<SealedBlock, CodecError> {
    split_block(bytes)?.seal()
}

/// A block's header, its hash and its body's bytes, before any transaction is decoded.
#[derive(Debug, Clone)]
pub struct BlockParts<'a> {
    /// The header.
    pub header: Header,
    /// keccak-256 of the header bytes as received (checked to be canonical).
    pub hash: B256,
    /// The offset-indexed transaction list, not yet checked against the header.
    pub body: &'a [u8],
}

/// Splits a block's wire form into its header (decoded and hashed) and its body's bytes,
/// without decoding the transactions: enough to tell which block the bytes claim to be,
/// not that the body is its own ([`decode_block`] checks that).
pub fn split_block(bytes: &[u8]) -> Result<BlockParts<'_>, CodecError> {
    let mut buf = bytes;
    let outer = alloy_rlp::Header::decode(&mut buf)?;
    if !outer.list {
        return Err(CodecError::BlockRlp(alloy_rlp::Error::UnexpectedString));
    }
    if outer.payload_length > buf.len() {
        return Err(CodecError::BlockRlp(alloy_rlp::Error::InputTooShort));
    }
    if outer.payload_length < buf.len() {
        return Err(CodecError::TrailingBlockBytes(
            buf.len() - outer.payload_length,
        ));
    }
    let header_start = buf;
    let header = Header::decode(&mut buf)?;
    let header_bytes = &header_start[..header_start.len() - buf.len()];
    if header.length() != header_bytes.len() {
        return Err(CodecError::NonCanonicalHeader);
    }
    let body = alloy_rlp::Header::decode_bytes(&mut buf, false)?;
    if !buf.is_empty() {
        return Err(CodecError::BlockRlp(alloy_rlp::Error::ListLengthMismatch {
            expected: outer.payload_length,
            got: outer.payload_length - buf.len(),
        }));
    }
    Ok(BlockParts {
        hash: keccak256(header_bytes),
        header,
        body,
    })
}

impl BlockParts<'_> {
    /// Decodes the body's transactions on all cores and checks them against the header's
    /// `transactions_root`: the rest of [`decode_block`], for a caller that keeps the
    /// body's bytes (a node stores them as received).
    pub fn seal(self) -> Result<SealedBlock, CodecError> {
        self.seal_with(decode_transactions)
    }

    /// [`BlockParts::seal`] with the transactions decoded on the calling thread: the
    /// serial baseline of the decode stage.
    pub fn seal_serial(self) -> Result<SealedBlock, CodecError> {
        self.seal_with(decode_transactions_serial)
    }

    fn seal_with(
        self,
        decode_list: fn(&[u8]) -> Result<Vec<SignedTx>, CodecError>,
    ) -> Result<SealedBlock, CodecError> {
        let Self { header, hash, body } = self;
        let transactions = decode_list(body)?;
        let hashes: Vec<B256> = transactions.iter().map(SignedTx::hash).collect();
        let transactions_root = merkle_root(&hashes);
        if transactions_root != header.transactions_root {
            return Err(CodecError::TransactionsRootMismatch {
                expected: header.transactions_root,
                computed: transactions_root,
            });
        }
        Ok(SealedBlock::new_unchecked(header, hash, transactions))
    }
}
