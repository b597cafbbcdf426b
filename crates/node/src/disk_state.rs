//! The executor's view of committed state, read straight from storage. (The state layers
//! of `stave-state` will sit between the two; this is their bottom layer.)

use alloy_primitives::{Address, B256, Bytes, U256};
use stave_exec::{AccountState, StateError, StateReader};
use stave_storage::{KvStore, Table, commit};

/// Committed state in a [`KvStore`].
pub struct DiskState<'a> {
    store: &'a dyn KvStore,
}

impl<'a> DiskState<'a> {
    /// The state committed in `store`.
    pub fn new(store: &'a dyn KvStore) -> Self {
        Self { store }
    }
}

fn state_error(error: stave_storage::StorageError) -> StateError {
    StateError(error.to_string())
}

impl StateReader for DiskState<'_> {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        commit::account(self.store, address).map_err(state_error)
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        commit::storage(self.store, address, slot).map_err(state_error)
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        Ok(self
            .store
            .get(Table::Code, code_hash.as_slice())
            .map_err(state_error)?
            .map(Bytes::from))
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        Ok(commit::header(self.store, number)
            .map_err(state_error)?
            .map_or(B256::ZERO, |header| header.hash_slow()))
    }
}
