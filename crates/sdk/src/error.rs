//! SDK errors.

use alloy_primitives::Address;

/// Why the SDK could not make a signer, track a nonce or get an answer from a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdkError {
    /// The secret is zero or not below the curve order.
    #[error("invalid secp256k1 secret key")]
    InvalidKey,
    /// The nonce manager was never given this account's pending count.
    #[error("no nonce known for {0}: init it from eth_getTransactionCount(pending)")]
    UnknownAccount(Address),
    /// The node refused a nonce of this account; reconcile before sending more.
    #[error("nonces of {0} need a resync from eth_getTransactionCount(pending)")]
    NonceStale(Address),
    /// The request failed as a whole: connection, timeout, HTTP status, or an answer that
    /// is not the JSON expected.
    #[error("rpc transport: {0}")]
    Transport(String),
    /// The node answered with a JSON-RPC error.
    #[error("rpc error {code}: {message}")]
    Rpc {
        /// The JSON-RPC error code.
        code: i32,
        /// The node's message.
        message: String,
    },
}

impl SdkError {
    /// Whether the node refused a transaction for its nonce (too low or too high): the
    /// refusals a [`crate::NonceManager`] resyncs after. Read from the message, worded as
    /// go-ethereum and Stave's pool word it. ("already known" is not one: the node has
    /// the transaction.)
    pub fn is_nonce_error(&self) -> bool {
        match self {
            SdkError::Rpc { message, .. } => {
                let message = message.to_ascii_lowercase();
                message.contains("nonce too low") || message.contains("nonce too high")
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(message: &str) -> SdkError {
        SdkError::Rpc {
            code: -32000,
            message: message.into(),
        }
    }

    #[test]
    fn nonce_errors_are_classified_by_message() {
        assert!(rpc("nonce too low: next nonce 4, tx nonce 2").is_nonce_error());
        assert!(rpc("Nonce too high: next nonce 0, tx nonce 99 (gap limit 64)").is_nonce_error());
        assert!(!rpc("already known").is_nonce_error());
        assert!(!rpc("insufficient funds for gas * price + value").is_nonce_error());
        assert!(!SdkError::Transport("nonce too low".into()).is_nonce_error());
    }
}
