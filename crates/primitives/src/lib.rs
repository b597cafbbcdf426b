//! Stave's shared data types: transactions, headers, blocks, receipts and the chain spec.
//!
//! Every other crate speaks these types. Transactions are alloy-consensus envelopes
//! ([`SignedTx`]) decoded from their exact canonical bytes, checked by one stateless rule
//! set ([`SignedTx::validate`]) and recovered with libsecp256k1 into a [`RecoveredTx`].
//! Headers commit to their transactions through [`merkle_root`], and to their receipts
//! and state changes through [`chunked_root`], computed with rayon.
//! A [`ChainSpec`] comes from a go-ethereum genesis file.
//!
//! ```
//! use stave_primitives::{SignedTx, TxError};
//!
//! // Garbage is a typed error, never a panic.
//! assert!(matches!(SignedTx::decode(&[0xc0]), Err(TxError::Decode(_))));
//! ```

mod chainspec;
pub mod dev;
mod error;
mod header;
mod merkle;
mod receipt;
mod state;
mod state_reader;
mod stored_diff;
mod transaction;

pub use alloy_primitives::{Address, B256, Bytes, Signature, U256, keccak256};
pub use chainspec::{
    ChainSpec, DEFAULT_BASE_FEE, DEV_BALANCE_WEI, DEV_GAS_LIMIT, GeneratedState, GeneratedToken,
    mapping_slot,
};
pub use error::{ChainSpecError, TxError};
pub use header::{Block, Header, SealedBlock, SealedHeader};
pub use merkle::{
    GlobalPoolLeaves, ITEMS_PER_LEAF, LeafHasher, SerialLeaves, chunked_root, merkle_root,
};
pub use receipt::{
    Receipt, ReceiptLeaves, block_bloom, decode_stored_receipts, encode_stored_receipts,
    receipts_root,
};
pub use state::{
    AccountDiff, AccountDiffs, AccountDiffsIter, AccountState, SlotDiffs, SlotsHint, SortedIter,
    SortedMap, StateDiff, generated_genesis_root, receipts_and_state_roots, state_root,
};
pub use state_reader::{MemoryState, StateError, StateReader};
pub use stored_diff::{
    StoredDiffError, decode_stored_account, decode_stored_diff, encode_stored_account,
    encode_stored_diff,
};
pub use transaction::{
    GasFee, IntrinsicGas, MAX_INITCODE_SIZE, MAX_TX_SIZE, RecoveredTx, SignedTx, TxFields,
    TxSummary, decode_and_validate,
};

/// The EVM fork whose rules Stave applies: Prague.
///
/// Prague is the newest fork whose transaction rules the ethereum-tests vectors pin, and
/// its successor Osaka caps a transaction's gas at 2^24 (EIP-7825), which would refuse
/// the large-gas transactions consortium chains run. Changing this changes intrinsic gas
/// and opcode semantics, so it is a hard fork.
pub const SPEC: revm_primitives::hardfork::SpecId = revm_primitives::hardfork::SpecId::PRAGUE;
