//! The properties every fuzz target checks, shared with `crates/codec/tests/fuzz_corpus.rs`
//! which replays the checked-in corpus under `cargo test`: hostile bytes give a typed
//! error, or they decode to something whose canonical encoding is exactly the input.

use stave_codec::{
    decode_block, decode_transactions, encode_block, encode_transactions, max_txs_for, split_block,
};
use stave_primitives::{
    SignedTx, decode_and_validate, decode_stored_account, decode_stored_diff,
    decode_stored_receipts, encode_stored_account, encode_stored_diff, encode_stored_receipts,
};

/// The offset-indexed transaction list decoder.
pub fn indexed_list(data: &[u8]) {
    if let Ok(txs) = decode_transactions(data) {
        let again = encode_transactions(&txs).expect("a decoded list re-encodes");
        assert_eq!(again, data, "decoding accepted a non-canonical list");
    }
}

/// The block decoder: the hash must be the header's, the encoding the input, the
/// transactions no more than the gas limit allows; splitting the block (its header
/// without its transactions) accepts whatever decoding does, with the same header and
/// hash.
pub fn block(data: &[u8]) {
    let split = split_block(data);
    if let Ok(sealed) = decode_block(data) {
        assert_eq!(sealed.hash(), sealed.header().hash_slow());
        assert!(sealed.transactions().len() <= max_txs_for(sealed.header()));
        let parts = split.expect("a block that decodes splits");
        assert_eq!(
            (&parts.header, parts.hash),
            (sealed.header(), sealed.hash())
        );
        let again = encode_block(&sealed.unseal()).expect("a decoded block re-encodes");
        assert_eq!(again, data, "decoding accepted a non-canonical block");
    }
}

/// Transaction decoding and stateless validation (the path of `stave tx inspect`).
pub fn transaction(data: &[u8]) {
    if let Ok(tx) = SignedTx::decode(data) {
        assert_eq!(
            tx.encoded(),
            data,
            "decoding accepted a non-canonical transaction"
        );
    }
    let _ = decode_and_validate(data, Some(1));
}

/// Stored receipts (without blooms): what decodes re-encodes to exactly the input.
pub fn stored_receipts(data: &[u8]) {
    if let Ok(receipts) = decode_stored_receipts(data) {
        assert_eq!(
            encode_stored_receipts(&receipts),
            data,
            "decoding accepted non-canonical stored receipts"
        );
    }
}

/// A state history account: what decodes re-encodes to exactly the input.
pub fn stored_account(data: &[u8]) {
    if let Ok(account) = decode_stored_account(data) {
        assert_eq!(
            encode_stored_account(&account),
            data,
            "decoding accepted a non-canonical history account"
        );
    }
}

/// A journaled state diff: what decodes re-encodes to exactly the input.
pub fn stored_diff(data: &[u8]) {
    if let Ok(diff) = decode_stored_diff(data) {
        assert_eq!(
            encode_stored_diff(&diff),
            data,
            "decoding accepted a non-canonical stored diff"
        );
    }
}
