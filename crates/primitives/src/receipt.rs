//! Transaction receipts: status, cumulative gas, logs and their bloom.

use alloy_primitives::{B256, Log, keccak256};
use alloy_rlp::Encodable;

use crate::merkle::merkle_root;

/// A receipt as Ethereum defines it (status, cumulative gas used, logs) with its logs
/// bloom, in alloy's types so RPC clients read it unchanged.
pub type Receipt = alloy_consensus::ReceiptWithBloom<alloy_consensus::Receipt<Log>>;

/// keccak-256 of the receipt's RLP encoding: the leaf of the header's `receipts_root`.
pub fn receipt_hash(receipt: &Receipt) -> B256 {
    let mut out = Vec::with_capacity(receipt.length());
    receipt.encode(&mut out);
    keccak256(out)
}

/// The header's `receipts_root`: the [`merkle_root`] over the receipts' hashes.
pub fn receipts_root(receipts: &[Receipt]) -> B256 {
    merkle_root(&receipts.iter().map(receipt_hash).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
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
    use alloy_rlp::Decodable;

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
        assert_ne!(
            receipt_hash(&receipt),
            receipt_hash(&make_receipt(false, vec![]))
        );
        let failed = make_receipt(false, vec![]);
        assert_ne!(
            receipts_root(&[receipt.clone(), failed.clone()]),
            receipts_root(&[failed, receipt])
        );
    }
}
