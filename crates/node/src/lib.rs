//! Wiring the stages into a node: the import pipeline (decode → verify → execute →
//! commit), block building, and the genesis of a data dir.
//!
//! [`Chain`] owns the stages for one data dir: [`Chain::import`] takes an encoded block
//! through every stage and refuses it with a typed [`ImportError`] if any stage or the
//! header's roots disagree; [`Chain::build`] makes and commits the next block from
//! transactions. [`DiskState`] is the executor's view of committed state.
//! [`BlockProducer`] makes blocks from the txpool on a single-validator chain;
//! [`ChainView`] answers state queries at the head or, through undo layers
//! ([`history`]), at any of the last [`HISTORY_DEPTH`] blocks.

mod chain;
mod disk_state;
mod error;
pub mod history;
mod producer;

pub use chain::{Chain, Imported, Parallelism, PreparedBlock, STAGE_SECONDS, StageTimes, genesis};
pub use disk_state::DiskState;
pub use error::ImportError;
pub use history::HISTORY_DEPTH;
pub use producer::{BlockProducer, ChainView, Produced, ViewError};
