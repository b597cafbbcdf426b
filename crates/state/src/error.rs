//! Why the state layers refused a request.

use stave_storage::StorageError;

/// What can go wrong in the state layers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateLayerError {
    /// A layer must be the child of the newest one.
    #[error("state layer for block {number} does not follow block {head}")]
    NotChild {
        /// The offered layer's block.
        number: u64,
        /// The newest layer's block.
        head: u64,
    },
    /// The state of that block is no longer (or not yet) kept.
    #[error("state not available for block {number}: kept are blocks {oldest} to {newest}")]
    NotAvailable {
        /// The block asked for.
        number: u64,
        /// The oldest block whose state is kept.
        oldest: u64,
        /// The newest.
        newest: u64,
    },
    /// Writing the flushed layers failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}
