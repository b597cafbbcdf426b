//! Consensus for a multi-validator Stave chain, on an existing BFT engine:
//! commonware-consensus Simplex with its marshal. Nothing here is a
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
//! wiring of one validator, [`epochs`] its engine per consensus epoch, [`validator_sets`] who votes in each epoch (the governance contract's validators), [`catch_up`] the finalized blocks a node catching
//! up takes from its peers, each checked against a finalization certificate, [`push`] the finalized blocks validators push to full nodes.

pub mod application;
pub mod block;
pub mod catch_up;
pub mod engine;
pub mod epochs;
pub mod keys;
pub mod push;
pub mod transport;
pub mod validator_sets;

pub use application::{CatchingUp, ChainActor, StaveApp, chain_actor};
pub use block::ConsensusBlock;
pub use catch_up::{CatchUpSource, CertifiedPeers, RunChecker};
pub use engine::{ValidatorConfig, run_validator};
pub use epochs::{EpochError, EpochStart};
pub use push::{FinalizedPusher, PushedBlocks};
pub use transport::{ConsensusNet, TransportError, validator_node_id};
pub use validator_sets::{EpochSchemes, ValidatorSetError, ValidatorSets};
