//! State changes: what an account is, and what a block changed. Written by the executor,
//! stored by the commit stage, committed to by the header's `state_root`.

use std::collections::BTreeMap;

use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};

use crate::{ChainSpec, merkle::chunked_root};

/// An account as state stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountState {
    /// Transactions sent (or contracts created, for a contract).
    pub nonce: u64,
    /// Balance in wei.
    pub balance: U256,
    /// keccak-256 of the code; `KECCAK_EMPTY` for an account without code.
    pub code_hash: B256,
}

/// How one account changed in a block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountDiff {
    /// The account after the block; `None` when it was deleted (self-destruct, EIP-161).
    pub info: Option<AccountState>,
    /// True when all storage from before the block is gone (deletion or re-creation):
    /// only `storage` below then holds.
    pub storage_cleared: bool,
    /// Slots written in the block, with their final values.
    pub storage: BTreeMap<U256, U256>,
}

/// Everything a block changed, in a deterministic (sorted) order: the input of the
/// commit stage and of the state commitment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDiff {
    /// Changed accounts.
    pub accounts: BTreeMap<Address, AccountDiff>,
    /// Code deployed in the block, by hash.
    pub codes: BTreeMap<B256, Bytes>,
}

impl StateDiff {
    /// The state a genesis creates, as a diff over nothing: block 0's changes.
    pub fn from_genesis(spec: &ChainSpec) -> Self {
        let mut diff = Self::default();
        for (address, account) in spec.alloc() {
            let code = account.code.clone().unwrap_or_default();
            let code_hash = if code.is_empty() {
                KECCAK256_EMPTY
            } else {
                keccak256(&code)
            };
            if !code.is_empty() {
                diff.codes.insert(code_hash, code);
            }
            let storage = account
                .storage
                .iter()
                .flatten()
                .map(|(slot, value)| (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0)))
                .filter(|(_, value)| !value.is_zero())
                .collect();
            let info = AccountState {
                nonce: account.nonce.unwrap_or(0),
                balance: account.balance,
                code_hash,
            };
            diff.accounts.insert(
                *address,
                AccountDiff {
                    info: Some(info),
                    storage_cleared: true,
                    storage,
                },
            );
        }
        diff
    }
}

/// One entry of a block's changes, as the state root hashes it.
enum Change<'d> {
    Account(&'d Address, &'d AccountDiff),
    Code(&'d B256),
}

impl Change<'_> {
    /// Appends the entry's prefix-free encoding: a kind byte, then fixed-width fields, and
    /// for an account the count of its slots before them.
    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Account(address, change) => {
                out.push(b'a');
                out.extend_from_slice(address.as_slice());
                match change.info {
                    Some(info) => {
                        out.push(1);
                        out.extend_from_slice(&info.nonce.to_be_bytes());
                        out.extend_from_slice(&info.balance.to_be_bytes::<32>());
                        out.extend_from_slice(info.code_hash.as_slice());
                    }
                    None => out.push(0),
                }
                out.push(u8::from(change.storage_cleared));
                out.extend_from_slice(&(change.storage.len() as u64).to_be_bytes());
                for (slot, value) in &change.storage {
                    out.extend_from_slice(&slot.to_be_bytes::<32>());
                    out.extend_from_slice(&value.to_be_bytes::<32>());
                }
            }
            Self::Code(hash) => {
                out.push(b'c');
                out.extend_from_slice(hash.as_slice());
            }
        }
    }
}

/// The header's `state_root` after a block: `keccak256(parent_root ‖ diff_root)`, where
/// `diff_root` is the [`chunked_root`] over the changed accounts in address order (each
/// with its new fields or deletion, storage-cleared flag, and written slots in slot order)
/// and then the hashes of deployed code, computed in parallel.
///
/// What it proves: two nodes with the same genesis and the same root applied the same
/// sequence of state changes, so their states are equal; a node that executed a block
/// differently gets a different root. What it does not: it is a hash chain over diffs,
/// not a trie over the state, so there are no proofs of single accounts (no
/// `eth_getProof`) and verifying it needs every diff since genesis.
pub fn state_root(parent_root: B256, diff: &StateDiff) -> B256 {
    let changes: Vec<Change<'_>> = diff
        .accounts
        .iter()
        .map(|(address, change)| Change::Account(address, change))
        .chain(diff.codes.keys().map(Change::Code))
        .collect();
    let mut preimage = [0u8; 64];
    preimage[..32].copy_from_slice(parent_root.as_slice());
    preimage[32..].copy_from_slice(chunked_root(&changes, Change::encode).as_slice());
    keccak256(preimage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(balance: u64) -> StateDiff {
        let mut diff = StateDiff::default();
        diff.accounts.insert(
            Address::with_last_byte(1),
            AccountDiff {
                info: Some(AccountState {
                    nonce: 1,
                    balance: U256::from(balance),
                    code_hash: B256::ZERO,
                }),
                storage_cleared: false,
                storage: BTreeMap::from([(U256::from(1), U256::from(2))]),
            },
        );
        diff
    }

    #[test]
    fn state_root_commits_to_parent_and_every_change() {
        let root = state_root(B256::ZERO, &diff(5));
        assert_eq!(root, state_root(B256::ZERO, &diff(5)));
        assert_ne!(root, state_root(B256::ZERO, &diff(6)));
        assert_ne!(root, state_root(B256::repeat_byte(1), &diff(5)));
        let mut slot = diff(5);
        slot.accounts.values_mut().for_each(|c| {
            c.storage.insert(U256::from(1), U256::from(3));
        });
        assert_ne!(root, state_root(B256::ZERO, &slot));
        let mut deleted = diff(5);
        deleted.accounts.values_mut().for_each(|c| c.info = None);
        assert_ne!(root, state_root(B256::ZERO, &deleted));
        let mut deployed = diff(5);
        deployed
            .codes
            .insert(B256::repeat_byte(7), Bytes::from_static(&[0x00]));
        assert_ne!(root, state_root(B256::ZERO, &deployed));
    }
}
