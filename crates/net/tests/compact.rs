//! Compact blocks: round trips, block-keyed short ids, rebuilding from known txs (with
//! collisions left to fetch), and hostile bytes refused with a typed error.

use alloy_primitives::{B256, keccak256};
use bytes::Bytes;
use stave_codec::encode_block;
use stave_net::{
    BlockParts, CompactBlock, CompactError,
    compact::{FifoMap, Rebuild, check_block, short_id},
    decode_compact,
};
use stave_primitives::{Block, DEFAULT_BASE_FEE, DEV_GAS_LIMIT, Header, SignedTx};
use stave_sdk::{TxBuilder, Workload, signed_workload};

fn transfers(count: usize) -> Vec<SignedTx> {
    let builder = TxBuilder::eip1559(1337, 2 * u128::from(DEFAULT_BASE_FEE), 1);
    signed_workload(Workload::Transfer, &builder, count).expect("signs")
}

fn block(number: u64, txs: &[SignedTx]) -> Vec<u8> {
    let mut block = Block {
        header: Header {
            number,
            gas_limit: DEV_GAS_LIMIT,
            ..Header::default()
        },
        transactions: txs.to_vec(),
    };
    block.header.transactions_root = block.compute_transactions_root();
    encode_block(&block).expect("encodes")
}

fn known(txs: &[SignedTx]) -> FifoMap<B256, Bytes> {
    let mut known = FifoMap::new(1 << 16);
    for tx in txs {
        known.insert(tx.hash(), Bytes::from(tx.encoded()));
    }
    known
}

#[test]
fn a_block_splits_into_parts_and_its_compact_form_round_trips() {
    let txs = transfers(100);
    let bytes = block(5, &txs);
    let parts = BlockParts::from_block(&bytes).expect("valid");
    assert_eq!(parts.encode().expect("encodes"), bytes);
    assert_eq!(
        parts.tx_hashes,
        txs.iter().map(SignedTx::hash).collect::<Vec<_>>()
    );
    let compact = parts.compact();
    let encoded = compact.encode();
    assert!(
        encoded.len() * 10 < bytes.len(),
        "{} vs {}",
        encoded.len(),
        bytes.len()
    );
    let decoded = decode_compact(&encoded, 1_000).expect("decodes");
    assert_eq!(decoded, compact);
    assert_eq!(decoded.hash, keccak256(alloy_rlp::encode(&parts.header)));
}

