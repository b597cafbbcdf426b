//! Who votes in each consensus epoch, and the signing schemes the engine and marshal use
//! for it.
//!
//! Epoch 0's validators are the genesis's. Every later epoch's are the governance
//! contract's validator list (stave-governance, docs/governance.md) in the state after
//! the previous epoch's last block: a change voted on chain in epoch `e` counts from
//! epoch `e + 1`, on every node alike, because every node reads the same committed state.
//! A chain without the contract keeps the genesis's set.
//!
//! Invariant: a node records the set of epoch `e + 1` (in its chain's `Meta` table,
//! docs/storage-layout.md) before it commits any block of that epoch, so a restart in the
//! middle of an epoch finds the set it started with, even though the state has moved on.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
};

use commonware_consensus::{simplex::scheme::ed25519::Scheme, types::Epoch};
use commonware_cryptography::{
    certificate::{Provider, Scoped},
    ed25519,
};
use commonware_utils::ordered::Set;
use stave_node::ChainView;
use stave_primitives::B256;
use stave_storage::{StorageError, Table, WriteBatch};

use crate::keys;

/// Epochs whose sets and schemes are kept in memory: the current one and a few before it,
/// for certificates that arrive late.
const KEPT_EPOCHS: usize = 4;

/// The prefix of an epoch's record in the `Meta` table; the epoch follows, big-endian.
const RECORD_PREFIX: &[u8] = b"epoch-validators/";

/// Why an epoch's validator set could not be worked out or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValidatorSetError {
    /// The chain's storage failed.
    #[error("the epoch's validator set in storage: {0}")]
    Storage(#[from] StorageError),
    /// The state the set is read from could not be read.
    #[error("reading the governance contract after block {number}: {reason}")]
    State {
        /// The block whose state was read.
        number: u64,
        /// What failed.
        reason: String,
    },
    /// A stored record is not a list of 32-byte keys.
    #[error("the stored validator set of epoch {0} is corrupt")]
    Corrupt(u64),
}

/// The validator set of each epoch a node has entered (the last [`KEPT_EPOCHS`]), shared
/// by the chain actor, which adds each epoch's before it starts, and consensus, which
/// reads them.
#[derive(Debug)]
pub struct ValidatorSets {
    genesis: Set<ed25519::PublicKey>,
    by_epoch: RwLock<BTreeMap<Epoch, Set<ed25519::PublicKey>>>,
}

impl ValidatorSets {
    /// Sets that start from the genesis's `validators` (epoch 0's).
    pub fn new(genesis: &[ed25519::PublicKey]) -> Self {
        let genesis = Set::from_iter_dedup(genesis.iter().cloned());
        let by_epoch = BTreeMap::from([(Epoch::zero(), genesis.clone())]);
        Self {
            genesis,
            by_epoch: RwLock::new(by_epoch),
        }
    }

    /// The validators of `epoch`, if this node knows them (it has entered the epoch, or
    /// the epoch is among the last few it has).
    pub fn get(&self, epoch: Epoch) -> Option<Set<ed25519::PublicKey>> {
        self.by_epoch
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&epoch)
            .cloned()
    }

    /// The newest epoch whose set this node knows: the one after its head's, once the
    /// chain actor has entered it.
    pub fn newest(&self) -> Epoch {
        self.by_epoch
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last_key_value()
            .map_or(Epoch::zero(), |(epoch, _)| *epoch)
    }

    /// Keeps `set` as `epoch`'s, forgetting the oldest beyond [`KEPT_EPOCHS`].
    pub(crate) fn insert(&self, epoch: Epoch, set: Set<ed25519::PublicKey>) {
        let mut by_epoch = self
            .by_epoch
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        by_epoch.insert(epoch, set);
        while by_epoch.len() > KEPT_EPOCHS {
            by_epoch.pop_first();
        }
    }

    /// The set of `epoch`, which starts after block `last` (the previous epoch's last
    /// block, committed): the stored record if there is one; else read from the
    /// governance contract in the state after `last` (kept for the recent blocks) and
    /// recorded; else, for a data dir from before epochs had sets of their own, the
    /// previous epoch's set or the genesis's. Keeps the result and returns it.
    pub(crate) fn enter(
        &self,
        view: &ChainView<'_>,
        epoch: Epoch,
        last: u64,
    ) -> Result<Set<ed25519::PublicKey>, ValidatorSetError> {
        let set = match epoch.previous() {
            None => self.genesis.clone(),
            Some(previous) => match load(view, epoch)? {
                Some(set) => set,
                None => {
                    let before = self.get(previous).unwrap_or_else(|| self.genesis.clone());
                    let set = match view
                        .with_state(Some(last), |state, _| stave_governance::admitted(state))
                    {
                        Ok(Ok(admitted)) => admitted
                            .map(|admitted| usable(epoch, &admitted.validators))
                            .filter(|set| !set.is_empty())
                            .unwrap_or(before),
                        Ok(Err(error)) => {
                            return Err(ValidatorSetError::State {
                                number: last,
                                reason: error.to_string(),
                            });
                        }
                        // Only a data dir from before this record existed, restarted far
                        // into an epoch, lacks both: its set never changed on chain.
                        Err(error) => {
                            tracing::warn!(epoch = epoch.get(), %error, "no recorded validator set for the epoch: keeping the previous one");
                            before
                        }
                    };
                    store(view, epoch, &set)?;
                    set
                }
            },
        };
        self.insert(epoch, set.clone());
        Ok(set)
    }
}

