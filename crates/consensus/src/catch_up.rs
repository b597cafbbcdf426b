//! How a node behind its chain (a restarted or lagging validator, a full node) gets the
//! finalized blocks it missed from its peers, trusting only the validators' certificates.
//!
//! It asks every connected peer for a *certified run* (stave-net's `CERTIFIED` request):
//! the headers from its head's child up to a block the peer holds a finalization
//! certificate for, with that certificate and the senders the peer recovered. A run
//! counts only once [`RunChecker`] has checked it: the certificate verifies against the
//! validator set of its block's epoch (the genesis's, then the governance contract's, as
//! [`ValidatorSets`] records them) under this chain's namespace, it names the last
//! header's hash, and every header's parent hash is the hash of the one before, down to the
//! node's head. So every block of the run is final: a quorum of the epoch's validators
//! signed its descendant. A peer whose run does not check is charged and ignored.
//!
//! The blocks themselves are then fetched (`BLOCKS`) from the peers whose runs checked,
//! several at once, and each is taken only if it hashes to its certified header. The
//! senders are a hint: the import checks the header's gas used, receipts root and state
//! root, and recovers the senders from the signatures if they fail, so a peer that lies
//! about them costs time, never a wrong state.
//!
//! Recovering senders is most of the CPU a catch-up costs, and waiting for the engine to
//! replay its journal and for marshal to backfill is most of a restart's time: with these
//! a restarted node imports what it missed before its engine is even up.

use std::{
    num::NonZeroU64,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use alloy_primitives::{Address, B256, keccak256};
use bytes::Bytes;
use commonware_codec::Decode as _;
use commonware_consensus::{
    simplex::{scheme::ed25519::Scheme, types::Finalization},
    types::{Epocher as _, FixedEpocher, Height},
};
use commonware_cryptography::{certificate::Verifier as _, sha256::Digest};
use commonware_parallel::Sequential;
use futures::StreamExt;
use stave_codec::{IndexedList, split_block};
use stave_net::{
    CertifiedRun, Gossip, HeaderSenders, Network, NodeId, Offence, ReceivedBlock,
    gossip::MAX_BLOCKS_PER_REQUEST,
};
use stave_primitives::Header;
use tokio::runtime::Handle;

use crate::{
    ConsensusBlock, block::hash_of, engine::scheme_namespace, push::PushedBlocks,
    validator_sets::ValidatorSets,
};

/// A finalized block a peer's certified run names: its hash, checked; the senders, a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertifiedBlock {
    /// The block's number.
    pub number: u64,
    /// The block's hash (of a header the certificate covers).
    pub hash: B256,
    /// The senders the peer recovered, one per transaction (a hint, see the module doc).
    pub senders: Vec<Address>,
}

/// A checked run: its blocks, oldest first, and the certificate of the last (which the
/// node stores once it has imported that block, to serve peers behind it).
#[derive(Debug, Clone)]
pub struct Certified {
    /// The blocks, oldest first; never empty.
    pub blocks: Vec<CertifiedBlock>,
    /// The last block's finalization certificate, as received (it verified).
    pub certificate: Bytes,
}

/// Where the chain actor gets finalized blocks it never executed, and their senders.
pub trait CatchUpSource: Send + Sync {
    /// For `blocks` (finalized, consecutive, oldest first), the senders a peer recovered
    /// for each, or `None` where none did (the import then recovers them). A hint only.
    fn senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>>;

    /// The certified blocks from height `from` on, the first a child of `parent`:
    /// `Some(None)` when no peer has a certified block newer than the node's head, `None`
    /// when it cannot tell (no peer answered: not connected yet, say).
    fn certified(&mut self, from: u64, parent: B256) -> Option<Option<Certified>>;

    /// Fetches the blocks of the last [`CatchUpSource::certified`] run (consecutive from
    /// height `from`), several at once: slot `i` of `slots` gets block `from + i`'s wire
    /// form once it is checked to have the certified hash, or `None` if it could not be
    /// had (as does a slot left empty when this returns).
    fn fetch(&self, from: u64, blocks: &[CertifiedBlock], slots: &[OnceLock<Option<Bytes>>]);
}

