//! Senders for a node catching up: the finalized blocks it imports were verified by the
//! validators that finalized them, and each stored the senders it recovered. A node far
//! behind asks the other validators for those senders (stave-net's `SENDERS` requests) and
//! uses a block's senders only where f + 1 validators send the same list, so at least
//! one honest validator vouches for it. The import still checks the header's gas used,
//! receipts root and state root, and recovers from the signatures if they fail.
//!
//! Recovering senders is most of the CPU a catch-up costs; this is what lets a lagging
//! node import faster than it could verify alone.

use std::time::Duration;

use alloy_primitives::Address;
use commonware_cryptography::ed25519::PublicKey;
use stave_net::{BlockSenders, Gossip, NodeId, gossip::MAX_BLOCKS_PER_REQUEST};
use tokio::runtime::Handle;

use crate::{ConsensusBlock, validator_node_id};

/// Where the chain actor gets senders for finalized blocks it never executed.
pub trait SenderSource: Send {
    /// For `blocks` (finalized, consecutive, oldest first), the senders of each that the
    /// source vouches for, or `None` where it does not (the import then recovers them).
    fn agreed_senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>>;
}

/// How long a node waits for the other validators' answers before it recovers senders
/// itself.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Senders as the other validators recovered them, taken where f + 1 of them agree.
pub struct ValidatorSenders {
    gossip: Gossip,
    peers: Vec<NodeId>,
    quorum: usize,
    runtime: Handle,
}

impl ValidatorSenders {
    /// Asks the validators of `validators` other than `local` through `gossip` (whose
    /// network runs on `runtime`); trusts a list f + 1 of them send, for n = 3f + 1.
    pub fn new(
        gossip: Gossip,
        validators: &[PublicKey],
        local: &PublicKey,
        runtime: Handle,
    ) -> Self {
        let faulty = validators.len().saturating_sub(1) / 3;
        Self {
            gossip,
            peers: validators
                .iter()
                .filter(|key| *key != local)
                .map(validator_node_id)
                .collect(),
            quorum: faulty + 1,
            runtime,
        }
    }
}

impl SenderSource for ValidatorSenders {
    fn agreed_senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>> {
        let Some(first) = blocks.first() else {
            return Vec::new();
        };
        let from = first.number();
        let count = blocks.len().min(MAX_BLOCKS_PER_REQUEST as usize) as u32;
        let answers: Vec<Vec<BlockSenders>> = self.runtime.block_on(async {
            let asks = self.peers.iter().map(|peer| {
                tokio::time::timeout(
                    ANSWER_TIMEOUT,
                    self.gossip.fetch_senders(*peer, from, count),
                )
            });
            futures::future::join_all(asks)
                .await
                .into_iter()
                .filter_map(|answer| answer.ok()?.ok())
                .collect()
        });
        let agreed: Vec<Option<Vec<Address>>> = blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                let lists = answers.iter().filter_map(|answer| answer.get(i));
                (block.number() == from + i as u64)
                    .then(|| agreed(block, lists, self.quorum))
                    .flatten()
            })
            .collect();
        let found = agreed.iter().filter(|senders| senders.is_some()).count();
        tracing::debug!(
            blocks = blocks.len(),
            agreed = found,
            answers = answers.len(),
            "asked validators for senders"
        );
        agreed
    }
}

/// The sender list for `block` that at least `quorum` of `lists` send, if any: a list
/// counts only if it names the block's hash and one sender per transaction.
fn agreed<'a>(
    block: &ConsensusBlock,
    lists: impl Iterator<Item = &'a BlockSenders>,
    quorum: usize,
) -> Option<Vec<Address>> {
    let txs = block.transaction_count();
    let valid: Vec<&[Address]> = lists
        .filter(|list| list.hash == block.hash() && list.senders.len() == txs)
        .map(|list| list.senders.as_slice())
        .collect();
    valid
        .iter()
        .find(|candidate| valid.iter().filter(|other| other == candidate).count() >= quorum)
        .map(|senders| senders.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B256;

    fn list(hash: B256, byte: u8, len: usize) -> BlockSenders {
        BlockSenders {
            hash,
            senders: vec![Address::repeat_byte(byte); len],
        }
    }

    #[test]
    fn a_list_counts_only_when_enough_validators_send_it_for_this_block() {
        let builder = stave_sdk::TxBuilder::eip1559(1, 2_000_000_000, 1);
        let transactions =
            stave_sdk::signed_workload(stave_sdk::WorkloadKind::Transfer, &builder, 3)
                .expect("signs");
        let block = stave_primitives::Block {
            header: stave_primitives::Header::default(),
            transactions,
        }
        .seal();
        let block = ConsensusBlock::new(&block, Vec::new());
        let (hash, txs) = (block.hash(), block.transaction_count());
        let other = B256::repeat_byte(9);
        let cases: Vec<(Vec<BlockSenders>, usize, Option<u8>)> = vec![
            // Two of three agree: trusted.
            (
                vec![list(hash, 1, txs), list(hash, 2, txs), list(hash, 1, txs)],
                2,
                Some(1),
            ),
            // Every list differs: none trusted.
            (
                vec![list(hash, 1, txs), list(hash, 2, txs), list(hash, 3, txs)],
                2,
                None,
            ),
            // One honest answer is not enough when one validator may lie.
            (vec![list(hash, 1, txs)], 2, None),
            // Agreement on another block's hash, or on a list of the wrong length, is none.
            (vec![list(other, 1, txs), list(other, 1, txs)], 2, None),
            (
                vec![list(hash, 1, txs + 1), list(hash, 1, txs + 1)],
                2,
                None,
            ),
            // No answers: nothing to trust.
            (vec![], 1, None),
        ];
        for (lists, quorum, expected) in cases {
            let got = agreed(&block, lists.iter(), quorum);
            assert_eq!(
                got,
                expected.map(|byte| vec![Address::repeat_byte(byte); txs]),
                "{lists:?} with quorum {quorum}"
            );
        }
    }
}
