//! The state root: what the header's `state_root` commits to (a block's changes as
//! fixed-width units, chunked into leaves and chained onto the parent's root), and the
//! receipts root hashed alongside it.

use alloy_primitives::{Address, B256, U256, keccak256};

use super::{AccountState, StateDiff};
use crate::{
    GeneratedState,
    merkle::{Chunked, ITEMS_PER_LEAF, LeafHasher, chunked_root, chunked_roots},
    receipt::{Receipt, ReceiptLeaves, encode_without_bloom},
};

/// One unit of a block's changes, as the state root hashes it: an account's new fields
/// (or deletion), one of the slots it wrote, or a deployed code's hash. A leaf of the root
/// holds [`ITEMS_PER_LEAF`](crate::merkle::ITEMS_PER_LEAF) units, so an account that wrote
/// thousands of slots (a token contract, in a block of token transfers) spans many leaves,
/// hashed on all threads, instead of being one large leaf hashed on one.
enum Unit<'d> {
    Account {
        address: &'d Address,
        info: Option<&'d AccountState>,
        storage_cleared: bool,
        written: u64,
    },
    Slot(U256, U256),
    Code(&'d B256),
}

impl Unit<'_> {
    /// Appends the unit's encoding: a kind byte, then fixed-width fields (for an account,
    /// the count of the slot units that follow it last). Each unit is tagged and fixed in
    /// width for its kind, so a leaf's bytes determine its units, and the whole sequence
    /// determines the diff.
    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Account {
                address,
                info,
                storage_cleared,
                written,
            } => {
                out.push(b'a');
                out.extend_from_slice(address.as_slice());
                match info {
                    Some(info) => {
                        out.push(1);
                        out.extend_from_slice(&info.nonce.to_be_bytes());
                        out.extend_from_slice(&info.balance.to_be_bytes::<32>());
                        out.extend_from_slice(info.code_hash.as_slice());
                    }
                    None => out.push(0),
                }
                out.push(u8::from(storage_cleared));
                out.extend_from_slice(&written.to_be_bytes());
            }
            Self::Slot(slot, value) => {
                out.push(b's');
                out.extend_from_slice(&slot.to_be_bytes::<32>());
                out.extend_from_slice(&value.to_be_bytes::<32>());
            }
            Self::Code(hash) => {
                out.push(b'c');
                out.extend_from_slice(hash.as_slice());
            }
        }
    }
}

/// The header's `state_root` after a block: `keccak256(parent_root ‖ diff_root)`, where
/// `diff_root` is the [`chunked_root`] over the block's changes as units: each changed
/// account in address order (its new fields or deletion, storage-cleared flag and count
/// of written slots) followed by its written slots in slot order, then the hashes of
/// deployed code; its leaves are hashed by `hasher`.
///
/// What it proves: two nodes with the same genesis and the same root applied the same
/// sequence of state changes, so their states are equal; a node that executed a block
/// differently gets a different root. What it does not: it is a hash chain over diffs,
/// not a trie over the state, so there are no proofs of single accounts (no
/// `eth_getProof`) and verifying it needs every diff since genesis.
pub fn state_root(parent_root: B256, diff: &StateDiff, hasher: &dyn LeafHasher) -> B256 {
    seal(
        parent_root,
        chunked_root(&units(diff, SlotsHint::Unknown), Unit::encode, hasher),
    )
}

/// A block's `receipts_root` and `state_root` (as [`crate::receipts_root`] and [`state_root`]
/// give them), their leaves hashed together: one handing of work to `hasher`'s threads
/// instead of two, and neither root's short tail (its last leaves, its Merkle top) leaves
/// a thread idle while the other still hashes. `ahead` holds leaves of `receipts` already
/// hashed, skipped here (or none: `ReceiptLeaves::default()`); `slots` is what is known of
/// the slots `diff` holds.
pub fn receipts_and_state_roots(
    receipts: &[Receipt],
    ahead: &ReceiptLeaves,
    parent_root: B256,
    diff: &StateDiff,
    slots: SlotsHint,
    hasher: &dyn LeafHasher,
) -> (B256, B256) {
    let units = units(diff, slots);
    let (hashed, rest) = ahead.split(receipts);
    let roots = chunked_roots(
        &[
            (hashed, &Chunked::new(rest, encode_without_bloom)),
            (&[], &Chunked::new(&units, Unit::encode)),
        ],
        hasher,
    );
    (roots[0], seal(parent_root, roots[1]))
}

/// What is known, before a block's roots are hashed, of the slots its changes wrote. The
/// parallel executor learns it ([`SlotsHint::of`]) on the thread that merged the changes,
/// while they are in that core's cache; the roots then lay out the units without reading
/// every change again, from the other core's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlotsHint {
    /// Nothing is known: the roots look at every change.
    #[default]
    Unknown,
    /// No changed account wrote a slot.
    NoneWritten,
}

