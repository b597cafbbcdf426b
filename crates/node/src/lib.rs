//! Wiring the stages into a node: the import pipeline (decode → verify → execute →
//! commit), block building, and the genesis of a data dir.
//!
//! [`Chain`] owns the stages for one data dir: [`Chain::import`] takes an encoded block
//! through every stage and refuses it with a typed [`ImportError`] if any stage or the
//! header's roots disagree; [`Chain::build`] makes and commits the next block from
//! transactions; execution reads the state layers of `stave-state`, which it keeps.
//! [`BlockProducer`] makes blocks from the txpool on a single-validator chain;
//! [`ChainView`] answers state queries at the head or at any kept block.

mod chain;
mod error;
mod producer;

pub use chain::{
    Chain, Imported, Incoming, Parallelism, PreparedBlock, Replayed, STAGE_SECONDS,
    SpeculativeBlock, StageTimes, encoded_block, genesis,
};
pub use error::ImportError;
pub use producer::{BlockProducer, ChainView, Produced, ViewError, unix_seconds};
