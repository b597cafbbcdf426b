//! Real signed transactions of every accepted type, for codec tests.

use alloy_consensus::{TxEip1559, TxEip2930, TxLegacy, TypedTransaction};
use alloy_primitives::{Address, Bytes, TxKind, U256};
use stave_primitives::{SignedTx, dev::dev_account};
use stave_sdk::LocalSigner;

/// Transaction `i` of a deterministic mix: legacy without and with EIP-155, EIP-2930 and
/// EIP-1559, with calldata of `data_len` bytes.
pub fn mixed_tx(i: u64, data_len: usize) -> SignedTx {
    let signer = LocalSigner::from_secret(&dev_account(i % 16).secret).expect("dev key");
    let to = TxKind::Call(Address::with_last_byte(i as u8));
    let input = Bytes::from(vec![(i % 256) as u8; data_len]);
    let gas_limit = 100_000 + 16 * data_len as u64;
    let tx = match i % 4 {
        0 => TypedTransaction::Legacy(TxLegacy {
            chain_id: None,
            nonce: i,
            gas_price: 1_000_000_000,
            gas_limit,
            to,
            value: U256::from(i),
            input,
        }),
        1 => TypedTransaction::Legacy(TxLegacy {
            chain_id: Some(1337),
            nonce: i,
            gas_price: 7,
            gas_limit,
            to,
            value: U256::from(i),
            input,
        }),
        2 => TypedTransaction::Eip2930(TxEip2930 {
            chain_id: 1337,
            nonce: i,
            gas_price: 9,
            gas_limit: gas_limit + 2_400,
            to,
            value: U256::ZERO,
            access_list: vec![alloy_eips::eip2930::AccessListItem {
                address: Address::with_last_byte(1),
                storage_keys: vec![Default::default()],
            }]
            .into(),
            input,
        }),
        _ => TypedTransaction::Eip1559(TxEip1559 {
            chain_id: 1337,
            nonce: i,
            gas_limit,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1,
            to,
            value: U256::from(i * 1000),
            access_list: Default::default(),
            input,
        }),
    };
    signer.sign_tx(tx)
}