/// Why a peer's certified run was refused (the peer is charged for each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A header does not decode (or has bytes after it).
    #[error("header {index} of the run does not decode")]
    Header {
        /// Its place in the run.
        index: usize,
    },
    /// A header is not the next height, or not a child of the one before (of the node's
    /// head, for the first).
    #[error("block {number} of the run is not the next block of the chain")]
    NotChained {
        /// Its number, as the header says.
        number: u64,
    },
    /// The run reaches into an epoch whose validators this node does not know yet.
    #[error("block {number} is in an epoch whose validators are not known yet")]
    UnknownEpoch {
        /// The block's number.
        number: u64,
    },
    /// The certificate does not decode for this chain's validator set size.
    #[error("the certificate does not decode: {0}")]
    Certificate(String),
    /// The certificate names another block than the run's last.
    #[error("the certificate is for another block than {number}")]
    OtherBlock {
        /// The run's last block.
        number: u64,
    },
    /// The certificate is for another epoch than its block's.
    #[error("the certificate of block {number} is from epoch {got}, not {expected}")]
    OtherEpoch {
        /// The block.
        number: u64,
        /// The epoch the certificate names.
        got: u64,
        /// The block's epoch.
        expected: u64,
    },
    /// The signatures do not verify against the epoch's validators under this chain's
    /// namespace: forged, or another chain's or another validator set's.
    #[error("the certificate of block {number} does not verify")]
    Forged {
        /// The block.
        number: u64,
    },
}

/// Checks peers' certified runs against the validators of each epoch.
#[derive(Debug, Clone)]
pub struct RunChecker {
    sets: Arc<ValidatorSets>,
    namespace: Arc<[u8]>,
    epocher: FixedEpocher,
}

impl RunChecker {
    /// A checker for the chain whose namespace is `chain` (a validator's
    /// [`ValidatorConfig::namespace`](crate::ValidatorConfig::namespace)), with the
    /// validators of `sets` and epochs of `epoch_length` blocks.
    pub fn new(sets: Arc<ValidatorSets>, chain: &[u8], epoch_length: NonZeroU64) -> Self {
        Self {
            sets,
            namespace: scheme_namespace(chain).into(),
            epocher: FixedEpocher::new(epoch_length),
        }
    }

    /// The last height whose epoch's validators are known: a run asked for ends there.
    pub fn known_until(&self) -> u64 {
        self.epocher
            .last(self.sets.newest())
            .map_or(u64::MAX, Height::get)
    }

    /// Checks `run` as the blocks from `from` on, the first a child of `parent` (see the
    /// module doc); returns its blocks.
    pub fn check(
        &self,
        run: &CertifiedRun,
        from: u64,
        parent: B256,
    ) -> Result<Certified, RunError> {
        let mut blocks = Vec::with_capacity(run.blocks.len());
        let mut parent = parent;
        for (index, item) in run.blocks.iter().enumerate() {
            let mut bytes = &item.header[..];
            let header = <Header as alloy_rlp::Decodable>::decode(&mut bytes)
                .ok()
                .filter(|_| bytes.is_empty())
                .ok_or(RunError::Header { index })?;
            let number = from + index as u64;
            if header.number != number || header.parent_hash != parent {
                return Err(RunError::NotChained {
                    number: header.number,
                });
            }
            parent = keccak256(&item.header);
            blocks.push(CertifiedBlock {
                number,
                hash: parent,
                senders: item.senders.clone(),
            });
        }
        let last = blocks.last().ok_or(RunError::NotChained { number: from })?;
        let number = last.number;
        let epoch = self
            .epocher
            .containing(Height::new(number))
            .map(|info| info.epoch())
            .ok_or(RunError::UnknownEpoch { number })?;
        let set = self
            .sets
            .get(epoch)
            .ok_or(RunError::UnknownEpoch { number })?;
        let verifier = Scheme::verifier(&self.namespace, set);
        let finalization = Finalization::<Scheme, Digest>::decode_cfg(
            run.certificate.clone(),
            &verifier.certificate_codec_config(),
        )
        .map_err(|error| RunError::Certificate(error.to_string()))?;
        if hash_of(&finalization.proposal.payload) != last.hash {
            return Err(RunError::OtherBlock { number });
        }
        let got = finalization.proposal.round.epoch();
        if got != epoch {
            return Err(RunError::OtherEpoch {
                number,
                got: got.get(),
                expected: epoch.get(),
            });
        }
        if !finalization.verify(&mut rand::rng(), &verifier, &Sequential) {
            return Err(RunError::Forged { number });
        }
        Ok(Certified {
            blocks,
            certificate: run.certificate.clone(),
        })
    }
}

