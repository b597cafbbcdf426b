//! What a node catching up takes from the other validators instead of working it out
//! alone: the finalized blocks it missed, and their transactions' senders. Each validator
//! verified the blocks it finalized and stored the senders it recovered. A node behind
//! asks the other validators (stave-net's `SENDERS` and `BLOCKS` requests) and trusts a
//! block's hash and senders only where f + 1 of them send the same, so at least one
//! honest validator vouches for them; an honest validator stores a block only once it is
//! final. The import still checks the header's gas used, receipts root and state root,
//! and recovers from the signatures if they fail.
//!
//! Recovering senders is most of the CPU a catch-up costs, and waiting for the engine to
//! replay its journal and for marshal to backfill is most of a restart's time: with
//! these a restarted node imports what it missed before its engine is even up, faster
//! than it could verify alone.

use std::{sync::OnceLock, time::Duration};

use alloy_primitives::Address;
use bytes::Bytes;
use commonware_cryptography::ed25519::PublicKey;
use futures::StreamExt;
use stave_codec::{IndexedList, split_block};
use stave_net::{BlockSenders, Gossip, NodeId, gossip::MAX_BLOCKS_PER_REQUEST};
use tokio::runtime::Handle;

use crate::{ConsensusBlock, validator_node_id};

/// Where the chain actor gets finalized blocks it never executed, and their senders.
pub trait CatchUpSource: Send + Sync {
    /// For `blocks` (finalized, consecutive, oldest first), the senders of each that the
    /// source vouches for, or `None` where it does not (the import then recovers them).
    fn agreed_senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>>;

    /// The hashes and senders of the finalized blocks from height `from` on (consecutive,
    /// oldest first) the source vouches for: empty when it knows of none, `None` when it
    /// cannot tell (too few validators answered: not connected yet, say).
    fn vouched(&mut self, from: u64) -> Option<Vec<BlockSenders>>;

    /// Fetches the blocks the last [`CatchUpSource::vouched`] named (consecutive from
    /// height `from`), several at once: slot `i` of `slots` gets block `from + i`'s wire
    /// form once it is checked to have the vouched hash, or `None` if it could not be
    /// had (as does a slot left empty when this returns).
    fn fetch(&self, from: u64, vouched: &[BlockSenders], slots: &[OnceLock<Option<Bytes>>]);
}

/// How long a node waits for the other validators' senders before it recovers them
/// itself, or goes on without their blocks.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// Blocks asked of one validator at a time: small enough that the first arrive (and
/// start importing) soon, large enough that requests are few.
const BLOCKS_PER_FETCH: usize = 4;
/// Block requests in flight at once, spread over the validators that vouched.
const FETCHES_IN_FLIGHT: usize = 3;
/// How long a node waits for a validator's blocks before it leaves them to a later round.
const BLOCKS_TIMEOUT: Duration = Duration::from_secs(5);

/// The other validators: a hash and senders are taken where f + 1 of them agree.
pub struct OtherValidators {
    gossip: Gossip,
    peers: Vec<NodeId>,
    quorum: usize,
    runtime: Handle,
    /// The validators that answered the last [`CatchUpSource::vouched`], each with how
    /// many of the vouched blocks it listed too (so has), most first.
    holders: Vec<(usize, NodeId)>,
}

