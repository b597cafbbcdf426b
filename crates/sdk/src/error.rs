//! SDK errors.

/// Why the SDK could not make a signer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdkError {
    /// The secret is zero or not below the curve order.
    #[error("invalid secp256k1 secret key")]
    InvalidKey,
}