/// How long a node waits for its peers' certified runs.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long it waits for a longer run once one has checked.
const LONGER_RUN_GRACE: Duration = Duration::from_millis(50);
/// How long it waits for the other peers once one has answered: a peer busy or far away
/// must not hold up a node that follows the chain block by block.
const OTHER_ANSWERS_GRACE: Duration = Duration::from_millis(200);
/// Blocks asked of one peer at a time: small enough that the first arrive (and start
/// importing) soon, large enough that requests are few.
const BLOCKS_PER_FETCH: usize = 4;
/// Block requests in flight at once, spread over the peers whose runs checked.
const FETCHES_IN_FLIGHT: usize = 3;
/// How long a node waits for a peer's blocks before it leaves them to a later round.
const BLOCKS_TIMEOUT: Duration = Duration::from_secs(5);

/// The node's peers (validators and full nodes alike): any one of them can bring a run,
/// since the certificate, not the peer, is what is trusted.
pub struct CertifiedPeers {
    gossip: Gossip,
    network: Network,
    checker: RunChecker,
    runtime: Handle,
    /// The peers whose runs checked in the last [`CatchUpSource::certified`], each with
    /// how many of the run's blocks it listed (so has), most first.
    holders: Vec<(usize, NodeId)>,
    /// Where the highest certified block heard of goes (`eth_syncing`), if anywhere.
    highest: Option<Arc<AtomicU64>>,
    /// The blocks validators pushed to this node (a full node), if they push.
    pushes: Option<PushedBlocks>,
    /// The wire forms of the last run [`CatchUpSource::certified`] took from the pushes,
    /// for [`CatchUpSource::fetch`]; empty when that run came from a peer's answer.
    pushed_run: Vec<Bytes>,
}

impl CertifiedPeers {
    /// Asks the peers of `network` through `gossip` (whose network runs on `runtime`),
    /// checking their runs with `checker`.
    pub fn new(gossip: Gossip, network: Network, checker: RunChecker, runtime: Handle) -> Self {
        Self {
            gossip,
            network,
            checker,
            runtime,
            holders: Vec::new(),
            highest: None,
            pushes: None,
            pushed_run: Vec::new(),
        }
    }

    /// Takes blocks from `pushes` (what validators pushed to this full node) before it
    /// asks its peers, and asks them only when the pushes stop or leave a gap.
    pub fn with_pushes(mut self, pushes: PushedBlocks) -> Self {
        self.pushes = Some(pushes);
        self
    }

    /// The consecutive pushed blocks from `from` on (the first a child of `parent`), each
    /// the first of its number's claims to check against its own certificate (the others'
    /// pushers are charged), up to the first number none of whose claims checks; keeps
    /// their wire forms for [`CatchUpSource::fetch`].
    fn take_pushed(&mut self, from: u64, parent: B256) -> Option<Certified> {
        let pushed = self.pushes.as_ref()?.take_from(from);
        let (mut blocks, mut wire, mut certificate) = (Vec::new(), Vec::new(), Bytes::new());
        let mut parent = parent;
        for (number, claims) in (from..).zip(pushed) {
            let Some((checked, bytes)) = claims
                .into_iter()
                .find_map(|claim| self.check_pushed(claim, number, parent))
            else {
                break;
            };
            parent = checked.blocks[0].hash;
            blocks.extend(checked.blocks);
            certificate = checked.certificate;
            wire.push(bytes);
        }
        let last = blocks.last()?.number;
        if let Some(highest) = &self.highest {
            highest.fetch_max(last, Ordering::AcqRel);
        }
        self.pushed_run = wire;
        Some(Certified {
            blocks,
            certificate,
        })
    }

