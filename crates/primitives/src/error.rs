//! Why a transaction or a chain spec was refused.

use alloy_primitives::U256;

/// Why a transaction failed decoding or a stateless validity rule.
///
/// Messages are lowercase and carry the datum that failed, so a user can see which
/// field to fix. [`TxError::is_decode_error`] separates "these bytes are not a
/// transaction" from "this transaction breaks a rule".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// The input is empty.
    #[error("empty transaction bytes")]
    Empty,
    /// The input is longer than [`crate::MAX_TX_SIZE`].
    #[error("transaction is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// Input length in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The bytes are not a canonical EIP-2718 encoding of a known transaction type.
    #[error("malformed transaction encoding: {0}")]
    Decode(String),
    /// The bytes decode, but encoding the result gives other bytes (a non-canonical form).
    #[error("non-canonical transaction encoding ({decoded} bytes re-encode to {reencoded})")]
    NonCanonical {
        /// Length of the input.
        decoded: usize,
        /// Length of the canonical re-encoding.
        reencoded: usize,
    },
    /// A transaction type this chain does not run (blob and set-code transactions).
    #[error("transaction type {0} is not supported on this chain")]
    UnsupportedType(u8),
    /// EIP-2681: the nonce must be below 2^64 - 1.
    #[error("nonce {0} is at the EIP-2681 limit (2^64 - 1)")]
    NonceTooBig(u64),
    /// EIP-1559: the priority fee exceeds the fee cap.
    #[error("max priority fee {priority} exceeds max fee {max}")]
    PriorityFeeAboveMax {
        /// `max_priority_fee_per_gas`.
        priority: u128,
        /// `max_fee_per_gas`.
        max: u128,
    },
    /// The gas limit does not cover the intrinsic gas (or the EIP-7623 calldata floor).
    #[error("gas limit {gas_limit} is below the intrinsic gas {intrinsic}")]
    IntrinsicGasTooLow {
        /// The transaction's gas limit.
        gas_limit: u64,
        /// The gas it needs before executing any code.
        intrinsic: u64,
    },
    /// EIP-3860: contract creation code longer than the limit.
    #[error("initcode is {size} bytes, more than the limit of {limit}")]
    InitcodeTooLarge {
        /// Length of the initcode.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// EIP-2: `s` is in the upper half of the curve order (a malleable signature).
    #[error("signature s value {0:#x} is above secp256k1n/2 (EIP-2)")]
    HighS(U256),
    /// `r` or `s` is zero or not below the curve order.
    #[error("signature values out of range (r = {r:#x}, s = {s:#x})")]
    SignatureOutOfRange {
        /// The r value.
        r: U256,
        /// The s value.
        s: U256,
    },
    /// No public key recovers from the signature.
    #[error("signature does not recover a sender")]
    BadSignature,
    /// The transaction is signed for another chain.
    #[error("transaction chain id {found} does not match chain id {expected}")]
    WrongChainId {
        /// The chain id the tx carries.
        found: u64,
        /// The chain id the caller requires.
        expected: u64,
    },
}

impl TxError {
    /// True when the bytes are not a transaction at all, as opposed to a well-formed
    /// transaction that breaks a validity rule. A peer that sends such bytes is misbehaving.
    pub fn is_decode_error(&self) -> bool {
        matches!(
            self,
            Self::Empty
                | Self::TooLarge { .. }
                | Self::Decode(_)
                | Self::NonCanonical { .. }
                | Self::UnsupportedType(_)
        )
    }
}

/// Why a genesis file could not become a [`crate::ChainSpec`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainSpecError {
    /// The JSON does not parse as a go-ethereum genesis.
    #[error("genesis is not valid go-ethereum genesis JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// `config.chainId` is missing; a chain without an id could replay other chains' txs.
    #[error("genesis config has no chainId")]
    MissingChainId,
    /// The genesis gas limit is zero, so no transaction could ever fit.
    #[error("genesis gasLimit is zero")]
    ZeroGasLimit,
    /// `config.stave` is malformed (unknown key, a validator key that is not 32 bytes of
    /// hex) or names a validator twice.
    #[error("genesis config.stave: {0}")]
    StaveConfig(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_are_told_apart_from_rule_violations() {
        assert!(TxError::Empty.is_decode_error());
        assert!(TxError::Decode("x".into()).is_decode_error());
        assert!(TxError::UnsupportedType(3).is_decode_error());
        assert!(!TxError::HighS(U256::MAX).is_decode_error());
        assert!(
            !TxError::WrongChainId {
                found: 1,
                expected: 2
            }
            .is_decode_error()
        );
    }
}
