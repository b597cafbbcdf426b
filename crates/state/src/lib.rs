//! Stave's state layers: keep the executor off the disk.
//!
//! A read goes down until something knows the key:
//! - L1, the block's own writes so far (the executor's overlay, in `stave-exec`);
//! - L2, the diff layers of the last [`KEPT_LAYERS`] blocks, newest first; the top layer's
//!   bloom filter covers all of them, so a key no recent block wrote skips them, and an
//!   index of the layers that changed each account sends the others straight there;
//! - L1.5, the origin pool: values read from below the layers, kept until a flush writes
//!   their key, shared by the executor's threads and the prefetcher of `stave-node` (what execution
//!   read goes in when the next block's layer is prepared);
//! - L3, the clean cache of values flushes wrote to disk (S3-FIFO, `quick_cache`);
//! - the disk layer: `stave-storage`, at the flushed height.
//!
//! Blocks are durable at commit; their state changes stay in layers until
//! [`StateLayers::flush`] writes the oldest [`FLUSH_BATCH`] beyond the kept ones in one
//! transaction. After a restart the node re-executes the blocks after the flushed height
//! to rebuild the layers. A node that keeps a [`History`] also has each flush record the
//! values its blocks changed, so the state of any block in the window can be read from
//! disk. Each layer knows only its parent's bloom, as go-ethereum's
//! snapshot layers do.

mod bloom;
mod error;
mod history;
mod key;
mod layer;
mod layers;
mod sharded;
mod snapshot;
mod touched;

pub use error::StateLayerError;
pub use history::{History, StateOptions};
pub use layer::SpeculativeLayer;
pub use layers::{
    DEFAULT_CLEAN_CACHE_ENTRIES, DiskLoads, FLUSH_BATCH, KEPT_LAYERS, LayerReads, PreparedLayer,
    StateLayers, prefetch_disk_loads,
};
pub use snapshot::Snapshot;
