//! The standard Ethereum body form, an RLP list of transactions, kept as the baseline
//! `stave bench codec` measures the offset-indexed list against.
//!
//! A legacy transaction is an RLP list item; a typed one is an RLP string holding
//! `type || payload`. To find item i a decoder must read the headers of items 0..i.

use alloy_rlp::Encodable;
use rayon::prelude::*;
use stave_primitives::SignedTx;

use crate::{error::CodecError, indexed::MIN_ITEMS_PER_TASK};

/// Encodes transactions as a standard RLP list.
pub fn encode_rlp_list(txs: &[SignedTx]) -> Vec<u8> {
    let items: Vec<Vec<u8>> = txs.iter().map(SignedTx::encoded).collect();
    // A legacy tx is already an RLP list item; a typed one is wrapped as an RLP string.
    let item_len = |item: &Vec<u8>| {
        if is_legacy(item) {
            item.len()
        } else {
            item.as_slice().length()
        }
    };
    let payload_length: usize = items.iter().map(item_len).sum();
    let mut out = Vec::with_capacity(payload_length + 9);
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(&mut out);
    for item in &items {
        if is_legacy(item) {
            out.extend_from_slice(item);
        } else {
            item.as_slice().encode(&mut out);
        }
    }
    out
}

/// Decodes a standard RLP transaction list item after item, on the calling thread.
pub fn decode_rlp_list_serial(bytes: &[u8]) -> Result<Vec<SignedTx>, CodecError> {
    scan_rlp_list(bytes)?
        .into_iter()
        .enumerate()
        .map(|(index, span)| {
            SignedTx::decode(span).map_err(|source| CodecError::Transaction { index, source })
        })
        .collect()
}

/// Scans the item headers serially to find every item, then decodes the items on all
/// cores: the best a plain RLP body allows.
pub fn decode_rlp_list_scan_parallel(bytes: &[u8]) -> Result<Vec<SignedTx>, CodecError> {
    let spans = scan_rlp_list(bytes)?;
    spans
        .par_iter()
        .with_min_len(MIN_ITEMS_PER_TASK)
        .enumerate()
        .map(|(index, span)| {
            SignedTx::decode(span).map_err(|source| CodecError::Transaction { index, source })
        })
        .collect()
}

/// The canonical transaction bytes of every item of an RLP list, walking header to header.
fn scan_rlp_list(bytes: &[u8]) -> Result<Vec<&[u8]>, CodecError> {
    let mut buf = bytes;
    let outer = alloy_rlp::Header::decode(&mut buf)?;
    if !outer.list || outer.payload_length != buf.len() {
        return Err(CodecError::BlockRlp(alloy_rlp::Error::UnexpectedLength));
    }
    let mut spans = Vec::new();
    while !buf.is_empty() {
        let item_start = buf;
        let header = alloy_rlp::Header::decode(&mut buf)?;
        if header.payload_length > buf.len() {
            return Err(CodecError::BlockRlp(alloy_rlp::Error::InputTooShort));
        }
        let header_len = item_start.len() - buf.len();
        // A legacy tx is the whole list item; a typed tx is the string's payload.
        let span = if header.list {
            &item_start[..header_len + header.payload_length]
        } else {
            &buf[..header.payload_length]
        };
        spans.push(span);
        buf = &buf[header.payload_length..];
    }
    Ok(spans)
}

/// A legacy transaction's encoding starts with an RLP list header (0xc0 and above); a
/// typed one with its type byte (below 0x80).
fn is_legacy(encoded: &[u8]) -> bool {
    encoded.first().is_some_and(|b| *b >= 0xc0)
}
