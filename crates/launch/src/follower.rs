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
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use stave_net::{Network, NodeId, Offence, gossip::MAX_BLOCKS_PER_REQUEST};
use stave_node::{BlockProducer, Produced};
use tokio::{runtime::Handle, sync::broadcast};

use crate::{LaunchError, p2p::P2p, producer::close};

/// The follower loop: imports peers' blocks in order through the import pipeline,
/// fetching by number whatever a gap (or a restart) left out, and keeps the highest
/// number its block sources sent in `highest` (`eth_syncing`). Runs until `stop`.
pub(crate) fn follow_blocks(
    mut producer: BlockProducer<'static>,
    p2p: P2p,
    runtime: Handle,
    heads: &broadcast::Sender<Arc<Produced>>,
    highest: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), LaunchError> {
    let P2p {
        network,
        gossip,
        mut blocks,
        future_blocks,
        ..
    } = p2p;
    let mut pending = FutureBlocks::new(future_blocks);
    while !stop.load(Ordering::Relaxed) {
        let received = runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(200), blocks.recv()).await
        });
        match received {
            Ok(Some(block)) => {
                // Only the block sources' blocks reach here (`[p2p] block_sources`).
                highest.fetch_max(block.number, Ordering::AcqRel);
                let (head, _) = producer
                    .head()
                    .map_err(LaunchError::import("reading the head"))?;
                if !pending.offer(head, block.number, block.from, block.bytes) {
                    metrics::counter!("stave_follower_blocks_ignored_total").increment(1);
                    continue;
                }
            }
            Ok(None) => break,
            Err(_) => continue,
        }
        loop {
            let (head, _) = producer
                .head()
                .map_err(LaunchError::import("reading the head"))?;
            let Some((number, from)) = pending.first_after(head) else {
                break;
            };
            let batch = match pending.next_of(head) {
                Some(bytes) => vec![bytes],
                None => {
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
                }
            };
            if !import_all(&mut producer, &batch, heads, &network, from)? {
                break;
            }
        }
    }
    close(producer)
}

/// Peers' blocks ahead of the head, waiting for the blocks before them: only those at most
/// `limit` ahead, one per number (a later one replaces the earlier), so what is held is at
/// most `limit` blocks however far off the numbers peers announce.
struct FutureBlocks {
    held: BTreeMap<u64, (NodeId, Bytes)>,
    limit: u64,
}

impl FutureBlocks {
    fn new(limit: u64) -> Self {
        Self {
            held: BTreeMap::new(),
            limit,
        }
    }

    /// Holds block `number` from `from` if it is ahead of `head` by at most the limit;
    /// returns whether it is held.
    fn offer(&mut self, head: u64, number: u64, from: NodeId, bytes: Bytes) -> bool {
        self.forget_up_to(head);
        if number <= head || number - head > self.limit {
            return false;
        }
        self.held.insert(number, (from, bytes));
        true
    }

    /// The lowest block held above `head` and its sender; those at or below it (imported
    /// meanwhile) are dropped.
    fn first_after(&mut self, head: u64) -> Option<(u64, NodeId)> {
        self.forget_up_to(head);
        self.held
            .first_key_value()
            .map(|(&number, &(from, _))| (number, from))
    }

    /// Takes block `head + 1` if it is held.
    fn next_of(&mut self, head: u64) -> Option<Bytes> {
        self.held.remove(&(head + 1)).map(|(_, bytes)| bytes)
    }

    /// Drops the blocks at or below `head`. Everything held was within the limit of an
    /// earlier head, and heads only grow, so what is left is within the limit of `head`.
    fn forget_up_to(&mut self, head: u64) {
        while let Some(entry) = self.held.first_entry()
            && *entry.key() <= head
        {
            entry.remove();
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn block(number: u64) -> Bytes {
        Bytes::from(vec![number as u8; 1_000])
    }

    #[test]
    fn blocks_far_ahead_are_not_held_and_those_near_are_held_up_to_the_limit() {
        let (honest, hostile) = ([1; 32], [2; 32]);
        let mut pending = FutureBlocks::new(8);
        let mut head = 0;
        // A peer announcing numbers far off, and every number of the window and past it,
        // many times over: at most 8 blocks are ever held.
        for round in 0..100 {
            for number in [head + 9, head + 1_000, u64::MAX] {
                assert!(!pending.offer(head, number, hostile, block(number)));
            }
            for number in head + 1..head + 40 {
                let held = pending.offer(head, number, hostile, block(number));
                assert_eq!(held, number - head <= 8, "block {number} at head {head}");
                assert!(pending.held.len() <= 8, "round {round}");
            }
            let held_bytes: usize = pending.held.values().map(|(_, bytes)| bytes.len()).sum();
            assert!(held_bytes <= 8 * 1_000);

            // The chain still moves: the honest block for the next number replaces the
            // held one and is the next to import; a block already imported is dropped.
            assert!(pending.offer(head, head + 1, honest, block(head + 1)));
            assert_eq!(pending.first_after(head), Some((head + 1, honest)));
            assert_eq!(pending.next_of(head), Some(block(head + 1)));
            head += 1;
            assert!(!pending.offer(head, head, honest, block(head)));
            assert_eq!(pending.first_after(head).map(|(n, _)| n), Some(head + 1));
        }
        // A gap: what is held is the first block past it, to fetch the gap from its peer.
        let mut pending = FutureBlocks::new(8);
        assert!(pending.offer(0, 5, honest, block(5)));
        assert_eq!(pending.first_after(0), Some((5, honest)));
        assert_eq!(pending.next_of(0), None);
        // The head jumped past it (the gap was fetched): nothing is left.
        assert_eq!(pending.first_after(5), None);
    }
}