impl OtherValidators {
    /// Asks the validators of `validators` other than `local` through `gossip` (whose
    /// network runs on `runtime`); trusts what f + 1 of them send, for n = 3f + 1.
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
            holders: Vec::new(),
        }
    }

    /// The validators' senders of up to `count` blocks from `from`, by validator: every
    /// answer that came in time (garbage left out), or fewer once f + 1 of them are the
    /// same (a validator still sending what queued up while this node was away need not
    /// hold the others up).
    fn ask_senders(&self, from: u64, count: u32) -> Vec<(NodeId, Vec<BlockSenders>)> {
        let started = std::time::Instant::now();
        let answers = self.runtime.block_on(async {
            let mut asks: futures::stream::FuturesUnordered<_> = self
                .peers
                .iter()
                .map(|peer| async move {
                    let ask = self.gossip.fetch_senders(*peer, from, count);
                    let answer = tokio::time::timeout(ANSWER_TIMEOUT, ask).await;
                    Some((*peer, answer.ok()?.ok()?))
                })
                .collect();
            let mut answers: Vec<(NodeId, Vec<BlockSenders>)> = Vec::new();
            while let Some(answer) = asks.next().await {
                answers.extend(answer);
                let lists: Vec<&[BlockSenders]> =
                    answers.iter().map(|(_, lists)| lists.as_slice()).collect();
                if sent_by_quorum(&lists, self.quorum).is_some() {
                    break;
                }
            }
            answers
        });
        tracing::debug!(
            from,
            count,
            answers = answers.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "asked validators for senders"
        );
        answers
    }

    /// Fetches `count` blocks from `vouched[first..]` (height `from + first` on) from
    /// `peer` into their slots, up to the first that is not the vouched one.
    async fn fetch_run(
        &self,
        peer: NodeId,
        from: u64,
        first: usize,
        count: usize,
        vouched: &[BlockSenders],
        slots: &[OnceLock<Option<Bytes>>],
    ) {
        let ask = self
            .gossip
            .fetch_blocks(peer, from + first as u64, count as u32);
        let Ok(Ok(blocks)) = tokio::time::timeout(BLOCKS_TIMEOUT, ask).await else {
            return;
        };
        let wanted = vouched
            .iter()
            .zip(slots)
            .enumerate()
            .skip(first)
            .take(count);
        for ((index, (list, slot)), bytes) in wanted.zip(blocks) {
            if !is_vouched(&bytes, list) {
                tracing::debug!(
                    number = from + index as u64,
                    "a validator sent another block than vouched for"
                );
                return;
            }
            let _ = slot.set(Some(bytes));
        }
    }
}

/// True when `bytes` is the wire form of a block with the vouched hash and one vouched
/// sender per transaction (its body is checked against the header when it is imported).
fn is_vouched(bytes: &[u8], vouched: &BlockSenders) -> bool {
    split_block(bytes).is_ok_and(|parts| {
        parts.hash == vouched.hash
            && IndexedList::parse(parts.body).is_ok_and(|txs| txs.len() == vouched.senders.len())
    })
}

impl CatchUpSource for OtherValidators {
    fn agreed_senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>> {
        let Some(first) = blocks.first() else {
            return Vec::new();
        };
        let from = first.number();
        let count = blocks.len().min(MAX_BLOCKS_PER_REQUEST as usize) as u32;
        let answers: Vec<Vec<BlockSenders>> = self
            .ask_senders(from, count)
            .into_iter()
            .map(|(_, lists)| lists)
            .collect();
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
            "validators vouch for the senders of blocks marshal delivered"
        );
        agreed
    }

    fn vouched(&mut self, from: u64) -> Option<Vec<BlockSenders>> {
        if self.peers.is_empty() {
            // The only validator: nobody to catch up with.
            return Some(Vec::new());
        }
        let answers = self.ask_senders(from, MAX_BLOCKS_PER_REQUEST);
        if answers.len() < self.quorum {
            return None;
        }
        let lists: Vec<&[BlockSenders]> =
            answers.iter().map(|(_, lists)| lists.as_slice()).collect();
        let vouched = vouched(&lists, self.quorum);
        self.holders = answers
            .iter()
            .map(|(peer, lists)| {
                let held = lists
                    .iter()
                    .zip(&vouched)
                    .take_while(|(a, b)| a == b)
                    .count();
                (held, *peer)
            })
            .filter(|(held, _)| *held > 0)
            .collect();
        self.holders
            .sort_by_key(|(held, _)| std::cmp::Reverse(*held));
        tracing::debug!(
            from,
            vouched = vouched.len(),
            answers = answers.len(),
            "asked validators for finalized blocks"
        );
        Some(vouched)
    }

    fn fetch(&self, from: u64, vouched: &[BlockSenders], slots: &[OnceLock<Option<Bytes>>]) {
        let runs = (0..vouched.len().min(slots.len()))
            .step_by(BLOCKS_PER_FETCH)
            .enumerate()
            .filter_map(|(turn, first)| {
                let count = BLOCKS_PER_FETCH.min(vouched.len() - first);
                // Round robin over the validators that hold the whole run.
                let able: Vec<NodeId> = self
                    .holders
                    .iter()
                    .filter(|(held, _)| *held >= first + count)
                    .map(|(_, peer)| *peer)
                    .collect();
                let peer = *able.get(turn % able.len().max(1))?;
                Some(self.fetch_run(peer, from, first, count, vouched, slots))
            });
        self.runtime.block_on(
            futures::stream::iter(runs)
                .buffer_unordered(FETCHES_IN_FLIGHT)
                .collect::<()>(),
        );
    }
}

