//! The block wire form (see docs/wire-formats.md, block wire form): `RLP[header,
//! body_bytes]`, where `body_bytes` is an RLP byte string holding the offset-indexed
//! transaction list.
//!
//! Decoding checks the body against the header's `transactions_root` before returning, so
//! no later stage ever sees a body that its header does not commit to; and before any
//! transaction is decoded, that the body holds no more transactions than the header's gas
//! limit allows ([`max_txs_for`]), so nothing is allocated for more.

use alloy_primitives::{B256, keccak256};
use alloy_rlp::{Decodable, Encodable};
use stave_primitives::{Block, Header, SealedBlock, SignedTx, merkle_root};

use crate::{
    error::CodecError,
    indexed::IndexedList,
    transactions::{decode_list, decode_list_serial, encode_transactions},
};

/// The least gas any transaction uses (a plain transfer's intrinsic gas).
const MIN_TX_GAS: u64 = 21_000;

/// Most transactions a block with `header` can hold: each costs at least 21,000 gas, and
/// the block's gas is at most its gas limit. A block declaring more is refused before
/// anything is allocated for its transactions, wherever it comes from (a peer, a file).
pub fn max_txs_for(header: &Header) -> usize {
    usize::try_from(header.gas_limit / MIN_TX_GAS).unwrap_or(usize::MAX)
}

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
    /// body's bytes (a node stores them as received). A body of more transactions than
    /// the gas limit allows ([`max_txs_for`]) is refused before any is decoded.
    pub fn seal(self) -> Result<SealedBlock, CodecError> {
        self.seal_with(decode_list)
    }

    /// [`BlockParts::seal`] with the transactions decoded on the calling thread: the
    /// serial baseline of the decode stage.
    pub fn seal_serial(self) -> Result<SealedBlock, CodecError> {
        self.seal_with(decode_list_serial)
    }

    fn seal_with(
        self,
        decode: fn(&IndexedList<'_>) -> Result<Vec<SignedTx>, CodecError>,
    ) -> Result<SealedBlock, CodecError> {
        let Self { header, hash, body } = self;
        let list = IndexedList::parse(body)?;
        let max = max_txs_for(&header);
        if list.len() > max {
            return Err(CodecError::TooManyTransactions {
                count: list.len(),
                max,
            });
        }
        let transactions = decode(&list)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_indexed;

    /// A block of `gas_limit` whose body holds `count` empty items (no transaction
    /// decodes from one: only the count check can refuse it first).
    fn block_of(gas_limit: u64, count: usize) -> Vec<u8> {
        let header = Header {
            gas_limit,
            ..Header::default()
        };
        let items = vec![Vec::<u8>::new(); count];
        let body =
            encode_indexed(&items, |item, out| out.extend_from_slice(item)).expect("encodes");
        encode_block_parts(&header, &body)
    }

    #[test]
    fn a_body_of_more_transactions_than_the_gas_limit_allows_is_refused_before_decoding() {
        assert_eq!(
            max_txs_for(&Header {
                gas_limit: 42_000,
                ..Header::default()
            }),
            2
        );
        // The fuzz corpus holds this block, so the fuzzer starts from it.
        assert_eq!(
            block_of(42_000, 3),
            include_bytes!("../../../fuzz/corpus/block/over_gas_limit")
        );
        let (over, within) = (block_of(42_000, 3), block_of(42_000, 2));
        for seal in [BlockParts::seal, BlockParts::seal_serial] {
            let refused = seal(split_block(&over).expect("splits"));
            assert_eq!(
                refused.expect_err("3 transactions of at least 21,000 gas in 42,000"),
                CodecError::TooManyTransactions { count: 3, max: 2 }
            );
            // Within the cap, the items are decoded (and these fail as transactions).
            let decoded = seal(split_block(&within).expect("splits"));
            assert!(
                matches!(decoded, Err(CodecError::Transaction { index: 0, .. })),
                "{decoded:?}"
            );
        }
    }
}
