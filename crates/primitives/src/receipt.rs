//! Transaction receipts: status, cumulative gas, logs and their bloom.

use alloy_primitives::{B256, Bloom, Log};
use alloy_rlp::{Decodable, Encodable};

use crate::merkle::{Chunked, ITEMS_PER_LEAF, LeafHasher, LeafList, chunked_root};

/// A receipt as Ethereum defines it (status, cumulative gas used, logs) with its logs
/// bloom, in alloy's types so RPC clients read it unchanged.
pub type Receipt = alloy_consensus::ReceiptWithBloom<alloy_consensus::Receipt<Log>>;

/// Appends a receipt's RLP without its bloom, the list `[status, cumulative_gas_used,
/// logs]`: what `receipts_root` commits to and what storage keeps. The bloom is a function
/// of the logs, so its 256 bytes (95% of a transfer's receipt) would add nothing.
pub(crate) fn encode_without_bloom(receipt: &Receipt, out: &mut Vec<u8>) {
    let fields = &receipt.receipt;
    alloy_rlp::Header {
        list: true,
        payload_length: payload_without_bloom(receipt),
    }
    .encode(out);
    fields.status.encode(out);
    fields.cumulative_gas_used.encode(out);
    fields.logs.encode(out);
}

/// The length of [`encode_without_bloom`]'s list payload.
fn payload_without_bloom(receipt: &Receipt) -> usize {
    let fields = &receipt.receipt;
    fields.status.length() + fields.cumulative_gas_used.length() + fields.logs.length()
}

/// The length of what [`encode_without_bloom`] appends.
fn length_without_bloom(receipt: &Receipt) -> usize {
    let payload = payload_without_bloom(receipt);
    alloy_rlp::length_of_length(payload) + payload
}

/// Decodes one [`encode_without_bloom`] item and computes its bloom from its logs.
fn decode_without_bloom(buf: &mut &[u8]) -> alloy_rlp::Result<Receipt> {
    let header = alloy_rlp::Header::decode(buf)?;
    if !header.list {
        return Err(alloy_rlp::Error::UnexpectedString);
    }
    let (mut fields, rest) = buf
        .split_at_checked(header.payload_length)
        .ok_or(alloy_rlp::Error::InputTooShort)?;
    let status = alloy_consensus::Eip658Value::decode(&mut fields)?;
    let cumulative_gas_used = u64::decode(&mut fields)?;
    let logs = Vec::<Log>::decode(&mut fields)?;
    if !fields.is_empty() {
        return Err(alloy_rlp::Error::ListLengthMismatch {
            expected: header.payload_length,
            got: header.payload_length - fields.len(),
        });
    }
    *buf = rest;
    Ok(alloy_consensus::Receipt {
        status,
        cumulative_gas_used,
        logs,
    }
    .into())
}

/// A block's receipts as storage keeps them: an RLP list of receipts without their
/// blooms, which [`decode_stored_receipts`] computes again.
pub fn encode_stored_receipts(receipts: &[Receipt]) -> Vec<u8> {
    // Measured first, so the list is written once into a buffer of its size (an ERC-20
    // block's 2,500 receipts with a log each are ~500 KB).
    let payload_length = receipts.iter().map(length_without_bloom).sum();
    let mut out = Vec::with_capacity(alloy_rlp::length_of_length(payload_length) + payload_length);
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(&mut out);
    receipts
        .iter()
        .for_each(|receipt| encode_without_bloom(receipt, &mut out));
    out
}

/// The receipts [`encode_stored_receipts`] wrote, blooms included; an error for any other
/// bytes.
pub fn decode_stored_receipts(mut bytes: &[u8]) -> alloy_rlp::Result<Vec<Receipt>> {
    let header = alloy_rlp::Header::decode(&mut bytes)?;
    if !header.list || header.payload_length != bytes.len() {
        return Err(alloy_rlp::Error::UnexpectedLength);
    }
    let mut receipts = Vec::new();
    while !bytes.is_empty() {
        receipts.push(decode_without_bloom(&mut bytes)?);
    }
    Ok(receipts)
}

/// A block's logs bloom: every receipt's, ORed. A receipt's bloom is its logs', so one
/// without logs adds nothing and is skipped (256 bytes read for each transfer otherwise).
pub fn block_bloom(receipts: &[Receipt]) -> Bloom {
    receipts
        .iter()
        .filter(|receipt| !receipt.receipt.logs.is_empty())
        .fold(Bloom::ZERO, |bloom, receipt| bloom | receipt.logs_bloom)
}

