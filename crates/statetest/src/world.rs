//! The whole state of a state test in memory: built from the fixture's pre-state, read by
//! the executor, changed by the block's [`StateDiff`], and committed to by an Ethereum
//! Merkle-Patricia state root (alloy-trie), the root the fixtures give.

use std::collections::{BTreeMap, HashMap};

use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};
use alloy_trie::{
    TrieAccount,
    root::{state_root_unhashed, storage_root_unhashed},
};
use stave_primitives::{AccountState, StateDiff, StateError, StateReader};

use crate::fixture::PreAccount;

/// Every account with its storage, and every code by hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct World {
    accounts: BTreeMap<Address, Account>,
    codes: HashMap<B256, Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Account {
    info: AccountState,
    /// Non-zero slots only.
    storage: BTreeMap<U256, U256>,
}

impl World {
    /// The state a fixture's pre-state describes.
    pub fn from_pre(pre: &[(Address, PreAccount)]) -> Self {
        let mut world = Self::default();
        for (address, account) in pre {
            let code_hash = if account.code.is_empty() {
                KECCAK256_EMPTY
            } else {
                let hash = keccak256(&account.code);
                world.codes.insert(hash, account.code.clone());
                hash
            };
            let storage = account
                .storage
                .iter()
                .filter(|(_, value)| !value.is_zero())
                .copied()
                .collect();
            let info = AccountState {
                nonce: account.nonce,
                balance: account.balance,
                code_hash,
            };
            world.accounts.insert(*address, Account { info, storage });
        }
        world
    }

    /// Applies a block's changes.
    pub fn apply(&mut self, diff: &StateDiff) {
        for (address, change) in &diff.accounts {
            let Some(info) = change.info else {
                self.accounts.remove(address);
                continue;
            };
            let account = self.accounts.entry(*address).or_insert_with(|| Account {
                info,
                storage: BTreeMap::new(),
            });
            account.info = info;
            if change.storage_cleared {
                account.storage.clear();
            }
            for (slot, value) in &change.storage {
                if value.is_zero() {
                    account.storage.remove(slot);
                } else {
                    account.storage.insert(*slot, *value);
                }
            }
        }
        self.codes
            .extend(diff.codes.iter().map(|(hash, code)| (*hash, code.clone())));
    }

    /// Moves the account at `from`, with its storage, to `to`: false, and nothing moved,
    /// when `to` already holds an account. A packed case runs on addresses of its own
    /// (`crate::pack`); its state is moved back to the fixture's addresses to be checked.
    pub fn relocate(&mut self, from: Address, to: Address) -> bool {
        if self.accounts.contains_key(&to) {
            return false;
        }
        if let Some(account) = self.accounts.remove(&from) {
            self.accounts.insert(to, account);
        }
        true
    }

    /// Removes the account at `address`: the coinbase, whose balance a pack of
    /// transactions changes by every fee, is left out when a pack is compared with its
    /// transactions run alone.
    pub fn remove(&mut self, address: Address) {
        self.accounts.remove(&address);
    }

    /// The addresses whose accounts (balance, nonce, code hash or storage) differ
    /// between `self` and `other`, or that only one of them holds.
    pub fn differing_accounts(&self, other: &World) -> Vec<Address> {
        let mut addresses: Vec<Address> = self
            .accounts
            .keys()
            .chain(other.accounts.keys())
            .filter(|address| self.accounts.get(*address) != other.accounts.get(*address))
            .copied()
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        addresses
    }

    /// The Ethereum state root: the Merkle-Patricia trie of the accounts by the hash of
    /// their address, each with the root of its storage trie.
    pub fn root(&self) -> B256 {
        state_root_unhashed(self.accounts.iter().map(|(address, account)| {
            let storage_root = storage_root_unhashed(
                account
                    .storage
                    .iter()
                    .map(|(slot, value)| (B256::from(*slot), *value)),
            );
            let trie = TrieAccount {
                nonce: account.info.nonce,
                balance: account.info.balance,
                storage_root,
                code_hash: account.info.code_hash,
            };
            (*address, trie)
        }))
    }
}

impl StateReader for World {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        Ok(self.accounts.get(&address).map(|account| account.info))
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        Ok(self
            .accounts
            .get(&address)
            .and_then(|account| account.storage.get(&slot).copied())
            .unwrap_or_default())
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        Ok(self.codes.get(&code_hash).cloned())
    }

    /// The fixtures' convention (go-ethereum's and revm's test runners): the hash of
    /// block `number` is keccak-256 of its decimal digits.
    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        Ok(keccak256(number.to_string()))
    }
}
