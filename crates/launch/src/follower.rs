//! The follower loop of a node that does not produce blocks: it imports its peers'
//! blocks in order through the import pipeline, catching up by number after a gap or a
//! restart.
//!
//! What peers feed it is bounded: blocks are held only up to `future_blocks` ahead of
//! the head (one per number), so a peer announcing far-off numbers pins nothing. A block
//! the node refuses costs its sender only when the block is at fault; a failure of this
//! node's own (storage, the executor) stops the loop with the error instead.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use stave_net::{Network, NodeId, Offence, gossip::MAX_BLOCKS_PER_REQUEST};
use stave_node::{BlockProducer, Produced};
use tokio::{runtime::Handle, sync::broadcast};

use crate::{LaunchError, p2p::P2p, producer::close};

/// The follower loop: imports peers' blocks in order through the import pipeline,
/// fetching by number whatever a gap (or a restart) left out. Runs until `stop`.
pub(crate) fn follow_blocks(
    mut producer: BlockProducer<'static>,
    p2p: P2p,
    runtime: Handle,
    heads: &broadcast::Sender<Arc<Produced>>,
    stop: &AtomicBool,
) -> Result<(), LaunchError> {
    let P2p {
        network,
        gossip,
        mut blocks,
        future_blocks,
        ..
    } = p2p;
    let mut pending: BTreeMap<u64, (NodeId, Bytes)> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let received = runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(200), blocks.recv()).await
        });
        match received {
            Ok(Some(block)) => {
                let (head, _) = producer
                    .head()
                    .map_err(LaunchError::import("reading the head"))?;
                if block.number <= head || block.number - head > future_blocks {
                    metrics::counter!("stave_follower_blocks_ignored_total").increment(1);
                    continue;
                }
                pending.insert(block.number, (block.from, block.bytes));
            }
            Ok(None) => break,
            Err(_) => continue,
        }
        loop {
            let (head, _) = producer
                .head()
                .map_err(LaunchError::import("reading the head"))?;
            pending = pending.split_off(&(head + 1));
            let Some((&number, (from, _))) = pending.first_key_value() else {
                break;
            };
            let from = *from;
            let batch = if number == head + 1 {
                pending
                    .pop_first()
                    .map(|(_, (_, bytes))| vec![bytes])
                    .unwrap_or_default()
            } else {
                let count = (number - head - 1).min(u64::from(MAX_BLOCKS_PER_REQUEST)) as u32;
                tracing::info!(from = head + 1, count, "catching up");
                match runtime.block_on(gossip.fetch_blocks(from, head + 1, count)) {
                    Ok(blocks) if !blocks.is_empty() => blocks,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "catching up failed");
                        break;
                    }
                }
            };
            if !import_all(&mut producer, &batch, heads, &network, from)? {
                break;
            }
        }
    }
    close(producer)
}

/// Imports `blocks` in order, overlapping their stages; on a refused block, charges the
/// peer that sent it and returns false. A failure of this node's own is the error.
fn import_all(
    producer: &mut BlockProducer<'static>,
    blocks: &[Bytes],
    heads: &broadcast::Sender<Arc<Produced>>,
    network: &Network,
    from: NodeId,
) -> Result<bool, LaunchError> {
    let imported = producer.follow_stream(blocks.iter().map(AsRef::as_ref), |produced| {
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block imported"
        );
        let _ = heads.send(Arc::new(produced));
    });
    match imported {
        Ok(()) => Ok(true),
        Err(error) if error.is_invalid_block() => {
            tracing::warn!(%error, "peer's block refused");
            network.penalize(from, Offence::BadMessage);
            Ok(false)
        }
        Err(error) => Err(LaunchError::import("importing a peer's block")(error)),
    }
}
