//! What an executor reads: the state before a block, through [`StateReader`].
//!
//! The trait sits here, below the executor, so the crates that implement it (the state
//! layers) or read through it (the txpool's admission checks) need not depend on the
//! executor. [`MemoryState`] is the plain in-memory implementation for genesis, tests and
//! benches.

use std::collections::HashMap;

use alloy_primitives::{Address, B256, Bytes, U256};

use crate::{AccountState, ChainSpec, StateDiff};

/// A state read failed (the storage layer's error, carried as text so that readers and
/// the executor need not depend on the storage crate).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state read failed: {0}")]
pub struct StateError(pub String);

impl revm_context_interface::DBErrorMarker for StateError {}

/// Read access to the state before a block: what every executor, serial or parallel,
/// starts from. Implementations must be safe to read from many threads at once.
pub trait StateReader: Send + Sync {
    /// The account at `address`, or `None` if it does not exist.
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError>;
    /// The value of storage `slot` of `address` (zero when unset).
    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError>;
    /// The code with this hash, if known.
    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError>;
    /// The hash of block `number` (for the BLOCKHASH opcode); zero when unknown.
    fn block_hash(&self, number: u64) -> Result<B256, StateError>;
    /// Told, after a block executed over this state, how many of the executor's reads
    /// its own block changes served (the L1 layer, above this reader), so a layered
    /// reader can report every layer's share. Plain readers ignore it.
    fn note_block_reads(&self, _reads: u64) {}
    /// A hint that the account at `address` is read soon: a layered reader may start
    /// loading the memory its lookup will touch. Plain readers ignore it.
    fn prefetch_account(&self, _address: Address) {}
}

/// The whole state in memory: genesis, tests and benches. Real nodes read through the
/// state layers over storage instead.
#[derive(Debug, Clone, Default)]
pub struct MemoryState {
    accounts: HashMap<Address, AccountState>,
    storage: HashMap<(Address, U256), U256>,
    codes: HashMap<B256, Bytes>,
}

impl MemoryState {
    /// The state a genesis describes.
    pub fn from_genesis(spec: &ChainSpec) -> Self {
        let mut state = Self::default();
        state.apply(&StateDiff::from_genesis(spec));
        state
    }

    /// Applies a block's changes.
    pub fn apply(&mut self, diff: &StateDiff) {
        for (address, change) in &diff.accounts {
            if change.storage_cleared {
                self.storage.retain(|(owner, _), _| owner != address);
            }
            for (slot, value) in &change.storage {
                if value.is_zero() {
                    self.storage.remove(&(*address, *slot));
                } else {
                    self.storage.insert((*address, *slot), *value);
                }
            }
            match change.info {
                Some(info) => self.accounts.insert(*address, info),
                None => self.accounts.remove(address),
            };
        }
        self.codes
            .extend(diff.codes.iter().map(|(hash, code)| (*hash, code.clone())));
    }
}

impl StateReader for MemoryState {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        Ok(self.accounts.get(&address).copied())
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        Ok(self
            .storage
            .get(&(address, slot))
            .copied()
            .unwrap_or_default())
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        Ok(self.codes.get(&code_hash).cloned())
    }

    fn block_hash(&self, _number: u64) -> Result<B256, StateError> {
        Ok(B256::ZERO)
    }
}
