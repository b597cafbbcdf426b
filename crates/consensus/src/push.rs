//! Finalized blocks pushed from validators to full nodes, so a full node imports each block
//! as soon as it is finalized instead of asking for it after its head stood still.
//!
//! - A validator's chain actor, once it has committed a block and holds its finalization
//!   certificate, hands both to a [`FinalizedPusher`], which sends the block compact with
//!   the certificate and the senders (stave-net `FINALIZED`) to every peer that is not a
//!   validator of the block's epoch.
//! - A full node keeps what arrives in [`PushedBlocks`] and wakes its chain actor, whose
//!   catch-up source ([`CertifiedPeers`](crate::CertifiedPeers)) takes a run of pushed
//!   blocks from its head's child on, each checked against its own certificate exactly as
//!   a peer's certified run is. A push that does not check costs its sender, and the node
//!   asks its peers as before; so it does when pushes stop or leave a gap.

use std::{
    collections::{BTreeMap, HashSet},
    num::NonZeroU64,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use commonware_consensus::types::{Epocher as _, FixedEpocher, Height};
use stave_net::{Gossip, Network, NodeId, ReceivedBlock};
use tokio::runtime::Handle;

use crate::{transport::validator_node_id, validator_sets::ValidatorSets};

/// Pushed blocks held at most, from the lowest: beyond them the node is far behind, and
/// certified runs from its peers serve it better.
const HELD: usize = 256;

/// How long after the last push a full node counts its peers as pushing, and so does not
/// ask them for blocks while no push names a newer one.
const PUSHES_FRESH: Duration = Duration::from_secs(1);

/// Sends each block a validator commits, with its certificate, to the full nodes among
/// its peers.
#[derive(Debug, Clone)]
pub struct FinalizedPusher {
    gossip: Gossip,
    network: Network,
    sets: Arc<ValidatorSets>,
    epocher: FixedEpocher,
    runtime: Handle,
}

impl FinalizedPusher {
    /// Pushes through `gossip` on `network` (which runs on `runtime`) to every peer that
    /// is not a validator, per `sets`, of the epoch (of `epoch_length` blocks) of the block
    /// pushed.
    pub fn new(
        gossip: Gossip,
        network: Network,
        sets: Arc<ValidatorSets>,
        epoch_length: NonZeroU64,
        runtime: Handle,
    ) -> Self {
        Self {
            gossip,
            network,
            sets,
            epocher: FixedEpocher::new(epoch_length),
            runtime,
        }
    }

    /// Pushes committed block `number`, finalized by `certificate`, without waiting: the
    /// block is read back from storage and sent on the network's runtime.
    pub fn push(&self, number: u64, certificate: &[u8]) {
        let validators: HashSet<NodeId> = self
            .epocher
            .containing(Height::new(number))
            .and_then(|info| self.sets.get(info.epoch()))
            .map(|set| set.iter().map(validator_node_id).collect())
            .unwrap_or_default();
        let peers: Vec<NodeId> = self
            .network
            .peers()
            .into_iter()
            .filter(|peer| !validators.contains(peer))
            .collect();
        if peers.is_empty() {
            return;
        }
        let gossip = self.gossip.clone();
        let certificate = Bytes::copy_from_slice(certificate);
        self.runtime.spawn(async move {
            match gossip.push_finalized(number, certificate, &peers).await {
                Ok(sent) => {
                    metrics::counter!("stave_finalized_pushes_sent_total").increment(sent as u64)
                }
                Err(error) => tracing::debug!(number, %error, "finalized block not pushed"),
            }
        });
    }
}

/// The blocks validators pushed to a full node, by number, waiting for its chain actor.
/// Several blocks may claim a number (a peer may push forgeries): each is kept until one
/// checks. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct PushedBlocks(Arc<Mutex<Held>>);

#[derive(Debug, Default)]
struct Held {
    blocks: BTreeMap<u64, Vec<ReceivedBlock>>,
    last_push: Option<Instant>,
}

/// Blocks kept for one number at most: more than the honest pushers of one block, which
/// push the same block (gossip hands it on once).
const CLAIMS_PER_NUMBER: usize = 8;

impl PushedBlocks {
    /// Keeps `block` if it came with a certificate (`ReceivedBlock::finalized`); true if
    /// it did. Beyond [`HELD`] numbers, only lower ones than the highest held are kept.
    pub fn insert(&self, block: ReceivedBlock) -> bool {
        if block.finalized.is_none() {
            return false;
        }
        let mut held = self.lock();
        held.last_push = Some(Instant::now());
        let claims = held.blocks.entry(block.number).or_default();
        if claims.len() < CLAIMS_PER_NUMBER {
            claims.push(block);
        }
        if held.blocks.len() > HELD {
            held.blocks.pop_last();
        }
        true
    }

    /// Takes the blocks pushed for consecutive numbers from `from` on, each number's
    /// claims in the order they came (forgetting the numbers below `from`).
    pub(crate) fn take_from(&self, from: u64) -> Vec<Vec<ReceivedBlock>> {
        let mut held = self.lock();
        held.blocks = held.blocks.split_off(&from);
        let mut run = Vec::new();
        while let Some(entry) = held.blocks.first_entry()
            && *entry.key() == from + run.len() as u64
        {
            run.push(entry.remove());
        }
        run
    }

    /// True while validators push and none has pushed a block at `from` or later: the
    /// node has every finalized block it was told of, and need not ask its peers.
    pub(crate) fn up_to_date(&self, from: u64) -> bool {
        let held = self.lock();
        held.last_push.is_some_and(|at| at.elapsed() < PUSHES_FRESH)
            && held.blocks.range(from..).next().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::B256;
    use stave_net::Finalized;

    use super::*;

    fn pushed(number: u64, finalized: bool) -> ReceivedBlock {
        ReceivedBlock {
            from: NodeId::default(),
            bytes: Bytes::new(),
            hash: B256::with_last_byte(number as u8),
            number,
            fetched: 0,
            finalized: finalized.then(|| Finalized {
                certificate: Bytes::from_static(b"c"),
                senders: Vec::new(),
            }),
        }
    }

    #[test]
    fn runs_are_taken_consecutive_from_the_head_and_gaps_are_left() {
        let pushes = PushedBlocks::default();
        assert!(!pushes.up_to_date(1), "no push yet");
        assert!(
            !pushes.insert(pushed(1, false)),
            "a compact block is no push"
        );
        for number in [1, 2, 3, 5] {
            assert!(pushes.insert(pushed(number, true)));
        }
        // A second claim to block 3 is kept beside the first.
        assert!(pushes.insert(pushed(3, true)));
        let run: Vec<Vec<u64>> = pushes
            .take_from(2)
            .iter()
            .map(|claims| claims.iter().map(|b| b.number).collect())
            .collect();
        assert_eq!(run, [vec![2], vec![3, 3]]);
        // Block 4 never came: 5 waits, and the node is not up to date at 4.
        assert!(!pushes.up_to_date(4));
        assert!(pushes.take_from(4).is_empty());
        assert_eq!(pushes.take_from(5).len(), 1);
        assert!(pushes.up_to_date(6));
        // Block 1 was forgotten when the run from 2 was taken.
        assert!(pushes.take_from(1).is_empty());
    }

    #[test]
    fn at_most_the_lowest_held_blocks_are_kept() {
        let pushes = PushedBlocks::default();
        for number in (1..=HELD as u64 + 10).rev() {
            pushes.insert(pushed(number, true));
        }
        let run = pushes.take_from(1);
        assert_eq!(run.len(), HELD);
        assert_eq!(run.last().map(|claims| claims[0].number), Some(HELD as u64));
    }
}