    /// `claim`, pushed as block `number` (a child of `parent`), checked against its
    /// certificate, with its wire form; `None` (its pusher charged, unless the epoch is
    /// one this node does not know yet) if it does not check.
    fn check_pushed(
        &self,
        claim: ReceivedBlock,
        number: u64,
        parent: B256,
    ) -> Option<(Certified, Bytes)> {
        let finalized = claim.finalized?;
        let header = split_block(&claim.bytes).ok()?.header;
        let run = CertifiedRun {
            certificate: finalized.certificate,
            blocks: vec![HeaderSenders {
                header: Bytes::from(alloy_rlp::encode(&header)),
                senders: finalized.senders,
            }],
        };
        match self.checker.check(&run, number, parent) {
            Ok(checked) => Some((checked, claim.bytes)),
            // Pushed before this node recorded the epoch's validators: no fault.
            Err(RunError::UnknownEpoch { .. }) => None,
            Err(error) => {
                tracing::warn!(peer = %stave_net::short_id(&claim.from), number, %error, "refused a pushed finalized block");
                metrics::counter!("stave_catch_up_runs_refused_total").increment(1);
                self.network.penalize(claim.from, Offence::BadMessage);
                None
            }
        }
    }

    /// Keeps the highest certified block number its peers' runs reach in `highest`, which
    /// others read (the node's `eth_syncing`).
    pub fn reporting_highest(mut self, highest: Arc<AtomicU64>) -> Self {
        self.highest = Some(highest);
        self
    }

    /// Every connected peer's run from `from` (up to `count` blocks): the checked ones with
    /// their peer, and how many peers answered at all. Stops waiting once a checked run
    /// is whole, a little after the first checked one, or a little longer after the first
    /// answer of any kind.
    fn ask(&self, from: u64, parent: B256, count: u32) -> (Vec<(NodeId, Certified)>, usize) {
        let peers = self.network.peers();
        self.runtime.block_on(async {
            let mut asks: futures::stream::FuturesUnordered<_> = peers
                .iter()
                .map(|peer| async move {
                    let ask = self.gossip.fetch_certified(*peer, from, count);
                    (*peer, tokio::time::timeout(ANSWER_TIMEOUT, ask).await)
                })
                .collect();
            let (mut checked, mut answered) = (Vec::new(), 0);
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                let next = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, asks.next()).await {
                        Ok(next) => next,
                        Err(_) => break,
                    },
                    None => asks.next().await,
                };
                let Some((peer, answer)) = next else { break };
                let run = match answer {
                    Ok(Ok(run)) => run,
                    // Malformed answers were charged by gossip; silence is no offence.
                    _ => continue,
                };
                answered += 1;
                wait_at_most(&mut deadline, OTHER_ANSWERS_GRACE);
                let Some(run) = run else { continue };
                match self.checker.check(&run, from, parent) {
                    Ok(certified) => {
                        let whole = certified.blocks.len() >= count as usize;
                        checked.push((peer, certified));
                        if whole {
                            break;
                        }
                        wait_at_most(&mut deadline, LONGER_RUN_GRACE);
                    }
                    Err(error) => {
                        tracing::warn!(peer = %stave_net::short_id(&peer), from, %error, "refused a peer's certified run");
                        metrics::counter!("stave_catch_up_runs_refused_total").increment(1);
                        self.network.penalize(peer, Offence::BadMessage);
                    }
                }
            }
            (checked, answered)
        })
    }

    /// How many of `wanted` blocks from `from` on a run may be asked for: at most
    /// [`MAX_BLOCKS_PER_REQUEST`], none past the last epoch whose validators are known (a
    /// peer's honest run there could not be checked); `None` when `from` is past it.
    fn askable(&self, from: u64, wanted: u64) -> Option<u32> {
        let known = self.checker.known_until();
        let left = known.checked_sub(from)?.saturating_add(1);
        Some(wanted.min(left).min(u64::from(MAX_BLOCKS_PER_REQUEST)) as u32)
    }

    /// Fetches `count` blocks from `blocks[first..]` (height `from + first` on) from
    /// `peer` into their slots, up to the first that is not the certified one.
    async fn fetch_run(
        &self,
        peer: NodeId,
        from: u64,
        first: usize,
        count: usize,
        blocks: &[CertifiedBlock],
        slots: &[OnceLock<Option<Bytes>>],
    ) {
        let ask = self
            .gossip
            .fetch_blocks(peer, from + first as u64, count as u32);
        let Ok(Ok(fetched)) = tokio::time::timeout(BLOCKS_TIMEOUT, ask).await else {
            return;
        };
        let wanted = blocks.iter().zip(slots).skip(first).take(count);
        for ((block, slot), bytes) in wanted.zip(fetched) {
            if !is_certified(&bytes, block) {
                tracing::debug!(
                    number = block.number,
                    "a peer sent another block than certified"
                );
                self.network.penalize(peer, Offence::BadMessage);
                return;
            }
            let _ = slot.set(Some(bytes));
        }
    }
}

