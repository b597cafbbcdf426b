//! Wiring the stages into a node: the import seam (open → receive → execute → commit, and
//! blocks on uncommitted parents), block production, and the genesis of a data dir.
//!
//! [`Chain`] owns the stages for one data dir, and every block that enters goes through
//! it (see the `chain` module for the stages and their named inputs and outputs):
//!
//! | entry                                   | part of the seam                                      |
//! |-----------------------------------------|-------------------------------------------------------|
//! | follower (`BlockProducer::follow_stream`) | [`Chain::import_stream`]: receive → execute → commit |
//! | validator's catch-up and unseen finalized blocks (`import_final`) | `follow_stream`, with agreed senders ([`Incoming`]) |
//! | validator proposing (`BlockProducer::propose_on`) | [`Chain::prepare_on`] on speculative ancestors |
//! | validator verifying (`BlockProducer::validate_on`) | [`Chain::validate_on`]: receive → execute on speculative state |
//! | validator finalizing (`BlockProducer::commit_final`) | [`Chain::commit_speculative`]: commit |
//! | dev producer (`BlockProducer::produce`)  | [`Chain::prepare`] → [`Chain::commit`]                |
//! | `stave import`, the pipeline bench      | [`Chain::import_stream`] (the bench's staged run: [`Chain::import`]) |
//! | restart                                 | [`Chain::open`]: replay of the journaled blocks       |
//!
//! A stage refuses a block with a typed [`ImportError`] if it, or the header's roots,
//! disagree. Execution reads the state layers of `stave-state`, which the chain keeps;
//! the [`Prefetcher`] loads a block's state ahead of its execution. [`BlockProducer`]
//! makes blocks from the txpool and follows or finalizes blocks for a node; [`ChainView`]
//! answers state queries at the head or at any kept block.

mod chain;
mod error;
mod generate;
mod prefetch;
mod producer;

pub use chain::{
    Chain, Imported, Incoming, Parallelism, PreparedBlock, Replayed, STAGE_SECONDS,
    SpeculativeBlock, StageTimes, encoded_block, genesis,
};
pub use error::ImportError;
pub use generate::{ACCOUNTS_PER_WRITE, GenerateStep, generate_state};
pub use prefetch::{DEFAULT_PREFETCH_THREADS, DISK_LOAD, Prefetcher, WARM_RUN};
pub use producer::{
    BlockProducer, ChainView, DEFAULT_FILL_ROUNDS, Produced, ViewError, unix_seconds,
};