/// The short id is the same on every host: pinned here, and equal to what a 64-bit
/// little-endian host's `Hash` of the 32 bytes gives (the ids such nodes always sent).
#[test]
fn a_short_id_is_pinned_and_independent_of_the_host() {
    let block = B256::from(std::array::from_fn(|i| i as u8));
    let tx = B256::from(std::array::from_fn(|i| 0xff - i as u8));
    assert_eq!(short_id(&block, &tx), PINNED_SHORT_ID);
    #[cfg(all(target_pointer_width = "64", target_endian = "little"))]
    {
        use std::hash::{Hash, Hasher};
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(
            u64::from_le_bytes(block[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(block[8..16].try_into().expect("8 bytes")),
        );
        tx.0.hash(&mut hasher);
        assert_eq!(hasher.finish(), PINNED_SHORT_ID);
    }
}

/// `short_id` of block hash 00 01 .. 1f and tx hash ff fe .. e0.
const PINNED_SHORT_ID: u64 = 17_200_025_198_085_591_174;

/// A compact block or block declaring more transactions than its gas limit allows (at
/// 21,000 gas each) is refused before its ids or transactions are taken; so is a block
/// fetched by number or carried by consensus (`check_block`).
#[test]
fn more_txs_than_the_gas_limit_allows_are_refused() {
    let txs = transfers(3);
    let mut block = Block {
        header: Header {
            gas_limit: 2 * 21_000 + 20_999,
            ..Header::default()
        },
        transactions: txs,
    };
    block.header.transactions_root = block.compute_transactions_root();
    let bytes = encode_block(&block).expect("encodes");
    assert!(matches!(
        BlockParts::from_block(&bytes),
        Err(CompactError::TooManyTxs { count: 3, max: 2 })
    ));
    assert!(matches!(
        check_block(&bytes),
        Err(CompactError::TooManyTxs { count: 3, max: 2 })
    ));
    block.header.gas_limit = 3 * 21_000;
    check_block(&encode_block(&block).expect("encodes")).expect("fits");
    let parts = BlockParts::from_block(&encode_block(&block).expect("encodes")).expect("fits");
    let mut compact = parts.compact();
    compact.header.gas_limit = 2 * 21_000;
    assert!(matches!(
        decode_compact(&compact.encode(), 1_000),
        Err(CompactError::TooManyTxs { count: 3, max: 2 })
    ));
}

#[test]
fn short_ids_are_keyed_by_the_block() {
    let tx = transfers(1)[0].hash();
    let ids: std::collections::HashSet<u64> = (0..64u8)
        .map(|i| short_id(&B256::repeat_byte(i), &tx))
        .collect();
    assert_eq!(ids.len(), 64);
}

#[test]
fn a_block_whose_body_does_not_match_its_root_is_refused() {
    let txs = transfers(3);
    let mut block = Block {
        header: Header {
            gas_limit: DEV_GAS_LIMIT,
            ..Header::default()
        },
        transactions: txs,
    };
    block.header.transactions_root = B256::repeat_byte(1);
    let bytes = encode_block(&block).expect("encodes");
    assert!(matches!(
        BlockParts::from_block(&bytes),
        Err(CompactError::RootMismatch { .. })
    ));
}

#[test]
fn rebuilding_takes_known_txs_and_leaves_the_rest_and_collisions_to_fetch() {
    let txs = transfers(20);
    let parts = BlockParts::from_block(&block(1, &txs)).expect("valid");
    // Known: the first 15 and some unrelated txs.
    let mut held = txs[..15].to_vec();
    held.extend(transfers(40).split_off(30));
    let mut rebuild = Rebuild::new(parts.compact(), &known(&held));
    assert_eq!(rebuild.missing(), (15..20).collect::<Vec<u32>>());
    assert!(matches!(
        rebuild.clone().finish(),
        Err(CompactError::Incomplete(5))
    ));
    let missing = rebuild.missing();
    rebuild.fill(
        &missing,
        txs[15..]
            .iter()
            .map(|tx| Bytes::from(tx.encoded()))
            .collect(),
    );
    let rebuilt = rebuild.finish().expect("complete");
    assert_eq!(
        rebuilt.encode().expect("encodes"),
        parts.encode().expect("encodes")
    );

    // Two slots with the same short id (a collision inside the block) are both fetched.
    let mut compact = parts.compact();
    compact.short_ids[4] = compact.short_ids[9];
    let rebuild = Rebuild::new(compact, &known(&txs));
    assert_eq!(rebuild.missing(), vec![4, 9]);

    // Wrong txs in the slots fail the root check.
    let mut rebuild = Rebuild::new(parts.compact(), &known(&[]));
    let missing = rebuild.missing();
    let decoys = transfers(40).split_off(20);
    rebuild.fill(
        &missing,
        decoys.iter().map(|tx| Bytes::from(tx.encoded())).collect(),
    );
    assert!(matches!(
        rebuild.finish(),
        Err(CompactError::RootMismatch { .. })
    ));
}

#[test]
fn hostile_compact_blocks_get_typed_errors() {
    let parts = BlockParts::from_block(&block(1, &transfers(10))).expect("valid");
    let encoded = parts.compact().encode();
    for cut in 0..encoded.len() {
        assert!(
            decode_compact(&encoded[..cut], 1_000).is_err(),
            "cut at {cut}"
        );
    }
    let mut trailing = encoded.clone();
    trailing.push(0);
    assert!(decode_compact(&trailing, 1_000).is_err());
    assert!(matches!(
        decode_compact(&encoded, 9),
        Err(CompactError::TooManyTxs { count: 10, max: 9 })
    ));
    // Short ids that are not whole 8-byte words.
    let mut odd = CompactBlock::new(parts.header.clone(), parts.hash, &[]).encode();
    let header_len = alloy_rlp::encode(&parts.header).len();
    odd.truncate(odd.len() - 1);
    odd.extend_from_slice(&[0x83, 1, 2, 3]);
    odd[1] = (header_len + 4) as u8;
    assert!(
        matches!(
            decode_compact(&odd, 1_000),
            Err(CompactError::ShortIdsLength(3))
        ),
        "{:?}",
        decode_compact(&odd, 1_000)
    );
}

#[test]
fn the_fifo_map_forgets_its_oldest_entries_first() {
    let mut map = FifoMap::new(3);
    for i in 0..5u8 {
        assert!(map.insert(i, i));
    }
    assert!(!map.insert(4, 4));
    assert_eq!(map.len(), 3);
    assert!(!map.contains(&1) && map.contains(&2) && map.contains(&4));
}
