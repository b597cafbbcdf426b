//! Building unsigned transactions: ETH transfers, ERC-20 calls and contract deploys.

use alloy_consensus::{TxEip1559, TypedTransaction};
use alloy_primitives::{Address, Bytes, TxKind, U256};

/// Gas of a plain ETH transfer.
pub const TRANSFER_GAS: u64 = 21_000;

/// Gas limit for an ERC-20 `transfer`: measured ~52k on the repo's token for a first
/// transfer to a new holder, with headroom.
pub const ERC20_TRANSFER_GAS: u64 = 80_000;

/// Selector of `transfer(address,uint256)`: the first 4 bytes of its keccak-256.
pub const ERC20_TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

/// ABI-encoded call data of `transfer(to, amount)`.
pub fn erc20_transfer_calldata(to: Address, amount: U256) -> Bytes {
    let mut input = Vec::with_capacity(4 + 32 + 32);
    input.extend_from_slice(&ERC20_TRANSFER_SELECTOR);
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(to.as_slice());
    input.extend_from_slice(&amount.to_be_bytes::<32>());
    input.into()
}

/// Fee and chain settings shared by every transaction a builder makes (EIP-1559 only:
/// legacy and EIP-2930 transactions are built with alloy's types directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxBuilder {
    /// Chain id the signature commits to.
    pub chain_id: u64,
    /// Fee cap per gas, in wei.
    pub max_fee_per_gas: u128,
    /// Priority fee per gas, in wei.
    pub max_priority_fee_per_gas: u128,
}

impl TxBuilder {
    /// A builder for `chain_id` paying at most `max_fee_per_gas` with a 1 wei tip.
    pub fn new(chain_id: u64, max_fee_per_gas: u128) -> Self {
        Self {
            chain_id,
            max_fee_per_gas,
            max_priority_fee_per_gas: 1,
        }
    }

    fn eip1559(
        &self,
        nonce: u64,
        gas_limit: u64,
        to: TxKind,
        value: U256,
        input: Bytes,
    ) -> TypedTransaction {
        TypedTransaction::Eip1559(TxEip1559 {
            chain_id: self.chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: self.max_fee_per_gas,
            max_priority_fee_per_gas: self.max_priority_fee_per_gas,
            to,
            value,
            access_list: Default::default(),
            input,
        })
    }

    /// Sends `value` wei to `to`.
    pub fn transfer(&self, nonce: u64, to: Address, value: U256) -> TypedTransaction {
        self.eip1559(nonce, TRANSFER_GAS, TxKind::Call(to), value, Bytes::new())
    }

    /// Calls `transfer(to, amount)` on the ERC-20 contract `token`.
    pub fn erc20_transfer(
        &self,
        nonce: u64,
        token: Address,
        to: Address,
        amount: U256,
    ) -> TypedTransaction {
        let mut input = Vec::with_capacity(4 + 32 + 32);
        input.extend_from_slice(&ERC20_TRANSFER_SELECTOR);
        input.extend_from_slice(&[0u8; 12]);
        input.extend_from_slice(to.as_slice());
        input.extend_from_slice(&amount.to_be_bytes::<32>());
        self.eip1559(
            nonce,
            ERC20_TRANSFER_GAS,
            TxKind::Call(token),
            U256::ZERO,
            input.into(),
        )
    }

    /// Deploys a contract whose creation code is `initcode`.
    pub fn deploy(&self, nonce: u64, gas_limit: u64, initcode: Bytes) -> TypedTransaction {
        self.eip1559(nonce, gas_limit, TxKind::Create, U256::ZERO, initcode)
    }
}
