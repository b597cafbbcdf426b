//! The producer loop of a node that makes blocks alone: a block every `block_time` (empty
//! if need be: clients waiting for the next block must get one), or as soon as the pool
//! holds a full block, through the import pipeline's execute and commit stages. On a dev
//! node its JSON-RPC steers it too ([`DevMining`]): blocks on request, a block per
//! transaction (automine), a clock set ahead.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use stave_exec::StateOverride;
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

/// What a dev node's JSON-RPC asks of the producer loop.
enum Work {
    /// Blocks (`evm_mine`, `anvil_mine`): `blocks` of them from `first` on, `interval`
    /// seconds apart, the first committing `edits` (`anvil_setBalance` and the like).
    Mine {
        blocks: u64,
        first: Option<u64>,
        interval: u64,
        edits: Option<StateOverride>,
    },
    /// Keep the head's state to come back to (`evm_snapshot`).
    Snapshot,
    /// Go back to a snapshot (`evm_revert`).
    Revert(u64),
}

/// The producer loop's answer to [`Work`].
#[derive(Debug, Clone, Copy)]
enum Answer {
    Mined,
    Snapshot(u64),
    Reverted(bool),
}

/// [`Work`] and where its answer goes.
struct Request {
    work: Work,
    done: std::sync::mpsc::Sender<Result<Answer, String>>,
}

/// A point `evm_revert` can go back to: a block, and the block clock's lead then.
#[derive(Debug, Clone, Copy)]
struct SnapshotPoint {
    number: u64,
    ahead: u64,
}

/// What a dev node's JSON-RPC asked of its producer loop.
#[derive(Default)]
struct Controls {
    automine: bool,
    /// Seconds the block clock runs ahead of the wall clock.
    ahead: u64,
    next_timestamp: Option<u64>,
    requests: Vec<Request>,
    /// Snapshots by id; each pins its block's state in the layers until it is reverted
    /// to or dropped by a revert to an earlier one (as Anvil and Hardhat do).
    snapshots: std::collections::BTreeMap<u64, SnapshotPoint>,
    /// The id the next snapshot gets (Anvil's first is 0).
    next_snapshot: u64,
    /// Set once the producer loop has ended: no request would be answered.
    stopped: bool,
}

/// A dev node's block making as its JSON-RPC steers it (`stave_rpc::dev::Mining`): the
/// producer loop reads these controls every turn.
#[derive(Default)]
pub(crate) struct DevMining(Mutex<Controls>);

impl DevMining {
    /// The timestamp of the next block: the one asked for, or the block clock's now.
    fn next_timestamp(&self) -> u64 {
        let mut controls = self.0.lock();
        let ahead = controls.ahead;
        controls
            .next_timestamp
            .take()
            .unwrap_or_else(|| unix_seconds() + ahead)
    }

    /// Queues `work` for the producer loop and waits for its answer.
    fn request(&self, work: Work) -> Result<Answer, String> {
        let (done, answer) = std::sync::mpsc::channel();
        {
            let mut controls = self.0.lock();
            if controls.stopped {
                return Err("the node is stopping".into());
            }
            controls.requests.push(Request { work, done });
        }
        answer
            .recv()
            .unwrap_or_else(|_| Err("the node is stopping".into()))
    }

    /// Does `work` on the producer loop's thread.
    fn serve(
        &self,
        work: Work,
        producer: &mut BlockProducer<'static>,
        outlets: &Outlets<'_>,
    ) -> Result<Answer, LaunchError> {
        match work {
            Work::Mine {
                blocks,
                first,
                interval,
                edits,
            } => {
                let first = first.unwrap_or_else(|| self.next_timestamp());
                for k in 0..blocks {
                    let edits = edits.as_ref().filter(|_| k == 0);
                    outlets.produce(producer, first.saturating_add(k * interval), edits)?;
                }
                Ok(Answer::Mined)
            }
            Work::Snapshot => self.snapshot(producer).map(Answer::Snapshot),
            Work::Revert(id) => self.revert(producer, id).map(Answer::Reverted),
        }
    }

    /// Pins the head's state and records it as a new snapshot; returns its id.
    fn snapshot(&self, producer: &BlockProducer<'static>) -> Result<u64, LaunchError> {
        let number = producer
            .pin_head()
            .map_err(LaunchError::import("keeping a snapshot's state"))?;
        let mut controls = self.0.lock();
        let id = controls.next_snapshot;
        controls.next_snapshot += 1;
        let ahead = controls.ahead;
        controls
            .snapshots
            .insert(id, SnapshotPoint { number, ahead });
        Ok(id)
    }

    /// Takes the chain back to snapshot `id`, dropping it and every later one; false if
    /// there is no such snapshot.
    fn revert(&self, producer: &mut BlockProducer<'static>, id: u64) -> Result<bool, LaunchError> {
        let dropped = {
            let mut controls = self.0.lock();
            if !controls.snapshots.contains_key(&id) {
                return Ok(false);
            }
            let dropped = controls.snapshots.split_off(&id);
            controls.ahead = dropped[&id].ahead;
            controls.next_timestamp = None;
            dropped
        };
        let target = dropped[&id].number;
        let removed = producer
            .unwind_to(target)
            .map_err(LaunchError::import("going back to a snapshot"))?;
        for point in dropped.values() {
            producer.unpin(point.number);
        }
        tracing::info!(
            snapshot = id,
            number = target,
            removed,
            "reverted to a snapshot"
        );
        Ok(true)
    }
}