/// The keys of `listed` that are ed25519 public keys, without repeats. The contract takes
/// any 32 bytes; every node drops the same unusable ones, so every node counts the same
/// quorum.
fn usable(epoch: Epoch, listed: &[B256]) -> Set<ed25519::PublicKey> {
    Set::from_iter_dedup(listed.iter().filter_map(|key| match keys::public_key(key) {
        Ok(key) => Some(key),
        Err(error) => {
            tracing::warn!(epoch = epoch.get(), %key, %error, "a validator key on chain is not an ed25519 key: left out");
            None
        }
    }))
}

/// The `Meta` key of `epoch`'s record.
fn record_key(epoch: Epoch) -> Vec<u8> {
    [RECORD_PREFIX, &epoch.get().to_be_bytes()].concat()
}

/// The recorded set of `epoch`, if any.
fn load(
    view: &ChainView<'_>,
    epoch: Epoch,
) -> Result<Option<Set<ed25519::PublicKey>>, ValidatorSetError> {
    let Some(bytes) = view.store().get(Table::Meta, &record_key(epoch))? else {
        return Ok(None);
    };
    if bytes.len() % 32 != 0 {
        return Err(ValidatorSetError::Corrupt(epoch.get()));
    }
    let keys: Vec<B256> = bytes.chunks_exact(32).map(B256::from_slice).collect();
    let set = Set::try_from(
        keys.iter()
            .map(keys::public_key)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| ValidatorSetError::Corrupt(epoch.get()))?,
    )
    .map_err(|_| ValidatorSetError::Corrupt(epoch.get()))?;
    Ok(Some(set))
}

/// Records `set` as `epoch`'s, durably.
fn store(
    view: &ChainView<'_>,
    epoch: Epoch,
    set: &Set<ed25519::PublicKey>,
) -> Result<(), ValidatorSetError> {
    let bytes: Vec<u8> = set.iter().flat_map(|key| key.as_ref().to_vec()).collect();
    let mut batch = WriteBatch::new();
    batch.put(Table::Meta, record_key(epoch), &bytes);
    view.store().write(batch)?;
    Ok(())
}

/// The engine's and marshal's [`Provider`]: for an epoch whose set this node knows, a
/// scheme that signs if this node is one of its validators and only verifies otherwise.
#[derive(Clone)]
pub struct EpochSchemes {
    sets: Arc<ValidatorSets>,
    namespace: Arc<[u8]>,
    key: ed25519::PrivateKey,
    built: Arc<RwLock<BTreeMap<Epoch, Scoped<Scheme>>>>,
}

impl EpochSchemes {
    /// Schemes for the epochs of `sets`, signing with `key` under `namespace`.
    pub fn new(sets: Arc<ValidatorSets>, namespace: &[u8], key: ed25519::PrivateKey) -> Self {
        Self {
            sets,
            namespace: namespace.into(),
            key,
            built: Arc::default(),
        }
    }
}

impl Provider for EpochSchemes {
    type Scope = Epoch;
    type Scheme = Scheme;

    fn scoped(&self, epoch: Epoch) -> Option<Scoped<Scheme>> {
        if let Some(scoped) = self
            .built
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&epoch)
        {
            return Some(scoped.clone());
        }
        let set = self.sets.get(epoch)?;
        let scoped = match Scheme::signer(&self.namespace, set.clone(), self.key.clone()) {
            Some(signer) => Scoped::scheme(Arc::new(signer)),
            None => Scoped::verifier(Arc::new(Scheme::verifier(&self.namespace, set))),
        };
        let mut built = self
            .built
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        built.insert(epoch, scoped.clone());
        while built.len() > KEPT_EPOCHS {
            built.pop_first();
        }
        Some(scoped)
    }
}

impl std::fmt::Debug for EpochSchemes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochSchemes")
            .field("sets", &self.sets)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use commonware_cryptography::Signer as _;

    use super::*;

    fn key(seed: u64) -> ed25519::PrivateKey {
        ed25519::PrivateKey::from_seed(seed)
    }

    #[test]
    fn a_node_signs_only_in_epochs_whose_set_holds_it_and_knows_only_entered_ones() {
        let (one, two, three) = (key(1), key(2), key(3));
        let sets = Arc::new(ValidatorSets::new(&[one.public_key(), two.public_key()]));
        let schemes =
            |key: &ed25519::PrivateKey| EpochSchemes::new(sets.clone(), b"ns", key.clone());
        assert!(schemes(&one).scheme(Epoch::zero()).is_some());
        let outsider = schemes(&three);
        assert!(outsider.scheme(Epoch::zero()).is_none());
        assert!(
            outsider.scoped(Epoch::zero()).is_some(),
            "it still verifies"
        );
        assert!(
            outsider.scoped(Epoch::new(1)).is_none(),
            "epoch 1 is not known yet"
        );
        sets.insert(
            Epoch::new(1),
            Set::from_iter_dedup([one.public_key(), three.public_key()]),
        );
        assert!(outsider.scheme(Epoch::new(1)).is_some(), "added in epoch 1");
        assert!(
            schemes(&two).scheme(Epoch::new(1)).is_none(),
            "removed in epoch 1"
        );
        for epoch in 2..10 {
            sets.insert(Epoch::new(epoch), Set::from_iter_dedup([one.public_key()]));
        }
        assert!(
            sets.get(Epoch::zero()).is_none(),
            "only the last epochs are kept"
        );
        assert!(sets.get(Epoch::new(9)).is_some());
    }

    #[test]
    fn keys_that_are_not_ed25519_points_are_left_out_of_a_set() {
        let good = keys::public_key_bytes(&key(1));
        // The y coordinate 2 is not on the curve.
        let mut bad = B256::ZERO;
        bad.0[0] = 2;
        assert!(keys::public_key(&bad).is_err(), "the test needs a bad key");
        let set = usable(Epoch::new(1), &[good, bad, good]);
        assert_eq!(set.len(), 1);
    }
}