/// Moves `deadline` to `grace` from now, if that is sooner.
fn wait_at_most(deadline: &mut Option<tokio::time::Instant>, grace: Duration) {
    let at = tokio::time::Instant::now() + grace;
    *deadline = Some(deadline.map_or(at, |earlier| earlier.min(at)));
}

/// True when `bytes` is the wire form of the certified block with one sender per
/// transaction (its body is checked against the header when it is imported).
fn is_certified(bytes: &[u8], block: &CertifiedBlock) -> bool {
    split_block(bytes).is_ok_and(|parts| {
        parts.hash == block.hash
            && IndexedList::parse(parts.body).is_ok_and(|txs| txs.len() == block.senders.len())
    })
}

impl CatchUpSource for CertifiedPeers {
    fn senders(&mut self, blocks: &[ConsensusBlock]) -> Vec<Option<Vec<Address>>> {
        let Some(first) = blocks.first() else {
            return Vec::new();
        };
        let Some(count) = self.askable(first.number(), blocks.len() as u64) else {
            return vec![None; blocks.len()];
        };
        let parent = first.header().parent_hash;
        let (checked, _) = self.ask(first.number(), parent, count);
        let Some((_, run)) = checked.into_iter().max_by_key(|(_, run)| run.blocks.len()) else {
            return vec![None; blocks.len()];
        };
        blocks
            .iter()
            .map(|block| {
                let index = block.number().checked_sub(first.number())? as usize;
                let listed = run.blocks.get(index)?;
                (listed.hash == block.hash() && listed.senders.len() == block.transaction_count())
                    .then(|| listed.senders.clone())
            })
            .collect()
    }

    fn certified(&mut self, from: u64, parent: B256) -> Option<Option<Certified>> {
        self.pushed_run.clear();
        if let Some(run) = self.take_pushed(from, parent) {
            return Some(Some(run));
        }
        if self
            .pushes
            .as_ref()
            .is_some_and(|pushes| pushes.up_to_date(from))
        {
            return Some(None);
        }
        let Some(count) = self.askable(from, u64::MAX) else {
            return Some(None);
        };
        let (mut checked, answered) = self.ask(from, parent, count);
        if answered == 0 {
            return None;
        }
        checked.sort_by_key(|(_, run)| std::cmp::Reverse(run.blocks.len()));
        self.holders = checked
            .iter()
            .map(|(peer, run)| (run.blocks.len(), *peer))
            .collect();
        let blocks = checked.first().map_or(0, |(_, run)| run.blocks.len());
        if let Some(highest) = &self.highest
            && blocks > 0
        {
            highest.fetch_max(from + blocks as u64 - 1, Ordering::AcqRel);
        }
        tracing::debug!(from, blocks, answered, "asked peers for certified runs");
        Some(checked.into_iter().next().map(|(_, run)| run))
    }

    fn fetch(&self, from: u64, blocks: &[CertifiedBlock], slots: &[OnceLock<Option<Bytes>>]) {
        if !self.pushed_run.is_empty() {
            // The run is the pushed blocks themselves, hashed to their certified headers.
            for (slot, bytes) in slots.iter().zip(&self.pushed_run) {
                let _ = slot.set(Some(bytes.clone()));
            }
            return;
        }
        let runs = (0..blocks.len().min(slots.len()))
            .step_by(BLOCKS_PER_FETCH)
            .enumerate()
            .filter_map(|(turn, first)| {
                let count = BLOCKS_PER_FETCH.min(blocks.len() - first);
                // Round robin over the peers that hold the whole run.
                let able: Vec<NodeId> = self
                    .holders
                    .iter()
                    .filter(|(held, _)| *held >= first + count)
                    .map(|(_, peer)| *peer)
                    .collect();
                let peer = *able.get(turn % able.len().max(1))?;
                Some(self.fetch_run(peer, from, first, count, blocks, slots))
            });
        self.runtime.block_on(
            futures::stream::iter(runs)
                .buffer_unordered(FETCHES_IN_FLIGHT)
                .collect::<()>(),
        );
    }
}