impl SlotsHint {
    /// What `diff` says: [`SlotsHint::NoneWritten`] when no account in it wrote a slot.
    pub fn of(diff: &StateDiff) -> Self {
        if diff
            .accounts
            .iter()
            .all(|(_, change)| change.storage.is_empty())
        {
            Self::NoneWritten
        } else {
            Self::Unknown
        }
    }
}

/// The block's changes as the units the state root commits to, in order. With
/// [`SlotsHint::NoneWritten`] no change is read: its unit is its place in the list.
fn units(diff: &StateDiff, slots: SlotsHint) -> Vec<Unit<'_>> {
    debug_assert!(
        slots == SlotsHint::Unknown || SlotsHint::of(diff) == slots,
        "a hint the changes contradict"
    );
    let looked_at = slots == SlotsHint::Unknown;
    let written: usize = if looked_at {
        diff.accounts
            .iter()
            .map(|(_, change)| change.storage.len())
            .sum()
    } else {
        0
    };
    let mut units = Vec::with_capacity(diff.accounts.len() + written + diff.codes.len());
    for (address, change) in &diff.accounts {
        units.push(Unit::Account {
            address,
            info: change.info.as_ref(),
            storage_cleared: change.storage_cleared,
            written: change.storage.len() as u64,
        });
        if looked_at {
            units.extend(
                change
                    .storage
                    .iter()
                    .map(|(slot, value)| Unit::Slot(*slot, *value)),
            );
        }
    }
    units.extend(diff.codes.keys().map(Unit::Code));
    units
}

/// `keccak256(parent_root ‖ diff_root)`.
/// The state root of a generated genesis (see [`GeneratedState`]): [`state_root`] of
/// its diff, without the diff. `addresses` are its accounts and its token's address, in
/// ascending order, each once; `token_slots` the token's slots in ascending order (see
/// [`GeneratedToken::slots`]). A generated state of tens of millions of accounts
/// (`stave state generate`) is never held as one diff; its units are laid out by
/// position and its leaves hashed on all threads.
pub fn generated_genesis_root(
    state: &GeneratedState,
    addresses: &[Address],
    token_slots: &[B256],
) -> B256 {
    use rayon::prelude::*;
    debug_assert!(addresses.windows(2).all(|pair| pair[0] < pair[1]));
    debug_assert!(token_slots.windows(2).all(|pair| pair[0] < pair[1]));
    let account = GeneratedState::ACCOUNT;
    let token = state.token.map(|token| {
        let at = addresses.binary_search(&token.address);
        debug_assert!(at.is_ok(), "the token's address is listed");
        (token, token.account(), at.unwrap_or(usize::MAX))
    });
    // Units in `state_root`'s order: accounts by address, the token's slots right after
    // the token's account, then the token's code.
    let slots = if token.is_some() {
        token_slots.len()
    } else {
        0
    };
    let accounts_and_slots = addresses.len() + slots;
    let unit = |index: usize| -> Unit<'_> {
        let Some((token, token_account, at)) = &token else {
            return Unit::Account {
                address: &addresses[index],
                info: Some(&account),
                storage_cleared: true,
                written: 0,
            };
        };
        if index == accounts_and_slots {
            return Unit::Code(&token.code_hash);
        }
        if index > *at && index <= at + slots {
            let slot = token_slots[index - at - 1];
            return Unit::Slot(U256::from_be_bytes(slot.0), token.slot_value(slot));
        }
        let position = if index > *at { index - slots } else { index };
        let (info, written) = if position == *at {
            (token_account, slots as u64)
        } else {
            (&account, 0)
        };
        Unit::Account {
            address: &addresses[position],
            info: Some(info),
            storage_cleared: true,
            written,
        }
    };
    let total = accounts_and_slots + usize::from(token.is_some());
    let leaves: Vec<B256> = (0..total.div_ceil(ITEMS_PER_LEAF))
        .into_par_iter()
        .map_init(Vec::new, |bytes, leaf| {
            bytes.clear();
            let start = leaf * ITEMS_PER_LEAF;
            for index in start..(start + ITEMS_PER_LEAF).min(total) {
                unit(index).encode(bytes);
            }
            keccak256(&bytes)
        })
        .collect();
    seal(B256::ZERO, crate::merkle_root(&leaves))
}

fn seal(parent_root: B256, diff_root: B256) -> B256 {
    let mut preimage = [0u8; 64];
    preimage[..32].copy_from_slice(parent_root.as_slice());
    preimage[32..].copy_from_slice(diff_root.as_slice());
    keccak256(preimage)
}

