//! The producer loop of a node that makes blocks alone: a block every `block_time` (empty
//! if need be: clients waiting for the next block must get one), or as soon as the pool
//! holds a full block, through the import pipeline's execute and commit stages.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use stave_node::{BlockProducer, Produced, unix_seconds};
use stave_txpool::TxPool;
use tokio::sync::broadcast;

use crate::LaunchError;

/// When the producer makes a block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rhythm {
    /// Longest time between blocks.
    pub block_time: Duration,
    /// A pool holding this many transactions makes a block at once.
    pub block_txs: usize,
}

/// Makes blocks at `rhythm`, sending each to RPC subscribers through `heads` and to peers
/// through `gossip`. Stops at `stop`, or on the first error (storage full...); either way
/// it writes the state layers to disk before returning, so the next start re-executes
/// nothing.
pub(crate) fn produce_blocks(
    mut producer: BlockProducer<'static>,
    pool: &TxPool,
    heads: &broadcast::Sender<Arc<Produced>>,
    gossip: Option<&stave_net::Gossip>,
    stop: &AtomicBool,
    rhythm: Rhythm,
) -> Result<(), LaunchError> {
    let Rhythm {
        block_time,
        block_txs,
    } = rhythm;
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if pool.len() < block_txs && last.elapsed() < block_time {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        last = Instant::now();
        let produced = producer
            .produce(unix_seconds())
            .map_err(LaunchError::import("producing a block"))?;
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block"
        );
        if let Some(gossip) = gossip {
            let encoded = produced
                .encode()
                .map_err(LaunchError::import("encoding a block for peers"))?;
            if let Err(error) = gossip.announce_block(&encoded) {
                tracing::warn!(%error, "block not announced");
            }
        }
        // No subscriber is not an error.
        let _ = heads.send(Arc::new(produced));
    }
    close(producer)
}

/// Writes the producer's state layers to disk (see [`BlockProducer::close`]).
pub(crate) fn close(producer: BlockProducer<'static>) -> Result<(), LaunchError> {
    producer.close().map_err(LaunchError::import(
        "writing the state to disk before stopping",
    ))
}
