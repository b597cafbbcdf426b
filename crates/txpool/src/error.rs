//! Why the pool refused or dropped a transaction. Messages follow go-ethereum's wording,
//! which wallets and SDKs (ethers, viem, web3.py, web3j) match on.

use alloy_primitives::{B256, U256};
use stave_primitives::TxError;

/// Why a transaction was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// The bytes are not a valid transaction, or a stateless rule fails.
    #[error("invalid transaction: {0}")]
    Invalid(TxError),
    /// Signed for another chain.
    #[error("invalid chain id for signer: have {found} want {expected}")]
    WrongChainId {
        /// The chain id the transaction carries.
        found: u64,
        /// This chain's id.
        expected: u64,
    },
    /// A pre-EIP-155 legacy transaction, replayable on any chain.
    #[error("only replay-protected (EIP-155) transactions allowed")]
    NotReplayProtected,
    /// The same bytes are already in the pool.
    #[error("already known")]
    AlreadyKnown,
    /// The nonce is below the sender's account nonce.
    #[error("nonce too low: next nonce {next}, tx nonce {nonce}")]
    NonceTooLow {
        /// The account's next nonce.
        next: u64,
        /// The transaction's nonce.
        nonce: u64,
    },
    /// The sender cannot pay `gas * fee cap + value`.
    #[error(
        "insufficient funds for gas * price + value: balance {balance}, tx cost {cost}, overshot {}",
        cost.saturating_sub(*balance)
    )]
    InsufficientFunds {
        /// The sender's balance.
        balance: U256,
        /// What the transaction may cost.
        cost: U256,
    },
    /// The sender can pay this transaction, but not together with its pending ones
    /// (go-ethereum's overdraft check for a new nonce).
    #[error(
        "insufficient funds for gas * price + value: balance {balance}, queued cost {queued}, tx cost {cost}, overshot {}",
        queued.saturating_add(*cost).saturating_sub(*balance)
    )]
    InsufficientFundsQueued {
        /// The sender's balance.
        balance: U256,
        /// What the sender's pending transactions may cost together.
        queued: U256,
        /// What this transaction may cost.
        cost: U256,
    },
    /// A replacement would make the sender's pending transactions cost more than its
    /// balance (go-ethereum's overdraft check for a replacement).
    #[error(
        "insufficient funds for gas * price + value: balance {balance}, queued cost {queued}, tx bumped {bump}, overshot {}",
        queued.saturating_add(*bump).saturating_sub(*balance)
    )]
    InsufficientFundsBumped {
        /// The sender's balance.
        balance: U256,
        /// What the sender's pending transactions may cost together.
        queued: U256,
        /// How much more the replacement may cost than the transaction it replaces.
        bump: U256,
    },
    /// Another transaction with this nonce is in the pool and this one does not pay enough
    /// more to replace it.
    #[error("replacement transaction underpriced")]
    ReplacementUnderpriced,
    /// The fee cap is below the chain's base fee.
    #[error("max fee per gas less than block base fee: maxFeePerGas {fee_cap}, baseFee {base_fee}")]
    FeeCapTooLow {
        /// The transaction's fee cap.
        fee_cap: u128,
        /// The current base fee.
        base_fee: u64,
    },
    /// The gas limit is above the block gas limit: no block could include it.
    #[error("exceeds block gas limit")]
    GasLimitTooHigh,
    /// The sender already has as many transactions in the pool as allowed.
    #[error("txpool is full for this sender ({limit} transactions)")]
    SenderFull {
        /// The per-sender limit.
        limit: usize,
    },
    /// The nonce is too far ahead of the account nonce.
    #[error("nonce too high: next nonce {next}, tx nonce {nonce} (gap limit {limit})")]
    NonceTooHigh {
        /// The account's next nonce.
        next: u64,
        /// The transaction's nonce.
        nonce: u64,
        /// How far ahead a nonce may be.
        limit: u64,
    },
    /// The pool is full and the transaction pays no more than the cheapest one in it.
    #[error("txpool is full")]
    PoolFull,
    /// The pool is full, the transaction waits behind a nonce gap, and only executable
    /// transactions pay less: a queued transaction never evicts a pending one.
    #[error("future transaction tries to replace pending")]
    FutureReplacePending,
    /// Reading the sender's account failed.
    #[error("state unavailable: {0}")]
    State(String),
    /// A rule of the governance contract's permissions refuses it.
    #[error("permission denied: {0}")]
    Forbidden(stave_governance::Refusal),
}

impl PoolError {
    /// Short stable label for metrics (`reason` label).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::WrongChainId { .. } => "wrong_chain_id",
            Self::NotReplayProtected => "not_replay_protected",
            Self::AlreadyKnown => "already_known",
            Self::NonceTooLow { .. } => "nonce_too_low",
            Self::InsufficientFunds { .. }
            | Self::InsufficientFundsQueued { .. }
            | Self::InsufficientFundsBumped { .. } => "insufficient_funds",
            Self::ReplacementUnderpriced => "replacement_underpriced",
            Self::FeeCapTooLow { .. } => "fee_cap_too_low",
            Self::GasLimitTooHigh => "gas_limit_too_high",
            Self::SenderFull { .. } => "sender_full",
            Self::NonceTooHigh { .. } => "nonce_too_high",
            Self::PoolFull => "pool_full",
            Self::FutureReplacePending => "future_replace_pending",
            Self::State(_) => "state",
            Self::Forbidden(_) => "forbidden",
        }
    }
}

impl From<TxError> for PoolError {
    fn from(error: TxError) -> Self {
        match error {
            TxError::WrongChainId { found, expected } => Self::WrongChainId { found, expected },
            other => Self::Invalid(other),
        }
    }
}

/// Why a transaction left the pool without being included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A transaction with the same sender and nonce and a higher fee replaced it.
    Replaced {
        /// The replacing transaction.
        by: B256,
    },
    /// The pool was full and a better-paying (or executable) transaction took its place.
    Evicted,
    /// It waited behind a nonce gap longer than the queued lifetime.
    Expired,
    /// Another transaction with its nonce was included in a block.
    NonceUsed,
    /// It was selected for a block but could not execute there (its sender's balance or
    /// nonce changed since admission).
    FailedExecution,
    /// Its sender's balance dropped below what it alone may cost (go-ethereum drops such
    /// a transaction as unpayable).
    Unaffordable,
    /// A dev chain went back to a snapshot (`evm_revert`): the pool empties with it, as
    /// the state its transactions were checked against is gone.
    Reverted,
}

impl DropReason {
    /// How many reasons there are.
    pub const COUNT: usize = Self::LABELS.len();

    /// Every reason's label in a fixed order: the values of the `reason` label of
    /// `stave_txpool_dropped_total`, and the keys of `txpool_status`'s `dropped`.
    pub const LABELS: [&'static str; 7] = [
        "replaced",
        "evicted",
        "expired",
        "nonce_used",
        "failed_execution",
        "unaffordable",
        "reverted",
    ];

    /// Short stable label for metrics (`reason` label).
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.index()]
    }

    /// This reason's position in [`DropReason::LABELS`].
    pub fn index(&self) -> usize {
        match self {
            Self::Replaced { .. } => 0,
            Self::Evicted => 1,
            Self::Expired => 2,
            Self::NonceUsed => 3,
            Self::FailedExecution => 4,
            Self::Unaffordable => 5,
            Self::Reverted => 6,
        }
    }
}
