//! A snapshot: the state at one block, as the executor, a prefetcher or a query reads it.

use std::sync::Arc;

use alloy_primitives::{Address, B256, Bytes, U256};
use stave_primitives::{AccountState, StateError, StateReader};
use stave_storage::read;

use crate::{
    bloom::KeyBloom,
    key::{StateKey, StateValue},
    layer::{DiffLayer, SpeculativeLayer},
    layers::{Reader, StateLayers, state_error},
};

/// The state at one block: its layers (newest first) over what lies below them.
pub struct Snapshot<'l, 's> {
    layers: &'l StateLayers<'s>,
    /// Blocks above the head not yet committed, newest first.
    speculative: Vec<SpeculativeLayer>,
    /// The top layer's bloom: covers every layer of the stack.
    bloom: Option<Arc<KeyBloom>>,
    stack: Vec<Arc<DiffLayer>>,
    reader: Reader,
}

impl<'l, 's> Snapshot<'l, 's> {
    /// The state of `stack` (layers, newest first) over what lies below them, read by
    /// `reader`.
    pub(crate) fn new(
        layers: &'l StateLayers<'s>,
        stack: Vec<Arc<DiffLayer>>,
        reader: Reader,
    ) -> Self {
        Self {
            layers,
            speculative: Vec::new(),
            bloom: stack.first().map(|layer| layer.bloom.clone()),
            stack,
            reader,
        }
    }
}

impl Snapshot<'_, '_> {
    /// The same state, read by a prefetcher: loads are not counted as execution reads,
    /// and what it loads from below the layers goes to the origin pool, in batches and
    /// at last with [`Snapshot::publish_prefetched`].
    pub fn for_prefetch(&self) -> Self {
        Self {
            layers: self.layers,
            speculative: self.speculative.clone(),
            bloom: self.bloom.clone(),
            stack: self.stack.clone(),
            reader: Reader::Prefetch,
        }
    }

    /// The state after `speculative` (blocks not yet committed, oldest first, the first a
    /// child of this snapshot's block): what a block proposed on top of them executes on.
    pub fn with_speculative(mut self, speculative: &[SpeculativeLayer]) -> Self {
        self.speculative = speculative.iter().rev().cloned().collect();
        self
    }

    /// The block this snapshot is the state after.
    pub fn number(&self) -> u64 {
        if let Reader::Past(number) = self.reader {
            return number;
        }
        if let Some(top) = self.speculative.first() {
            return top.number();
        }
        self.stack
            .first()
            .map_or_else(|| self.layers.flushed(), |layer| layer.number)
    }

    /// The value `key` has in the newest layer of the stack that changed it: the top
    /// layer (where an account in use is most often found, and which is cheaper to search
    /// than the index is to read), then, for an account or a slot, only the layers the
    /// index lists for the account.
    fn in_stack(&self, key: &StateKey) -> Option<StateValue> {
        let newest = self.stack.first()?;
        if let Some(value) = newest.get(key) {
            return Some(value);
        }
        let top = newest.number;
        // The stack holds consecutive blocks, newest first.
        let in_layer = |number: u64| {
            self.stack
                .get(usize::try_from(top - number).ok()?)
                .filter(|layer| layer.number == number)?
                .get(key)
        };
        match key.account() {
            Some(address) => self.layers.touched.find_newest(&address, top - 1, in_layer),
            None => self.stack[1..].iter().find_map(|layer| layer.get(key)),
        }
    }

    fn get(&self, key: StateKey) -> Result<StateValue, StateError> {
        if let Some(value) = self.speculative.iter().find_map(|layer| layer.get(&key)) {
            self.layers.count(self.reader, |c| &c.diff);
            return Ok(value);
        }
        if self
            .bloom
            .as_ref()
            .is_some_and(|bloom| bloom.may_hold(&key))
            && let Some(value) = self.in_stack(&key)
        {
            self.layers.count(self.reader, |c| &c.diff);
            return Ok(value);
        }
        self.layers.below(key, self.reader)
    }
}

fn mismatch() -> StateError {
    StateError("state layers returned a value of another kind".into())
}

impl Snapshot<'_, '_> {
    /// Puts what prefetchers loaded and still hold in the origin pool: a prefetch calls
    /// it when done.
    pub fn publish_prefetched(&self) {
        self.layers.publish_prefetched();
    }
}

impl StateReader for Snapshot<'_, '_> {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        match self.get(StateKey::Account(address))? {
            StateValue::Account(account) => Ok(account),
            _ => Err(mismatch()),
        }
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        match self.get(StateKey::Storage(address, slot))? {
            StateValue::Storage(value) => Ok(value),
            _ => Err(mismatch()),
        }
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        match self.get(StateKey::Code(code_hash))? {
            StateValue::Code(code) => Ok(code),
            _ => Err(mismatch()),
        }
    }

    fn prefetch_account(&self, address: Address) {
        if let Some(bloom) = &self.bloom {
            bloom.prefetch(&StateKey::Account(address));
        }
    }

    fn note_block_reads(&self, reads: u64) {
        if self.reader == Reader::Execution {
            self.layers.counters.add(|c| &c.block, reads);
        }
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        if let Some(layer) = self
            .speculative
            .iter()
            .find(|layer| layer.number() == number)
        {
            return Ok(layer.hash());
        }
        if let Some(layer) = self.stack.iter().find(|layer| layer.number == number) {
            return Ok(layer.hash);
        }
        Ok(read::header(self.layers.store, number)
            .map_err(state_error)?
            .map_or(B256::ZERO, |header| header.hash_slow()))
    }
}
