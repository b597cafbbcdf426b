//! Round trips of real signed transactions, and hostile bytes: every mutation and every
//! truncation of a valid encoding is either a valid list or a typed error, never a panic.

mod support;

use alloy_primitives::{Address, B256, Bytes};
use proptest::prelude::*;
use stave_codec::{
    BlockParts, CodecError, IndexedList, decode_block, decode_transactions,
    decode_transactions_serial, encode_block, encode_transactions, split_block,
};
use stave_primitives::{Block, Header, SignedTx, decode_and_validate};
use support::mixed_tx;

fn txs(n: u64, data_len: usize) -> Vec<SignedTx> {
    (0..n).map(|i| mixed_tx(i, data_len)).collect()
}

fn block_of(transactions: Vec<SignedTx>) -> Block {
    let mut block = Block {
        header: Header {
            parent_hash: B256::repeat_byte(1),
            number: 9,
            proposer: Address::repeat_byte(2),
            gas_limit: 30_000_000,
            extra_data: Bytes::from_static(b"stave"),
            ..Header::default()
        },
        transactions,
    };
    block.header.transactions_root = block.compute_transactions_root();
    block
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn decode_inverts_encode_for_random_lists(seeds in prop::collection::vec((0u64..1_000, 0usize..300), 0..40)) {
        let list: Vec<SignedTx> = seeds.iter().map(|(i, len)| mixed_tx(*i, *len)).collect();
        let bytes = encode_transactions(&list).expect("encodes");
        prop_assert_eq!(bytes.len(), 4 * list.len() + 8 + list.iter().map(SignedTx::encoded_len).sum::<usize>());
        let decoded = decode_transactions(&bytes).expect("decodes");
        prop_assert_eq!(&decoded, &list);
        prop_assert_eq!(&decode_transactions_serial(&bytes).expect("decodes"), &list);
        for (tx, original) in decoded.iter().zip(&list) {
            prop_assert_eq!(tx.hash(), original.hash());
        }
        let block = block_of(list);
        let sealed = decode_block(&encode_block(&block).expect("encodes")).expect("decodes");
        prop_assert_eq!(sealed.hash(), block.header.hash_slow());
        prop_assert_eq!(sealed.unseal(), block);
    }
}

#[test]
fn zero_and_one_item_lists_round_trip() {
    for n in [0, 1] {
        let list = txs(n, 3);
        let bytes = encode_transactions(&list).expect("encodes");
        assert_eq!(decode_transactions(&bytes).expect("decodes"), list);
    }
}

#[test]
fn every_item_decodes_to_a_tx_that_passes_validation() {
    let list = txs(8, 10);
    let bytes = encode_transactions(&list).expect("encodes");
    let view = IndexedList::parse(&bytes).expect("valid");
    for (i, item) in view.iter().enumerate() {
        let tx = decode_and_validate(item, Some(1337)).expect("valid tx");
        assert_eq!(tx.tx.hash(), list[i].hash());
    }
}

#[test]
fn every_single_byte_mutation_decodes_or_is_an_error() {
    let list = txs(4, 2);
    let bytes = encode_transactions(&list).expect("encodes");
    let block_bytes = encode_block(&block_of(list)).expect("encodes");
    for original in [&bytes, &block_bytes] {
        for at in 0..original.len() {
            for delta in [1u8, 0x80, 0xff] {
                let mut mutated = original.clone();
                mutated[at] = mutated[at].wrapping_add(delta);
                // Either outcome is fine; reaching the next line without a panic is the test.
                let _ = decode_transactions(&mutated);
                let _ = decode_block(&mutated);
                assert_eq!(
                    decode_block(&mutated),
                    split_block(&mutated).and_then(BlockParts::seal_serial),
                    "at {at}"
                );
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    let list = txs(3, 5);
    let bytes = encode_transactions(&list).expect("encodes");
    for len in 0..bytes.len() {
        assert!(
            decode_transactions(&bytes[..len]).is_err(),
            "truncated to {len}"
        );
    }
    let block_bytes = encode_block(&block_of(list)).expect("encodes");
    for len in 0..block_bytes.len() {
        assert!(
            decode_block(&block_bytes[..len]).is_err(),
            "block truncated to {len}"
        );
    }
}

#[test]
fn rejects_an_item_that_does_not_decode_to_exactly_its_span() {
    let list = txs(3, 0);
    let mut bytes = encode_transactions(&list).expect("encodes");
    // Move the boundary between items 0 and 1 one byte later: item 0 gets a trailing byte.
    let at = 4 + 4;
    let offset = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) + 1;
    bytes[at..at + 4].copy_from_slice(&offset.to_le_bytes());
    assert!(matches!(
        decode_transactions(&bytes),
        Err(CodecError::Transaction { index: 0, .. })
    ));
}

#[test]
fn block_decoding_checks_the_transactions_root() {
    let mut block = block_of(txs(3, 1));
    block.header.transactions_root = B256::repeat_byte(0xee);
    let bytes = encode_block(&block).expect("encodes");
    assert!(matches!(
        decode_block(&bytes),
        Err(CodecError::TransactionsRootMismatch { .. })
    ));
}

#[test]
fn splitting_a_block_gives_its_header_hash_and_body_without_checking_the_body() {
    let block = block_of(txs(3, 1));
    let bytes = encode_block(&block).expect("encodes");
    let parts = split_block(&bytes).expect("splits");
    let sealed = decode_block(&bytes).expect("decodes");
    assert_eq!(
        (&parts.header, parts.hash),
        (sealed.header(), sealed.hash())
    );
    assert_eq!(IndexedList::parse(parts.body).expect("a list").len(), 3);
    // A node stores the body's bytes as received: they are what encoding the decoded
    // transactions gives.
    assert_eq!(
        parts.body,
        encode_transactions(sealed.transactions()).expect("encodes")
    );
    assert_eq!(parts.seal_serial().expect("seals").hash(), sealed.hash());
    // A body the header does not commit to: splitting names the block all the same, only
    // decoding refuses it.
    let mut forged = block_of(txs(3, 1));
    forged.header.transactions_root = B256::repeat_byte(0xee);
    let forged = encode_block(&forged).expect("encodes");
    assert!(split_block(&forged).is_ok());
    assert!(decode_block(&forged).is_err());
    assert!(matches!(
        split_block(&forged).expect("splits").seal(),
        Err(CodecError::TransactionsRootMismatch { .. })
    ));
    // Framing errors are the decoder's.
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(
        split_block(&trailing).unwrap_err(),
        CodecError::TrailingBlockBytes(1)
    );
}

#[test]
fn block_decoding_rejects_trailing_bytes() {
    let mut bytes = encode_block(&block_of(txs(2, 1))).expect("encodes");
    bytes.push(0);
    assert_eq!(
        decode_block(&bytes).unwrap_err(),
        CodecError::TrailingBlockBytes(1)
    );
}
