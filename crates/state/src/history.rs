//! The state of past blocks beyond the layers: which a node keeps ([`History`]), the
//! values a flush records for it ([`StateLayers::prior_values`]), and reads at a past
//! block (`stave_storage::history`).

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use alloy_primitives::{Address, U256, map::HashMap};
use stave_primitives::AccountState;
use stave_storage::{
    StorageError,
    history::{self, PriorValues},
    read,
};

use crate::{
    KEPT_LAYERS,
    key::{StateKey, StateValue},
    layer::DiffLayer,
    layers::StateLayers,
};

/// Entries a prune deletes per write transaction: a prune runs beside block import, so
/// it takes the writer lock in short turns.
const PRUNE_BATCH: usize = 50_000;

/// Which past blocks' state a node serves (`eth_getBalance`, `eth_call`, traces at a
/// block number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum History {
    /// The last [`KEPT_LAYERS`] blocks', from the layers in memory: nothing more on disk.
    #[default]
    Recent,
    /// Every block's since the history was turned on (from genesis on a new data dir):
    /// a dev node's default, as Anvil's.
    All,
    /// The last this many blocks' (more than [`KEPT_LAYERS`]; fewer is [`History::Recent`]).
    Blocks(u64),
}

impl History {
    /// Whether the node writes a history to disk: a window of past blocks the layers do
    /// not cover.
    pub fn keeps_history(self) -> bool {
        match self {
            History::Recent => false,
            History::All => true,
            History::Blocks(blocks) => blocks > KEPT_LAYERS as u64,
        }
    }
}

impl std::str::FromStr for History {
    type Err = String;

    /// `all`, `recent`, or a number of blocks.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "all" => Ok(History::All),
            "recent" => Ok(History::Recent),
            blocks => blocks.parse().map(History::Blocks).map_err(|_| {
                format!("history is `all`, `recent` or a number of blocks, not `{text}`")
            }),
        }
    }
}

/// How a node's state layers are made: the clean cache's size and the history kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateOptions {
    /// Most accounts and slots the clean cache holds.
    pub cache_entries: usize,
    /// Which past blocks' state is served.
    pub history: History,
}

impl Default for StateOptions {
    fn default() -> Self {
        Self {
            cache_entries: crate::DEFAULT_CLEAN_CACHE_ENTRIES,
            history: History::Recent,
        }
    }
}

/// The history a node keeps on disk: its window's start, and how far it reaches back.
#[derive(Debug)]
pub(crate) struct KeptHistory {
    /// The oldest block whose state the history serves.
    from: AtomicU64,
    /// `None`: every block; otherwise the history is pruned to about this many blocks.
    blocks: Option<u64>,
}

impl KeptHistory {
    /// The oldest block served.
    pub(crate) fn from(&self) -> u64 {
        self.from.load(Ordering::Acquire)
    }
}

