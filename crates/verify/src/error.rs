//! Why a block's transactions failed verification.

use stave_codec::CodecError;
use stave_primitives::TxError;

/// Why the verify stage refused a block's transactions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Transaction `index` breaks a stateless rule or its signature recovers no sender.
    #[error("transaction {index}: {source}")]
    Invalid {
        /// Position in the block.
        index: usize,
        /// The rule it broke.
        source: TxError,
    },
    /// Transaction `index` failed to decode while being fed to the queue.
    #[error(transparent)]
    Decode(#[from] CodecError),
    /// Verifying transaction `index` panicked (a bug in a dependency; the node lives on).
    #[error("verifying transaction {index} panicked")]
    Panicked {
        /// Position in the block.
        index: usize,
    },
    /// Fewer senders came back than transactions went in: a bug, never a peer's fault.
    #[error("sender recovery returned {got} senders for {expected} transactions")]
    Shortfall {
        /// Senders returned.
        got: usize,
        /// Transactions given.
        expected: usize,
    },
}

impl VerifyError {
    /// True when the block itself is invalid (the sender of it misbehaved), false for a
    /// fault of this node.
    pub fn is_invalid_block(&self) -> bool {
        matches!(self, Self::Invalid { .. } | Self::Decode(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_blocks_are_told_apart_from_node_faults() {
        let invalid = VerifyError::Invalid {
            index: 3,
            source: TxError::BadSignature,
        };
        assert!(invalid.is_invalid_block());
        assert!(VerifyError::Decode(CodecError::FirstOffsetNotZero(1)).is_invalid_block());
        assert!(!VerifyError::Panicked { index: 0 }.is_invalid_block());
        assert!(
            !VerifyError::Shortfall {
                got: 1,
                expected: 2
            }
            .is_invalid_block()
        );
    }
}