impl stave_rpc::dev::Mining for DevMining {
    fn mine(&self, blocks: u64, first: Option<u64>, interval: u64) -> Result<(), String> {
        self.request(Work::Mine {
            blocks,
            first,
            interval,
            edits: None,
        })
        .map(drop)
    }

    fn edit(&self, edits: StateOverride) -> Result<(), String> {
        self.request(Work::Mine {
            blocks: 1,
            first: None,
            interval: 1,
            edits: Some(edits),
        })
        .map(drop)
    }

    fn snapshot(&self) -> Result<u64, String> {
        match self.request(Work::Snapshot)? {
            Answer::Snapshot(id) => Ok(id),
            _ => Err("the producer answered another request".into()),
        }
    }

    fn revert(&self, id: u64) -> Result<bool, String> {
        match self.request(Work::Revert(id))? {
            Answer::Reverted(found) => Ok(found),
            _ => Err("the producer answered another request".into()),
        }
    }

    fn set_automine(&self, on: bool) {
        self.0.lock().automine = on;
    }

    fn automine(&self) -> bool {
        self.0.lock().automine
    }

    fn increase_time(&self, seconds: u64) -> u64 {
        let mut controls = self.0.lock();
        controls.ahead = controls.ahead.saturating_add(seconds);
        controls.ahead
    }

    fn set_next_timestamp(&self, timestamp: u64) {
        self.0.lock().next_timestamp = Some(timestamp);
    }
}

/// Marks a dev node's controls stopped when the producer loop ends, however it ends, and
/// drops the requests it will not answer: their callers then hear that the node is
/// stopping instead of waiting for ever.
struct Stopping<'a>(Option<&'a DevMining>);

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        if let Some(dev) = self.0 {
            let mut controls = dev.0.lock();
            controls.stopped = true;
            controls.requests.clear();
        }
    }
}

/// Where the producer loop's blocks go: RPC subscribers and peers.
struct Outlets<'a> {
    heads: &'a broadcast::Sender<Arc<Produced>>,
    gossip: Option<&'a stave_net::Gossip>,
}

impl Outlets<'_> {
    /// Makes one block stamped `timestamp`, committing `edits` first if any, and hands it
    /// on.
    fn produce(
        &self,
        producer: &mut BlockProducer<'static>,
        timestamp: u64,
        edits: Option<&StateOverride>,
    ) -> Result<(), LaunchError> {
        let produced = producer
            .produce_edited(timestamp, edits)
            .map_err(LaunchError::import("producing a block"))?;
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block"
        );
        if let Some(gossip) = self.gossip {
            let encoded = produced
                .encode()
                .map_err(LaunchError::import("encoding a block for peers"))?;
            if let Err(error) = gossip.announce_block(&encoded) {
                tracing::warn!(%error, "block not announced");
            }
        }
        // No subscriber is not an error.
        let _ = self.heads.send(Arc::new(produced));
        Ok(())
    }
}

/// Makes blocks at `rhythm` (and, on a dev node, as `dev` asks), sending each to RPC
/// subscribers through `heads` and to peers through `gossip`. Stops at `stop`, or on the
/// first error (storage full...); either way it writes the state layers to disk before
/// returning, so the next start re-executes nothing.
pub(crate) fn produce_blocks(
    mut producer: BlockProducer<'static>,
    pool: &TxPool,
    heads: &broadcast::Sender<Arc<Produced>>,
    gossip: Option<&stave_net::Gossip>,
    stop: &AtomicBool,
    rhythm: Rhythm,
    dev: Option<&DevMining>,
) -> Result<(), LaunchError> {
    let Rhythm {
        block_time,
        block_txs,
    } = rhythm;
    let outlets = Outlets { heads, gossip };
    let _stopping = Stopping(dev);
    let block_limit = producer.max_block_txs();
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let (requests, automine) = match dev {
            Some(dev) => {
                let mut controls = dev.0.lock();
                (std::mem::take(&mut controls.requests), controls.automine)
            }
            None => (Vec::new(), false),
        };
        if let Some(dev) = dev {
            for Request { work, done } in requests {
                let result = dev.serve(work, &mut producer, &outlets);
                let _ = done.send(result.as_ref().copied().map_err(ToString::to_string));
                result?;
                last = Instant::now();
            }
        }
        // Automine: a block per transaction as it comes, none while the pool is empty.
        let due = match automine {
            true => !pool.is_empty(),
            false => pool.len() >= block_txs || last.elapsed() >= block_time,
        };
        if !due {
            std::thread::sleep(Duration::from_millis(if automine { 1 } else { 2 }));
            continue;
        }
        producer.set_max_block_txs(if automine { 1 } else { block_limit });
        last = Instant::now();
        let timestamp = dev.map_or_else(unix_seconds, DevMining::next_timestamp);
        outlets.produce(&mut producer, timestamp, None)?;
    }
    close(producer)
}

/// Writes the producer's state layers to disk (see [`BlockProducer::close`]).
pub(crate) fn close(producer: BlockProducer<'static>) -> Result<(), LaunchError> {
    producer.close().map_err(LaunchError::import(
        "writing the state to disk before stopping",
    ))
}
