//! Consensus for a multi-validator Stave chain, on an existing BFT engine:
//! commonware-consensus Simplex with its marshal (DESIGN.md §4). Nothing here is a
//! consensus protocol; it adapts the engine to Stave's block path:
//!
//! - propose: build a block from the txpool on the proposal's parent and execute it;
//! - verify: run the proposed block through the import pipeline (decode, verify with the
//!   sender cache, execute, header check) on its parent;
//! - finalized: commit (idempotent: marshal may redeliver after a restart).
//!
//! [`block`] is the block as the engine sees it, [`application`] the chain actor behind
//! the engine, [`transport`] the consensus channels on Stave's own network (stave-net:
//! mutual TLS where a validator's certificate holds its consensus key), [`engine`] the
//! wiring of one validator, [`senders`] the senders a node catching up takes from the
//! other validators instead of recovering them.

pub mod application;
pub mod block;
pub mod engine;
pub mod keys;
pub mod senders;
pub mod transport;

pub use application::{ChainActor, StaveApp, chain_actor};
pub use block::ConsensusBlock;
pub use engine::{ValidatorConfig, run_validator};
pub use senders::{SenderSource, ValidatorSenders};
pub use transport::{ConsensusNet, TransportError, validator_node_id};
