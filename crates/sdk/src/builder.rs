//! Building unsigned transactions: ETH transfers, ERC-20 calls and contract deploys, as
//! legacy (EIP-155), EIP-2930 or EIP-1559 transactions.

use alloy_consensus::{TxEip1559, TxEip2930, TxLegacy, TypedTransaction};
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

/// The transaction type a builder makes, with the fee fields of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxFormat {
    /// A legacy transaction with EIP-155 replay protection (`v = 35 + 2 * chain_id + parity`).
    Legacy {
        /// Price per gas, in wei.
        gas_price: u128,
    },
    /// An EIP-2930 transaction (type 1) with an empty access list.
    Eip2930 {
        /// Price per gas, in wei.
        gas_price: u128,
    },
    /// An EIP-1559 transaction (type 2).
    Eip1559 {
        /// Fee cap per gas, in wei.
        max_fee_per_gas: u128,
        /// Priority fee per gas, in wei.
        max_priority_fee_per_gas: u128,
    },
}

/// Chain, type and fee settings shared by every transaction a builder makes.
///
/// Building allocates nothing for a transfer; ERC-20 calls and deploys own their input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxBuilder {
    /// Chain id the signature commits to.
    pub chain_id: u64,
    /// The transaction type and its fees.
    pub format: TxFormat,
}

impl TxBuilder {
    /// An EIP-1559 builder for `chain_id` paying at most `max_fee_per_gas` with a 1 wei tip.
    pub fn new(chain_id: u64, max_fee_per_gas: u128) -> Self {
        Self::eip1559(chain_id, max_fee_per_gas, 1)
    }

    /// An EIP-1559 builder with an explicit priority fee.
    pub fn eip1559(chain_id: u64, max_fee_per_gas: u128, max_priority_fee_per_gas: u128) -> Self {
        Self {
            chain_id,
            format: TxFormat::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            },
        }
    }

    /// A builder of EIP-155 legacy transactions paying `gas_price`.
    pub fn legacy(chain_id: u64, gas_price: u128) -> Self {
        Self {
            chain_id,
            format: TxFormat::Legacy { gas_price },
        }
    }

    /// A builder of EIP-2930 transactions (empty access list) paying `gas_price`.
    pub fn eip2930(chain_id: u64, gas_price: u128) -> Self {
        Self {
            chain_id,
            format: TxFormat::Eip2930 { gas_price },
        }
    }

    /// A transaction of this builder's type with the given fields.
    pub fn build(
        &self,
        nonce: u64,
        gas_limit: u64,
        to: TxKind,
        value: U256,
        input: Bytes,
    ) -> TypedTransaction {
        let chain_id = self.chain_id;
        match self.format {
            TxFormat::Legacy { gas_price } => TypedTransaction::Legacy(TxLegacy {
                chain_id: Some(chain_id),
                nonce,
                gas_price,
                gas_limit,
                to,
                value,
                input,
            }),
            TxFormat::Eip2930 { gas_price } => TypedTransaction::Eip2930(TxEip2930 {
                chain_id,
                nonce,
                gas_price,
                gas_limit,
                to,
                value,
                access_list: Default::default(),
                input,
            }),
            TxFormat::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => TypedTransaction::Eip1559(TxEip1559 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
                to,
                value,
                access_list: Default::default(),
                input,
            }),
        }
    }

    /// Sends `value` wei to `to`.
    pub fn transfer(&self, nonce: u64, to: Address, value: U256) -> TypedTransaction {
        self.transfer_with_gas(nonce, TRANSFER_GAS, to, value)
    }

    /// [`TxBuilder::transfer`] with the gas limit `gas_limit` (another node's schedule).
    pub fn transfer_with_gas(
        &self,
        nonce: u64,
        gas_limit: u64,
        to: Address,
        value: U256,
    ) -> TypedTransaction {
        self.build(nonce, gas_limit, TxKind::Call(to), value, Bytes::new())
    }

    /// Calls `transfer(to, amount)` on the ERC-20 contract `token`.
    pub fn erc20_transfer(
        &self,
        nonce: u64,
        token: Address,
        to: Address,
        amount: U256,
    ) -> TypedTransaction {
        self.erc20_transfer_with_gas(nonce, ERC20_TRANSFER_GAS, token, to, amount)
    }

    /// [`TxBuilder::erc20_transfer`] with the gas limit `gas_limit` (another node's
    /// schedule).
    pub fn erc20_transfer_with_gas(
        &self,
        nonce: u64,
        gas_limit: u64,
        token: Address,
        to: Address,
        amount: U256,
    ) -> TypedTransaction {
        self.build(
            nonce,
            gas_limit,
            TxKind::Call(token),
            U256::ZERO,
            erc20_transfer_calldata(to, amount),
        )
    }

    /// Deploys a contract whose creation code is `initcode`.
    pub fn deploy(&self, nonce: u64, gas_limit: u64, initcode: Bytes) -> TypedTransaction {
        self.build(nonce, gas_limit, TxKind::Create, U256::ZERO, initcode)
    }
}