#[cfg(test)]
mod tests {
    use commonware_codec::Encode as _;
    use commonware_consensus::{
        simplex::types::{Finalize, Proposal},
        types::{Epoch, Round, View},
    };
    use commonware_cryptography::{Signer as _, ed25519};
    use commonware_utils::{non_empty, ordered::Set};

    use super::*;
    use crate::block::digest_of;

    const CHAIN: &[u8] = b"stave-test-chain";
    const EPOCH_LENGTH: u64 = 10;

    fn keys() -> Vec<ed25519::PrivateKey> {
        (0..4).map(ed25519::PrivateKey::from_seed).collect()
    }

    fn set(keys: &[ed25519::PrivateKey]) -> Set<ed25519::PublicKey> {
        Set::from_iter_dedup(keys.iter().map(|key| key.public_key()))
    }

    /// A checker that knows epoch 0's validators (the first four keys) and epoch 1's
    /// (the same).
    fn checker() -> RunChecker {
        let keys = keys();
        let sets = Arc::new(ValidatorSets::new(
            &keys.iter().map(|key| key.public_key()).collect::<Vec<_>>(),
        ));
        sets.insert(Epoch::new(1), set(&keys));
        RunChecker::new(sets, CHAIN, NonZeroU64::new(EPOCH_LENGTH).expect("nonzero"))
    }

    /// Headers `from..=to` chained on `parent`.
    fn headers(parent: B256, from: u64, to: u64) -> Vec<HeaderSenders> {
        let mut parent = parent;
        (from..=to)
            .map(|number| {
                let header = Header {
                    number,
                    parent_hash: parent,
                    ..Header::default()
                };
                let encoded = alloy_rlp::encode(&header);
                parent = keccak256(&encoded);
                HeaderSenders {
                    header: Bytes::from(encoded),
                    senders: vec![Address::repeat_byte(number as u8)],
                }
            })
            .collect()
    }

    /// A finalization of `hash` in `epoch`, signed by `signers` under `namespace`.
    fn certificate(
        namespace: &[u8],
        signers: &[ed25519::PrivateKey],
        participants: &[ed25519::PrivateKey],
        epoch: u64,
        hash: B256,
    ) -> Bytes {
        let namespace = scheme_namespace(namespace);
        let schemes: Vec<Scheme> = signers
            .iter()
            .map(|key| Scheme::signer(&namespace, set(participants), key.clone()).expect("member"))
            .collect();
        let proposal = Proposal::new(
            Round::new(Epoch::new(epoch), View::new(7)),
            View::new(6),
            digest_of(hash),
        );
        let votes: Vec<Finalize<Scheme, Digest>> = schemes
            .iter()
            .map(|scheme| Finalize::sign(scheme, proposal.clone()).expect("signs"))
            .collect();
        let finalization =
            Finalization::from_finalizes(&schemes[0], non_empty![@&votes], &Sequential)
                .expect("a quorum");
        Bytes::from(finalization.encode().to_vec())
    }

    fn last_hash(run: &[HeaderSenders]) -> B256 {
        keccak256(&run.last().expect("a header").header)
    }

    #[test]
    fn a_run_whose_certificate_a_quorum_signed_for_its_last_block_checks() {
        let keys = keys();
        let parent = B256::repeat_byte(1);
        let blocks = headers(parent, 3, 7);
        let run = CertifiedRun {
            certificate: certificate(CHAIN, &keys[..3], &keys, 0, last_hash(&blocks)),
            blocks: blocks.clone(),
        };
        let certified = checker().check(&run, 3, parent).expect("checks");
        assert_eq!(certified.blocks.len(), 5);
        assert_eq!(certified.blocks[4].hash, last_hash(&blocks));
        assert_eq!(certified.blocks[0].senders, vec![Address::repeat_byte(3)]);
        assert_eq!(certified.blocks[0].number, 3);
    }

