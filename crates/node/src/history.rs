//! State as of recent blocks, for RPC queries at a block number.
//!
//! Storage keeps only the latest state. Before each block is committed, an [`UndoLayer`]
//! records the value every key the block changes had before it; reading block `n`'s state
//! walks the layers of blocks `n+1..=head` (oldest first: the first layer that knows a key
//! holds its value at `n`) and falls back to the current state. [`StateHistory`] keeps
//! the last [`HISTORY_DEPTH`] layers in memory; older blocks (and blocks before a restart)
//! answer "state not available".

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::Arc,
};

use alloy_primitives::{Address, B256, Bytes, U256};
use stave_exec::{AccountState, StateError, StateReader};
use stave_primitives::StateDiff;

/// How many recent blocks' states are kept queryable.
pub const HISTORY_DEPTH: usize = 128;

/// The state one block changed, as it was before the block.
#[derive(Debug, Default)]
pub struct UndoLayer {
    number: u64,
    accounts: HashMap<Address, Option<AccountState>>,
    storage: HashMap<(Address, U256), U256>,
    /// Accounts whose storage the block cleared. Under Prague only an account created in
    /// the same transaction can self-destruct, so their storage before the block was empty.
    cleared: HashSet<Address>,
}

impl UndoLayer {
    /// Reads from `before` (the state the block executed on) the old value of every key
    /// `diff` (block `number`'s changes) writes.
    pub fn capture(
        before: &dyn StateReader,
        number: u64,
        diff: &StateDiff,
    ) -> Result<Self, StateError> {
        let mut layer = Self {
            number,
            ..Self::default()
        };
        for (address, change) in &diff.accounts {
            layer.accounts.insert(*address, before.account(*address)?);
            if change.storage_cleared {
                layer.cleared.insert(*address);
            }
            for slot in change.storage.keys() {
                let old = if change.storage_cleared {
                    U256::ZERO
                } else {
                    before.storage(*address, *slot)?
                };
                layer.storage.insert((*address, *slot), old);
            }
        }
        Ok(layer)
    }

    /// The block this layer undoes.
    pub fn number(&self) -> u64 {
        self.number
    }
}

/// The undo layers of the most recent blocks, oldest first.
#[derive(Debug)]
pub struct StateHistory {
    depth: usize,
    layers: VecDeque<Arc<UndoLayer>>,
}

impl StateHistory {
    /// Keeps the last `depth` blocks.
    pub fn new(depth: usize) -> Self {
        Self {
            depth,
            layers: VecDeque::with_capacity(depth + 1),
        }
    }

    /// Adds the layer of the block just committed (the new head), dropping the oldest
    /// beyond the depth. A layer that does not follow the last one restarts the history.
    pub fn push(&mut self, layer: UndoLayer) {
        if self
            .layers
            .back()
            .is_some_and(|last| last.number + 1 != layer.number)
        {
            self.layers.clear();
        }
        self.layers.push_back(Arc::new(layer));
        while self.layers.len() > self.depth {
            self.layers.pop_front();
        }
    }

    /// The layers needed to read block `number`'s state when the head is `head`: those of
    /// blocks `number+1..=head`. `None` when they are not all kept.
    pub fn layers_after(&self, number: u64, head: u64) -> Option<Vec<Arc<UndoLayer>>> {
        if number >= head {
            return (number == head).then(Vec::new);
        }
        let first = self.layers.front()?.number;
        let last = self.layers.back()?.number;
        if last != head || number + 1 < first {
            return None;
        }
        Some(
            self.layers
                .iter()
                .filter(|layer| layer.number > number)
                .cloned()
                .collect(),
        )
    }
}

/// The state as of an earlier block: undo layers over the current state.
pub struct HistoricalState<'a> {
    current: &'a dyn StateReader,
    /// Oldest first.
    layers: Vec<Arc<UndoLayer>>,
}

impl<'a> HistoricalState<'a> {
    /// `current` rolled back through `layers` (from [`StateHistory::layers_after`]).
    pub fn new(current: &'a dyn StateReader, layers: Vec<Arc<UndoLayer>>) -> Self {
        Self { current, layers }
    }
}

impl StateReader for HistoricalState<'_> {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        match self
            .layers
            .iter()
            .find_map(|layer| layer.accounts.get(&address))
        {
            Some(old) => Ok(*old),
            None => self.current.account(address),
        }
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        for layer in &self.layers {
            if let Some(old) = layer.storage.get(&(address, slot)) {
                return Ok(*old);
            }
            if layer.cleared.contains(&address) {
                return Ok(U256::ZERO);
            }
        }
        self.current.storage(address, slot)
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        // Code is stored by hash and never deleted.
        self.current.code(code_hash)
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        self.current.block_hash(number)
    }
}
