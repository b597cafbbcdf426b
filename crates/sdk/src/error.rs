//! SDK errors.

/// Why the SDK could not build or sign a transaction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdkError {
    /// The secret is zero or not below the curve order.
    #[error("invalid secp256k1 secret key")]
    InvalidKey,
    /// The curve operation failed (probability ~2^-128 per signature).
    #[error("signing failed")]
    Signing,
}