    #[test]
    fn runs_with_a_bad_certificate_or_a_broken_chain_are_refused() {
        let keys = keys();
        let outsiders: Vec<ed25519::PrivateKey> =
            (10..14).map(ed25519::PrivateKey::from_seed).collect();
        let parent = B256::repeat_byte(1);
        let blocks = headers(parent, 3, 7);
        let hash = last_hash(&blocks);
        let checker = checker();
        let check = |certificate: Bytes, blocks: Vec<HeaderSenders>, from: u64| {
            checker.check(
                &CertifiedRun {
                    certificate,
                    blocks,
                },
                from,
                parent,
            )
        };
        let good = || certificate(CHAIN, &keys[..3], &keys, 0, hash);

        // Missing: no certificate bytes at all, or garbage.
        assert!(matches!(
            check(Bytes::new(), blocks.clone(), 3),
            Err(RunError::Certificate(_))
        ));
        assert!(matches!(
            check(Bytes::from_static(b"not a certificate"), blocks.clone(), 3),
            Err(RunError::Certificate(_))
        ));
        // Forged: signed by keys that are not the validators (a set of their own).
        let forged = certificate(CHAIN, &outsiders[..3], &outsiders, 0, hash);
        assert_eq!(
            check(forged, blocks.clone(), 3).unwrap_err(),
            RunError::Forged { number: 7 }
        );
        // Another chain's: the same validators under another namespace.
        let other_chain = certificate(b"another chain", &keys[..3], &keys, 0, hash);
        assert_eq!(
            check(other_chain, blocks.clone(), 3).unwrap_err(),
            RunError::Forged { number: 7 }
        );
        // Another epoch's: block 7 is in epoch 0.
        let other_epoch = certificate(CHAIN, &keys[..3], &keys, 1, hash);
        assert_eq!(
            check(other_epoch, blocks.clone(), 3).unwrap_err(),
            RunError::OtherEpoch {
                number: 7,
                got: 1,
                expected: 0
            }
        );
        // For another block: the run's last but one.
        let other_block = certificate(CHAIN, &keys[..3], &keys, 0, keccak256(&blocks[3].header));
        assert_eq!(
            check(other_block, blocks.clone(), 3).unwrap_err(),
            RunError::OtherBlock { number: 7 }
        );
        // Too few signers for a quorum cannot even be assembled; two of four signing is
        // refused by the checker as forged.
        let mut short = certificate(CHAIN, &keys[..3], &keys, 0, hash).to_vec();
        short.truncate(short.len() - 64);
        assert!(check(Bytes::from(short), blocks.clone(), 3).is_err());
        // A broken chain: a header swapped for one of another parent, or the run not
        // starting at the height asked for.
        let mut broken = blocks.clone();
        broken[2] = headers(B256::repeat_byte(9), 5, 5).remove(0);
        assert_eq!(
            check(good(), broken, 3).unwrap_err(),
            RunError::NotChained { number: 5 }
        );
        assert_eq!(
            check(good(), blocks.clone(), 4).unwrap_err(),
            RunError::NotChained { number: 3 }
        );
        // A header with bytes after it.
        let mut trailing = blocks.clone();
        let mut bytes = trailing[0].header.to_vec();
        bytes.push(0);
        trailing[0].header = Bytes::from(bytes);
        assert_eq!(
            check(good(), trailing, 3).unwrap_err(),
            RunError::Header { index: 0 }
        );
        // An epoch whose validators are not known yet.
        let far = headers(parent, 25, 25);
        let far_hash = last_hash(&far);
        assert_eq!(
            check(certificate(CHAIN, &keys[..3], &keys, 2, far_hash), far, 25).unwrap_err(),
            RunError::UnknownEpoch { number: 25 }
        );
        // And the good one still checks.
        assert!(check(good(), blocks, 3).is_ok());
    }

    #[test]
    fn runs_are_asked_only_up_to_the_last_epoch_whose_validators_are_known() {
        assert_eq!(checker().known_until(), 2 * EPOCH_LENGTH - 1);
    }
}