#[cfg(test)]
mod tests {
    use alloy_primitives::Bytes;

    use super::*;
    use crate::{
        AccountDiff, AccountState, ITEMS_PER_LEAF, SerialLeaves,
        merkle::PartsSeen,
        state::tests::{account, accounts},
    };

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
                storage: [(U256::from(1), U256::from(2))].into_iter().collect(),
            },
        );
        diff
    }

    #[test]
    fn state_root_commits_to_parent_and_every_change() {
        let root = state_root(B256::ZERO, &diff(5), &SerialLeaves);
        assert_eq!(root, state_root(B256::ZERO, &diff(5), &SerialLeaves));
        assert_ne!(root, state_root(B256::ZERO, &diff(6), &SerialLeaves));
        assert_ne!(
            root,
            state_root(B256::repeat_byte(1), &diff(5), &SerialLeaves)
        );
        let mut slot = diff(5);
        slot.accounts.values_mut().for_each(|c| {
            c.storage.insert(U256::from(1), U256::from(3));
        });
        assert_ne!(root, state_root(B256::ZERO, &slot, &SerialLeaves));
        let mut deleted = diff(5);
        deleted.accounts.values_mut().for_each(|c| c.info = None);
        assert_ne!(root, state_root(B256::ZERO, &deleted, &SerialLeaves));
        let mut deployed = diff(5);
        deployed
            .codes
            .insert(B256::repeat_byte(7), Bytes::from_static(&[0x00]));
        assert_ne!(root, state_root(B256::ZERO, &deployed, &SerialLeaves));
        // A slot belongs to the account it follows.
        let two = |first: &[(u64, u64)], second: &[(u64, u64)]| {
            accounts(&[
                (1, account(1, first, false)),
                (2, account(2, second, false)),
            ])
        };
        assert_ne!(
            state_root(B256::ZERO, &two(&[(1, 1)], &[]), &SerialLeaves),
            state_root(B256::ZERO, &two(&[], &[(1, 1)]), &SerialLeaves)
        );
    }

    #[test]
    fn one_account_s_many_slots_are_hashed_in_parts_to_the_same_root() {
        // A token contract that wrote 5,000 balances: one account, 5,001 units.
        let slots: Vec<(u64, u64)> = (0..5_000).map(|i| (i * 7 + 1, i + 1)).collect();
        let diff = accounts(&[(1, account(1, &slots, false))]);
        let hasher = PartsSeen {
            threads: 2,
            seen: Default::default(),
        };
        let root = state_root(B256::ZERO, &diff, &hasher);
        assert_eq!(root, state_root(B256::ZERO, &diff, &SerialLeaves));
        // 157 leaves: one part per thread (as one item, the account was one leaf).
        assert_eq!(*hasher.seen.lock().expect("not poisoned"), [2]);
    }

    #[test]
    fn both_roots_hashed_together_equal_each_hashed_alone() {
        let receipt = |i: u64| -> Receipt {
            alloy_consensus::Receipt {
                status: (!i.is_multiple_of(3)).into(),
                cumulative_gas_used: 21_000 * (i + 1),
                logs: vec![],
            }
            .into()
        };
        let slots: Vec<(u64, u64)> = (0..700).map(|i| (i * 3 + 1, i + 1)).collect();
        // Lists empty, within one leaf, and long enough to be cut into parts, so that
        // parts start and end inside either list and across the two; changes with slots
        // (every other account writes 700) and without.
        for (receipts, accounts_changed, with_slots) in [
            (0, 0, false),
            (0, 40, true),
            (5, 0, false),
            (70, 3, true),
            (70, 40, false),
            (2_500, 40, true),
            (2_500, 200, false),
        ] {
            let receipts: Vec<Receipt> = (0..receipts).map(receipt).collect();
            let mut diff = StateDiff::default();
            for i in 0..accounts_changed {
                let written = if with_slots && i % 2 == 0 {
                    &slots[..]
                } else {
                    &[]
                };
                diff.accounts
                    .insert(Address::with_last_byte(i as u8), account(i, written, false));
            }
            let parent = B256::repeat_byte(3);
            let alone = (
                crate::receipts_root(&receipts, &SerialLeaves),
                state_root(parent, &diff, &SerialLeaves),
            );
            // With none, one and every whole leaf of the receipts hashed ahead.
            let whole_leaves = receipts.len() / ITEMS_PER_LEAF;
            for hashed_ahead in [0, whole_leaves.min(1), whole_leaves] {
                let mut ahead = ReceiptLeaves::default();
                for _ in 0..hashed_ahead {
                    assert!(ahead.hash_next(&receipts));
                }
                let hint = SlotsHint::of(&diff);
                assert_eq!(hint == SlotsHint::NoneWritten, !with_slots);
                for (threads, slots) in [1, 2, 3, 8]
                    .into_iter()
                    .flat_map(|threads| [(threads, SlotsHint::Unknown), (threads, hint)])
                {
                    let hasher = PartsSeen {
                        threads,
                        seen: Default::default(),
                    };
                    assert_eq!(
                        receipts_and_state_roots(&receipts, &ahead, parent, &diff, slots, &hasher),
                        alone,
                        "{} receipts ({hashed_ahead} leaves ahead), {accounts_changed} accounts, \
                         {threads} threads, {slots:?}",
                        receipts.len()
                    );
                    // The leaves handed to the threads once, not once per root; then
                    // the two tops, one each (with enough leaves for every thread).
                    let seen = hasher.seen.lock().expect("not poisoned");
                    if receipts.len() == 2_500 && with_slots && threads > 1 {
                        assert_eq!(*seen, [threads, 2]);
                    } else {
                        assert!(seen.len() <= 2);
                    }
                }
            }
        }
    }

    #[test]
    fn receipt_leaves_are_hashed_ahead_only_when_whole_and_only_from_their_own_list() {
        let receipt = |i: u64| -> Receipt {
            alloy_consensus::Receipt {
                status: true.into(),
                cumulative_gas_used: 21_000 * (i + 1),
                logs: vec![],
            }
            .into()
        };
        let receipts: Vec<Receipt> = (0..2 * ITEMS_PER_LEAF as u64 - 1).map(receipt).collect();
        let mut ahead = ReceiptLeaves::default();
        assert!(!ahead.hash_next(&receipts[..ITEMS_PER_LEAF - 1]));
        assert!(ahead.hash_next(&receipts[..ITEMS_PER_LEAF]));
        // The second leaf lacks its last receipt, here and in the whole list.
        assert!(!ahead.hash_next(&receipts));
        let diff = StateDiff::default();
        let root = |receipts: &[Receipt], ahead: &ReceiptLeaves| {
            let slots = SlotsHint::NoneWritten;
            receipts_and_state_roots(receipts, ahead, B256::ZERO, &diff, slots, &SerialLeaves).0
        };
        assert_eq!(
            root(&receipts, &ahead),
            crate::receipts_root(&receipts, &SerialLeaves)
        );
        // Leaves of a longer list than the one given are not used.
        let short = &receipts[..ITEMS_PER_LEAF - 1];
        assert_eq!(
            root(short, &ahead),
            crate::receipts_root(short, &SerialLeaves)
        );
    }

    #[test]
    fn a_generated_genesis_has_the_root_of_its_diff() {
        use crate::{GeneratedToken, chainspec::mapping_slot};
        // 93 accounts, with and without a token held by 40 of them: full leaves and a
        // short one, the token's account and slots somewhere in the middle.
        let code = Bytes::from_static(&[0x60, 0x00, 0x56]);
        let token = GeneratedToken {
            address: Address::repeat_byte(0x80),
            code_hash: keccak256(&code),
            holders: 40,
            balances_position: 3,
            total_supply_slot: 4,
        };
        for token in [None, Some(token)] {
            let state = GeneratedState {
                keyed: 3,
                filler: 90,
                token,
                state_root: B256::ZERO,
            };
            let mut diff = StateDiff::default();
            let mut addresses = Vec::new();
            for index in 0..state.accounts() {
                addresses.push(state.address(index));
                diff.accounts.insert(
                    state.address(index),
                    AccountDiff {
                        info: Some(GeneratedState::ACCOUNT),
                        ..AccountDiff::deleted()
                    },
                );
            }
            let mut slots = Vec::new();
            if let Some(token) = token {
                addresses.push(token.address);
                slots = token.slots(&state);
                let mut change = AccountDiff {
                    info: Some(token.account()),
                    ..AccountDiff::deleted()
                };
                for holder in 0..40 {
                    let slot = mapping_slot(state.address(holder), 3);
                    assert_eq!(token.slot_value(slot), GeneratedToken::BALANCE);
                    change.storage.insert(slot.into(), GeneratedToken::BALANCE);
                }
                let supply = GeneratedToken::BALANCE * U256::from(40);
                assert_eq!(token.slot_value(B256::with_last_byte(4)), supply);
                change.storage.insert(U256::from(4), supply);
                diff.accounts.insert(token.address, change);
                diff.codes.insert(token.code_hash, code.clone());
            }
            addresses.sort();
            let expected = state_root(B256::ZERO, &diff, &SerialLeaves);
            assert_eq!(generated_genesis_root(&state, &addresses, &slots), expected);
            let fewer = GeneratedState { keyed: 2, ..state };
            assert_ne!(
                generated_genesis_root(&fewer, &addresses[1..], &slots),
                expected
            );
        }
    }
}