/// The header's `receipts_root`: the [`chunked_root`] over the receipts' RLP without their
/// blooms, its leaves hashed by `hasher`. A receipt is proven by its leaf's 32 receipts
/// and the Merkle path.
pub fn receipts_root(receipts: &[Receipt], hasher: &dyn LeafHasher) -> B256 {
    chunked_root(receipts, encode_without_bloom, hasher)
}

/// The first leaves of a block's `receipts_root`, hashed ahead while the receipts after
/// them are still to come, by a thread that would otherwise wait (the parallel executor's,
/// for a chunk or a merge to end): [`crate::receipts_and_state_roots`] hashes only the
/// leaves after them.
#[derive(Debug, Clone, Default)]
pub struct ReceiptLeaves(Vec<B256>);

impl ReceiptLeaves {
    /// Hashes the next leaf of `receipts` once all of its [`ITEMS_PER_LEAF`] receipts are
    /// there; false when they are not. `receipts` must begin with the receipts the leaves
    /// so far were hashed from: receipts are only ever added to a block's list.
    pub fn hash_next(&mut self, receipts: &[Receipt]) -> bool {
        let next = self.0.len();
        if receipts.len() < (next + 1) * ITEMS_PER_LEAF {
            return false;
        }
        Chunked::new(receipts, encode_without_bloom).hash_leaves(next..next + 1, &mut self.0);
        true
    }

    /// The leaves hashed so far, and the receipts after them, of `receipts`; none hashed
    /// if there are more than `receipts` has (hashed from another list).
    pub(crate) fn split<'r>(&self, receipts: &'r [Receipt]) -> (&[B256], &'r [Receipt]) {
        match receipts.get(self.0.len() * ITEMS_PER_LEAF..) {
            Some(rest) => (&self.0, rest),
            None => (&[], receipts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SerialLeaves;
    use alloy_primitives::{Address, Bytes, LogData};

    /// A receipt whose bloom alloy computes from its logs.
    fn make_receipt(success: bool, logs: Vec<Log>) -> Receipt {
        alloy_consensus::Receipt {
            status: success.into(),
            cumulative_gas_used: 42_000,
            logs,
        }
        .into()
    }

    #[test]
    fn a_stored_list_longer_than_64_kib_round_trips() {
        let log = Log {
            address: Address::repeat_byte(3),
            data: LogData::new_unchecked(vec![B256::repeat_byte(4)], Bytes::from(vec![5; 32])),
        };
        let receipts: Vec<Receipt> = (0..2_000)
            .map(|i| make_receipt(i % 7 != 0, vec![log.clone(); 1 + i % 2]))
            .collect();
        let stored = encode_stored_receipts(&receipts);
        // The list's header gives its length in three bytes.
        assert!(stored.len() > 1 << 16);
        assert_eq!(decode_stored_receipts(&stored).expect("decodes"), receipts);
    }

    #[test]
    fn receipt_bloom_covers_its_logs_and_rlp_round_trips_and_roots_commit_to_order() {
        let address = Address::repeat_byte(9);
        let topic = B256::repeat_byte(8);
        let log = Log {
            address,
            data: LogData::new_unchecked(vec![topic], Bytes::from_static(b"x")),
        };
        let receipt = make_receipt(true, vec![log]);
        assert!(
            receipt
                .logs_bloom
                .contains_input(alloy_primitives::BloomInput::Raw(address.as_slice()))
        );
        assert!(
            receipt
                .logs_bloom
                .contains_input(alloy_primitives::BloomInput::Raw(topic.as_slice()))
        );
        let mut bytes = Vec::new();
        receipt.encode(&mut bytes);
        assert_eq!(
            Receipt::decode(&mut bytes.as_slice()).expect("decodes"),
            receipt
        );
        // Stored without blooms, read back with them.
        let failed = make_receipt(false, vec![]);
        let stored = encode_stored_receipts(&[receipt.clone(), failed.clone()]);
        assert!(stored.len() < 2 * 256);
        assert_eq!(
            decode_stored_receipts(&stored).expect("decodes"),
            [receipt.clone(), failed.clone()]
        );
        assert_eq!(
            decode_stored_receipts(&encode_stored_receipts(&[])).expect("decodes"),
            []
        );
        for cut in 0..stored.len() {
            assert!(
                decode_stored_receipts(&stored[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut trailing = stored.clone();
        trailing.push(0x80);
        assert!(decode_stored_receipts(&trailing).is_err());
        // The same bytes as a plain receipt list (with blooms) are refused, not misread.
        assert!(decode_stored_receipts(&alloy_rlp::encode(vec![receipt.clone()])).is_err());
        assert_ne!(
            receipts_root(&[receipt.clone(), failed.clone()], &SerialLeaves),
            receipts_root(&[failed, receipt], &SerialLeaves)
        );
    }
}
