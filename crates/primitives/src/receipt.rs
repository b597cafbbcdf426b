//! Transaction receipts: status, cumulative gas, logs and their bloom.

use alloy_primitives::{B256, Log};
use alloy_rlp::Encodable;

use crate::merkle::chunked_root;

/// A receipt as Ethereum defines it (status, cumulative gas used, logs) with its logs
/// bloom, in alloy's types so RPC clients read it unchanged.
pub type Receipt = alloy_consensus::ReceiptWithBloom<alloy_consensus::Receipt<Log>>;

/// Appends what `receipts_root` commits to of a receipt: the RLP list `[status,
/// cumulative_gas_used, logs]`, without the bloom, which is a function of the logs (so
/// hashing its 256 bytes would commit to nothing more).
fn encode_committed(receipt: &Receipt, out: &mut Vec<u8>) {
    let fields = &receipt.receipt;
    let payload_length =
        fields.status.length() + fields.cumulative_gas_used.length() + fields.logs.length();
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(out);
    fields.status.encode(out);
    fields.cumulative_gas_used.encode(out);
    fields.logs.encode(out);
}

/// The header's `receipts_root`: the [`chunked_root`] over the receipts' RLP without their
/// blooms. A receipt is proven by its leaf's 32 receipts and the Merkle path.
pub fn receipts_root(receipts: &[Receipt]) -> B256 {
    chunked_root(receipts, encode_committed)
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
        // The committed encoding is the list [status, cumulative gas, logs], nothing more.
        let mut committed = Vec::new();
        encode_committed(&receipt, &mut committed);
        let mut rest = committed.as_slice();
        let header = alloy_rlp::Header::decode(&mut rest).expect("a list header");
        assert!(header.list);
        assert_eq!(header.payload_length, rest.len());
        let status = alloy_consensus::Eip658Value::decode(&mut rest).expect("status");
        let gas = u64::decode(&mut rest).expect("gas");
        let logs = Vec::<Log>::decode(&mut rest).expect("logs");
        assert!(rest.is_empty());
        assert_eq!(
            (status, gas, logs),
            (
                receipt.receipt.status,
                receipt.receipt.cumulative_gas_used,
                receipt.receipt.logs.clone()
            )
        );
        let failed = make_receipt(false, vec![]);
        assert_ne!(
            receipts_root(&[receipt.clone(), failed.clone()]),
            receipts_root(&[failed, receipt])
        );
    }
}
