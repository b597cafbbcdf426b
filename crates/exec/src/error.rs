//! Why a block could not be executed.

use stave_primitives::StateError;

/// Why the executor refused a block or stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// Transaction `index` cannot be included: nonce, balance, gas or fee rules (a
    /// received block carrying it is invalid).
    #[error("transaction {index} is invalid: {reason}")]
    InvalidTx {
        /// Position in the block.
        index: usize,
        /// revm's or the block gas rule's reason.
        reason: String,
    },
    /// Reading state failed: a fault of this node, not of the block.
    #[error(transparent)]
    State(#[from] StateError),
    /// revm refused the block environment or failed internally.
    #[error("evm failure at transaction {index}: {reason}")]
    Evm {
        /// Position in the block.
        index: usize,
        /// What revm said.
        reason: String,
    },
}

impl ExecError {
    /// True when the block is at fault (a proposer sent an invalid block), false when
    /// this node is (storage failure, EVM bug).
    pub fn is_invalid_block(&self) -> bool {
        matches!(self, Self::InvalidTx { .. })
    }
}

/// What cannot fail fails as an [`ExecError`] too (a tracer whose setup reads no state).
impl From<std::convert::Infallible> for ExecError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}