/// The hashes and senders of consecutive blocks, from the first each answer lists, that
/// at least `quorum` of the `answers` list identically; stops at the first block they do
/// not agree on.
fn vouched(answers: &[&[BlockSenders]], quorum: usize) -> Vec<BlockSenders> {
    let mut vouched = Vec::new();
    for i in 0.. {
        let lists: Vec<&BlockSenders> = answers.iter().filter_map(|answer| answer.get(i)).collect();
        let Some(agreed) = sent_by_quorum(&lists, quorum) else {
            break;
        };
        vouched.push(agreed.clone());
    }
    vouched
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
    sent_by_quorum(&valid, quorum).map(|senders| senders.to_vec())
}

/// The answer at least `quorum` of `answers` (one per validator) are equal to, if any.
fn sent_by_quorum<'a, T: PartialEq + ?Sized>(answers: &[&'a T], quorum: usize) -> Option<&'a T> {
    answers
        .iter()
        .find(|candidate| answers.iter().filter(|other| other == candidate).count() >= quorum)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B256;

    /// A block of three signed transfers.
    fn three_transfers() -> stave_primitives::Block {
        let builder = stave_sdk::TxBuilder::eip1559(1, 2_000_000_000, 1);
        let transactions =
            stave_sdk::signed_workload(stave_sdk::Workload::Transfer, &builder, 3).expect("signs");
        stave_primitives::Block {
            header: stave_primitives::Header::default(),
            transactions,
        }
    }

    fn list(hash: B256, byte: u8, len: usize) -> BlockSenders {
        BlockSenders {
            hash,
            senders: vec![Address::repeat_byte(byte); len],
        }
    }

    #[test]
    fn a_list_counts_only_when_enough_validators_send_it_for_this_block() {
        let block = three_transfers().seal();
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

    #[test]
    fn fetched_bytes_count_only_as_the_vouched_block_with_one_sender_per_transaction() {
        let block = three_transfers();
        let bytes = stave_codec::encode_block(&block).expect("encodes");
        let hash = block.header.hash_slow();
        assert!(is_vouched(&bytes, &list(hash, 1, 3)));
        assert!(!is_vouched(&bytes, &list(B256::repeat_byte(9), 1, 3)));
        assert!(!is_vouched(&bytes, &list(hash, 1, 2)));
        assert!(!is_vouched(&bytes[..bytes.len() - 1], &list(hash, 1, 3)));
        assert!(!is_vouched(b"not a block", &list(hash, 1, 3)));
    }

    #[test]
    fn blocks_are_vouched_for_from_the_first_up_to_the_first_without_a_quorum() {
        let (a, b, c, d) = (
            B256::repeat_byte(1),
            B256::repeat_byte(2),
            B256::repeat_byte(3),
            B256::repeat_byte(4),
        );
        // Three validators: an honest one ahead, an honest one behind, and one that lies
        // about the second block and makes up a fourth. Two vouch for each of the first
        // three blocks; only the liar for the fourth.
        let ahead = [list(a, 1, 2), list(b, 1, 1), list(c, 1, 3)];
        let behind = [list(a, 1, 2), list(b, 1, 1)];
        let liar = [list(a, 1, 2), list(d, 1, 1), list(c, 1, 3), list(d, 2, 1)];
        let answers: [&[BlockSenders]; 3] = [&ahead, &behind, &liar];
        assert_eq!(vouched(&answers, 2), ahead.to_vec());
        // A block without a quorum ends the run, even if later ones have one.
        let split = [list(a, 1, 2), list(d, 1, 1), list(c, 1, 3)];
        assert_eq!(vouched(&[&ahead, &split], 2), vec![list(a, 1, 2)]);
        // Agreement needs the same senders too, and enough validators.
        let other_senders = [list(a, 2, 2)];
        assert!(vouched(&[&ahead, &other_senders], 2).is_empty());
        assert!(vouched(&[&ahead], 2).is_empty());
        assert_eq!(vouched(&[&ahead], 1), ahead.to_vec());
        assert!(vouched(&[], 1).is_empty());
    }
}
