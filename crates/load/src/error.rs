//! Why a load run stopped.

use stave_primitives::{Address, B256, U256};
use stave_sdk::SdkError;

/// Why a load run could not start or finish. The messages name the `stave load` flags
/// that [`crate::LoadConfig`]'s fields stand for.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The configuration cannot make a run.
    #[error("{0}")]
    Config(String),
    /// The RPC URL is not one a client can be made for.
    #[error("bad --rpc URL {rpc}")]
    BadUrl {
        /// The URL.
        rpc: String,
        /// What the client said.
        #[source]
        source: SdkError,
    },
    /// The node does not answer.
    #[error("cannot reach a node at {rpc}")]
    Unreachable {
        /// The URL.
        rpc: String,
        /// What the client said.
        #[source]
        source: SdkError,
    },
    /// The node's chain is not the one expected.
    #[error(
        "the node at {rpc} has chain id {actual}, expected {expected}{}",
        if *.dev_funder { " (the dev funder's chain): pass --key for another chain" } else { "" }
    )]
    WrongChain {
        /// The URL.
        rpc: String,
        /// The node's chain id.
        actual: u64,
        /// The chain id asked for.
        expected: u64,
        /// Whether the dev funder was to be used (no --key).
        dev_funder: bool,
    },
    /// A key could not be made into a signer.
    #[error("{what} is not a valid secret key")]
    Key {
        /// Which key.
        what: &'static str,
        /// What the signer said.
        #[source]
        source: SdkError,
    },
    /// The dev mnemonic gave no key.
    #[error("deriving the dev funder")]
    DevFunder(#[source] alloy_signer_local::LocalSignerError),
    /// An RPC call failed.
    #[error("{context}")]
    Rpc {
        /// What the call was for.
        context: String,
        /// What the client said.
        #[source]
        source: SdkError,
    },
    /// The node answered without something it must have.
    #[error("{0}")]
    Missing(String),
    /// The funder cannot pay for the run.
    #[error(
        "the funder {funder} has {balance} wei, the run needs about {needed}: fund it or pass another --key"
    )]
    Underfunded {
        /// The funder.
        funder: Address,
        /// What it has.
        balance: U256,
        /// About what the run needs.
        needed: U256,
    },
    /// The node refused a funding transaction.
    #[error("the node refused a funding transaction: {0}")]
    FundingRefused(#[source] SdkError),
    /// A funding transaction reverted.
    #[error("funding transaction {0} failed (reverted)")]
    FundingReverted(B256),
    /// Funding was not included in time.
    #[error(
        "{outstanding} funding transactions not included after {seconds}s: is the node producing blocks?"
    )]
    FundingTimeout {
        /// Funding transactions not yet in a block.
        outstanding: usize,
        /// How long the run waited.
        seconds: u64,
    },
    /// The sender nonces could not be reserved.
    #[error("reserving nonces")]
    Nonces(#[source] SdkError),
    /// A task of the run panicked or was cancelled.
    #[error("{context}")]
    Task {
        /// Which task.
        context: &'static str,
        /// How it ended.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The semaphore bounding the batches in flight was closed.
    #[error("the send permits closed")]
    PermitsClosed,
    /// The latency histogram could not be made.
    #[error("making the latency histogram")]
    Histogram(#[source] hdrhistogram::CreationError),
}

impl LoadError {
    /// An RPC failure, said to be about `context`.
    pub(crate) fn rpc(context: impl Into<String>) -> impl FnOnce(SdkError) -> LoadError {
        let context = context.into();
        move |source| LoadError::Rpc { context, source }
    }
}