impl StateLayers<'_> {
    /// Keeps `history` from now on: starts a history on disk at the flushed height if the
    /// data dir has none, or removes the one it has if `history` keeps none. Run once,
    /// when the layers are made.
    pub fn keep_history(&mut self, history: History) -> Result<(), StorageError> {
        let stored = history::window(self.store)?;
        if !history.keeps_history() {
            if stored.is_some() {
                tracing::info!("removing the stored state history: history is not kept");
                history::drop_all(self.store)?;
            }
            self.history = None;
            return Ok(());
        }
        let from = match stored {
            Some(window) => window.from,
            None => {
                let flushed = self.flushed();
                history::start(self.store, flushed)?;
                flushed
            }
        };
        self.history = Some(KeptHistory {
            from: AtomicU64::new(from),
            blocks: match history {
                History::Blocks(blocks) => Some(blocks),
                _ => None,
            },
        });
        Ok(())
    }

    /// The oldest block whose state can be read: the history's start if one is kept,
    /// otherwise the disk layer's height.
    pub fn oldest(&self) -> u64 {
        self.history
            .as_ref()
            .map_or_else(|| self.flushed(), |history| history.from())
    }

    /// What the state history gains from a flush of `flushed` (consecutive layers, oldest
    /// first, the first the child of the disk layer): for each account and slot each of
    /// them changed, the value it had before. A value first changed in the batch had the
    /// disk layer's value (served by the origin pool or the clean cache when they have
    /// it, as execution read most of them); a later one, what the layer before left.
    pub(crate) fn prior_values(
        &self,
        flushed: &[Arc<DiffLayer>],
    ) -> Result<PriorValues, StorageError> {
        let mut current: HashMap<StateKey, StateValue> = HashMap::default();
        // Accounts whose storage a layer of the batch wiped: their slots on disk are
        // gone for the layers after it.
        let mut wiped: HashSet<Address> = HashSet::new();
        let mut prior = PriorValues::default();
        for layer in flushed {
            let number = layer.number;
            for (address, change) in layer.diff.accounts.iter() {
                let address = *address;
                let key = StateKey::Account(address);
                let before = match current.get(&key) {
                    Some(value) => value.clone(),
                    None => self.stored_value(&key)?,
                };
                prior.accounts.push((address, number, account(&before)));
                current.insert(key, StateValue::Account(change.info));
                let slot_before = |current: &HashMap<StateKey, StateValue>, slot: U256| {
                    let key = StateKey::Storage(address, slot);
                    match current.get(&key) {
                        Some(value) => Ok(word(value)),
                        None if wiped.contains(&address) => Ok(U256::ZERO),
                        None => self.stored_value(&key).map(|value| word(&value)),
                    }
                };
                for slot in change.storage.keys() {
                    prior
                        .slots
                        .push((address, *slot, number, slot_before(&current, *slot)?));
                }
                if change.storage_cleared {
                    // Rare (under Prague only an account created in the same transaction
                    // self-destructs): every slot it held, from disk and from the batch.
                    let mut held: BTreeMap<U256, U256> = if wiped.contains(&address) {
                        BTreeMap::new()
                    } else {
                        history::stored_slots(self.store, address)?
                            .into_iter()
                            .collect()
                    };
                    for (key, value) in &mut current {
                        if let StateKey::Storage(owner, slot) = key
                            && *owner == address
                        {
                            held.insert(*slot, word(value));
                            *value = StateValue::Storage(U256::ZERO);
                        }
                    }
                    prior.slots.extend(
                        held.into_iter()
                            .filter(|(slot, value)| {
                                !value.is_zero() && change.storage.get(slot).is_none()
                            })
                            .map(|(slot, value)| (address, slot, number, value)),
                    );
                    wiped.insert(address);
                }
                for (slot, value) in change.storage.iter() {
                    current.insert(
                        StateKey::Storage(address, *slot),
                        StateValue::Storage(*value),
                    );
                }
            }
        }
        Ok(prior)
    }

    /// After a flush to `height`: moves the history's start to keep about the configured
    /// number of blocks, and deletes what no block in the window needs. Pruning waits
    /// until a quarter of the window can go, so its scans stay rare.
    pub(crate) fn prune_history(&self, height: u64) -> Result<(), StorageError> {
        let Some(history) = &self.history else {
            return Ok(());
        };
        let Some(blocks) = history.blocks else {
            return Ok(());
        };
        let from = height.saturating_sub(blocks);
        if from < history.from() + (blocks / 4).max(1) {
            return Ok(());
        }
        // Readers are refused blocks before `from` from here on; the ones reading such a
        // block now hold the gate, so taking it waits for them.
        history.from.store(from, Ordering::Release);
        drop(self.gate.write());
        let clock = std::time::Instant::now();
        let deleted = history::prune(self.store, from, PRUNE_BATCH)?;
        tracing::info!(
            from,
            deleted,
            elapsed_ms = clock.elapsed().as_millis() as u64,
            "pruned the state history"
        );
        Ok(())
    }

    /// The value of `key` after block `number`, which the disk layer has passed.
    pub(crate) fn read_past(
        &self,
        key: &StateKey,
        number: u64,
    ) -> Result<StateValue, StorageError> {
        Ok(match key {
            StateKey::Account(address) => {
                StateValue::Account(history::account_at(self.store, *address, number)?)
            }
            StateKey::Storage(address, slot) => {
                StateValue::Storage(history::storage_at(self.store, *address, *slot, number)?)
            }
            StateKey::Code(hash) => StateValue::Code(read::code(self.store, *hash)?),
            StateKey::Wiped(_) => StateValue::Storage(U256::ZERO),
        })
    }
}

/// The account a value holds (`None`: absent, or a value of another kind, which an
/// account key never has).
fn account(value: &StateValue) -> Option<AccountState> {
    match value {
        StateValue::Account(account) => *account,
        _ => None,
    }
}

/// The slot value a value holds (zero for a value of another kind, which a slot key never
/// has).
fn word(value: &StateValue) -> U256 {
    match value {
        StateValue::Storage(word) => *word,
        _ => U256::ZERO,
    }
}
