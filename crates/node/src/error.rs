//! Why a block could not be imported or built.

use alloy_primitives::B256;
use stave_codec::CodecError;
use stave_exec::ExecError;
use stave_storage::StorageError;
use stave_verify::VerifyError;

/// Why the import pipeline refused a block or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The bytes are not a valid block (decode stage). Boxed, like the other stage
    /// errors, to keep `Result<_, ImportError>` small on the happy path.
    #[error("block does not decode: {0}")]
    Decode(Box<CodecError>),
    /// A transaction's signature or stateless rules failed (verify stage).
    #[error("block {number}: {source}")]
    Verify {
        /// The block's number.
        number: u64,
        /// What failed.
        source: Box<VerifyError>,
    },
    /// Execution failed or found an invalid transaction (execute stage).
    #[error("block {number}: {source}")]
    Execute {
        /// The block's number.
        number: u64,
        /// What failed.
        source: Box<ExecError>,
    },
    /// The block does not extend the stored head.
    #[error("block {number} does not extend the head, block {head_number} ({head})")]
    NotChild {
        /// The block's number.
        number: u64,
        /// The stored head's number.
        head_number: u64,
        /// The stored head's hash.
        head: B256,
    },
    /// Executing the block gave another result than its header claims.
    #[error("block {number}: header says {field} {claimed}, execution gives {computed}")]
    HeaderMismatch {
        /// The block's number.
        number: u64,
        /// Which field.
        field: &'static str,
        /// What the header says.
        claimed: String,
        /// What execution produced.
        computed: String,
    },
    /// A transaction of the block breaks a rule of the governance contract's permissions.
    #[error("block {number}: transaction {index}: {refusal}")]
    Forbidden {
        /// The block's number.
        number: u64,
        /// The transaction's index in the block.
        index: usize,
        /// The rule it breaks.
        refusal: stave_governance::Refusal,
    },
    /// The governance contract's permissions could not be read from the state.
    #[error("reading the governance contract's permissions: {0}")]
    Permissions(stave_primitives::StateError),
    /// The block's timestamp is before its parent's or too far ahead of this node's clock.
    #[error("block {number}: timestamp {timestamp} is outside [{earliest}, {latest}]")]
    BadTimestamp {
        /// The block's number.
        number: u64,
        /// Its timestamp.
        timestamp: u64,
        /// Its parent's timestamp.
        earliest: u64,
        /// The latest timestamp accepted.
        latest: u64,
    },
    /// The data dir was created by a build that stores chains in another data format.
    #[error(
        "the data dir is in data format {found}, this build reads format {expected}: its blocks' state roots were computed another way; start a new data dir, or run the build that created it"
    )]
    DataFormat {
        /// The data dir's format.
        found: u32,
        /// The format this build reads.
        expected: u32,
    },
    /// The data dir has no genesis block: initialise it first.
    #[error("the data dir holds no chain: initialise it with a genesis")]
    NoGenesis,
    /// The genesis names a generated state the data dir does not hold (only `stave
    /// state generate` writes one).
    #[error(
        "the genesis names a generated state of {accounts} accounts, which this data dir does not hold: write it with `stave state generate`"
    )]
    NotGenerated {
        /// Accounts in the generated state.
        accounts: u64,
    },
    /// `stave state generate` was pointed at a data dir that already holds a chain.
    #[error("the data dir already holds a chain (head {head}): generate into an empty one")]
    NotEmpty {
        /// The chain's head.
        head: u64,
    },
    /// A genesis the chain spec refused.
    #[error("genesis: {0}")]
    Genesis(#[from] stave_primitives::ChainSpecError),
    /// Two generated accounts share an address (an unlikely hash collision).
    #[error("generated accounts collide at {0}")]
    GeneratedCollision(alloy_primitives::Address),
    /// Storage failed (commit stage or a state read).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The state layers refused a block's changes or could not flush them.
    #[error(transparent)]
    State(#[from] stave_state::StateLayerError),
    /// The executor's threads did not start.
    #[error("the executor's threads did not start: {0}")]
    Threads(std::io::Error),
    /// A dev node's state edits (`anvil_setBalance` and the like) were refused or could
    /// not be read.
    #[error("state edits: {0}")]
    Edit(String),
}

impl ImportError {
    /// True when the error says the block is invalid (whoever sent it is at fault);
    /// false when this node failed (storage, state, the executor's threads), which no
    /// peer is to be charged for.
    pub fn is_invalid_block(&self) -> bool {
        match self {
            Self::Decode(_)
            | Self::NotChild { .. }
            | Self::HeaderMismatch { .. }
            | Self::Forbidden { .. }
            | Self::BadTimestamp { .. } => true,
            Self::Verify { source, .. } => source.is_invalid_block(),
            Self::Execute { source, .. } => source.is_invalid_block(),
            Self::DataFormat { .. }
            | Self::NoGenesis
            | Self::NotGenerated { .. }
            | Self::NotEmpty { .. }
            | Self::GeneratedCollision(_)
            | Self::Genesis(_)
            | Self::Storage(_)
            | Self::State(_)
            | Self::Permissions(_)
            | Self::Edit(_)
            | Self::Threads(_) => false,
        }
    }
}

impl From<CodecError> for ImportError {
    fn from(error: CodecError) -> Self {
        Self::Decode(Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_invalid_block_is_its_senders_fault() {
        let decode = ImportError::from(CodecError::FirstOffsetNotZero(1));
        assert!(decode.is_invalid_block());
        let not_child = ImportError::NotChild {
            number: 5,
            head_number: 3,
            head: Default::default(),
        };
        assert!(not_child.is_invalid_block());
        // This node's own failures: a full disk, threads that did not start, a data dir
        // of another format. No peer is charged for them.
        let full = ImportError::Storage(StorageError::MapFull { map_size: 1 });
        assert!(!full.is_invalid_block());
        let threads = ImportError::Threads(std::io::Error::other("no threads"));
        assert!(!threads.is_invalid_block());
        let format = ImportError::DataFormat {
            found: 1,
            expected: 2,
        };
        assert!(!format.is_invalid_block());
    }
}
