//! A block's state changes as the commit stage journals them (the `state_diffs` table,
//! docs/storage-layout.md): what a restarted node reads to rebuild the state layers of
//! blocks it committed but had not flushed, instead of executing them again.
//!
//! ```text
//! diff    := u32 accounts, account*, u32 codes, code*        (counts big-endian)
//! account := address(20) flags(1) [uint nonce, uint balance, [code_hash(32)]]
//!            u32 slots, (uint slot, uint value)*
//!   flags: INFO (the fields follow; absent: deleted), CLEARED (storage cleared),
//!          EMPTY_CODE (with INFO: the code hash is the empty code's and is left out)
//! uint    := length(1) ‖ big-endian bytes without leading zeros (zero: length 0)
//! code    := u32 length ‖ bytes                                 (its hash is computed)
//! ```
//!
//! The state history stores an account's earlier value as the `account` rule's fields
//! alone, `uint nonce, uint balance, [code_hash(32)]`, the code hash present only if it is
//! not the empty code's ([`encode_stored_account`]).
//!
//! Accounts, slots and codes come in ascending order and every length is minimal, so
//! each diff has exactly one encoding: [`decode_stored_diff`] refuses any other bytes.

use std::collections::BTreeMap;

use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};

use crate::{AccountDiff, AccountState, SlotDiffs, StateDiff};

const INFO: u8 = 1;
const CLEARED: u8 = 2;
const EMPTY_CODE: u8 = 4;

/// Why stored bytes are not a journaled state diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored state diff: {0}")]
pub struct StoredDiffError(&'static str);

/// Encodes `diff` for the `state_diffs` table (see the module docs for the format).
pub fn encode_stored_diff(diff: &StateDiff) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + diff.accounts.len() * 64);
    put_count(&mut out, diff.accounts.len());
    for (address, change) in &diff.accounts {
        out.extend_from_slice(address.as_slice());
        let flags = change.info.map_or(0, |info| {
            INFO | if info.code_hash == KECCAK256_EMPTY {
                EMPTY_CODE
            } else {
                0
            }
        }) | if change.storage_cleared { CLEARED } else { 0 };
        out.push(flags);
        if let Some(info) = &change.info {
            put_account(&mut out, info);
        }
        put_count(&mut out, change.storage.len());
        for (slot, value) in &change.storage {
            put_uint(&mut out, &slot.to_be_bytes::<32>());
            put_uint(&mut out, &value.to_be_bytes::<32>());
        }
    }
    put_count(&mut out, diff.codes.len());
    for code in diff.codes.values() {
        put_count(&mut out, code.len());
        out.extend_from_slice(code);
    }
    out
}

/// The diff [`encode_stored_diff`] wrote; an error for any other bytes.
pub fn decode_stored_diff(bytes: &[u8]) -> Result<StateDiff, StoredDiffError> {
    let mut input = Input(bytes);
    let count = input.count()?;
    // Every account takes at least 25 bytes: no count can make this allocate more than
    // the input's size.
    let mut accounts = Vec::with_capacity(count.min(bytes.len() / 25));
    for _ in 0..count {
        let address = Address::from(input.array::<20>()?);
        if accounts
            .last()
            .is_some_and(|(last, _): &(Address, AccountDiff)| *last >= address)
        {
            return Err(StoredDiffError("accounts out of order"));
        }
        let flags = input.array::<1>()?[0];
        if flags & !(INFO | CLEARED | EMPTY_CODE) != 0 || flags & (INFO | EMPTY_CODE) == EMPTY_CODE
        {
            return Err(StoredDiffError("unknown account flags"));
        }
        let info = if flags & INFO != 0 {
            let nonce = u64::from_be_bytes(input.uint::<8>()?);
            let balance = U256::from_be_bytes(input.uint::<32>()?);
            let code_hash = if flags & EMPTY_CODE != 0 {
                KECCAK256_EMPTY
            } else {
                let hash = B256::from(input.array::<32>()?);
                if hash == KECCAK256_EMPTY {
                    return Err(StoredDiffError("the empty code hash written out"));
                }
                hash
            };
            Some(AccountState {
                nonce,
                balance,
                code_hash,
            })
        } else {
            None
        };
        let mut storage = SlotDiffs::default();
        let mut last_slot = None;
        for _ in 0..input.count()? {
            let slot = U256::from_be_bytes(input.uint::<32>()?);
            if last_slot.is_some_and(|last| last >= slot) {
                return Err(StoredDiffError("slots out of order"));
            }
            last_slot = Some(slot);
            storage.insert(slot, U256::from_be_bytes(input.uint::<32>()?));
        }
        accounts.push((
            address,
            AccountDiff {
                info,
                storage_cleared: flags & CLEARED != 0,
                storage,
            },
        ));
    }
    let mut codes = BTreeMap::new();
    let mut last_hash = None;
    for _ in 0..input.count()? {
        let length = input.count()?;
        let code = Bytes::copy_from_slice(input.take(length)?);
        let hash = keccak256(&code);
        if last_hash.is_some_and(|last| last >= hash) {
            return Err(StoredDiffError("codes out of order"));
        }
        last_hash = Some(hash);
        codes.insert(hash, code);
    }
    if !input.0.is_empty() {
        return Err(StoredDiffError("bytes after the diff"));
    }
    Ok(StateDiff {
        accounts: accounts.into_iter().collect(),
        codes,
    })
}

/// Appends an account as both formats hold one: its nonce and balance as `uint`s, then
/// its code hash unless it is the empty code's.
fn put_account(out: &mut Vec<u8>, account: &AccountState) {
    put_uint(out, &account.nonce.to_be_bytes());
    put_uint(out, &account.balance.to_be_bytes::<32>());
    if account.code_hash != KECCAK256_EMPTY {
        out.extend_from_slice(account.code_hash.as_slice());
    }
}

/// Encodes an account as the state history stores its value before a block changed it:
/// [`put_account`]'s bytes alone (an absent account is stored as no bytes at all).
pub fn encode_stored_account(account: &AccountState) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    put_account(&mut out, account);
    out
}

/// The account [`encode_stored_account`] wrote; an error for any other bytes.
pub fn decode_stored_account(bytes: &[u8]) -> Result<AccountState, StoredDiffError> {
    let mut input = Input(bytes);
    let nonce = u64::from_be_bytes(input.uint::<8>()?);
    let balance = U256::from_be_bytes(input.uint::<32>()?);
    let code_hash = match input.0.len() {
        0 => KECCAK256_EMPTY,
        32 => {
            let hash = B256::from(input.array::<32>()?);
            if hash == KECCAK256_EMPTY {
                return Err(StoredDiffError("the empty code hash written out"));
            }
            hash
        }
        _ => {
            return Err(StoredDiffError(
                "an account's code hash is 32 bytes or none",
            ));
        }
    };
    Ok(AccountState {
        nonce,
        balance,
        code_hash,
    })
}

/// Appends a count or length as a big-endian u32 (a block's diff is far below 4 GiB).
fn put_count(out: &mut Vec<u8>, count: usize) {
    let count = u32::try_from(count).expect("a block's diff counts fit in u32");
    out.extend_from_slice(&count.to_be_bytes());
}

/// Appends a big-endian integer as its length and its bytes without leading zeros.
fn put_uint(out: &mut Vec<u8>, be: &[u8]) {
    let start = be.iter().position(|byte| *byte != 0).unwrap_or(be.len());
    out.push((be.len() - start) as u8);
    out.extend_from_slice(&be[start..]);
}

/// The bytes not read yet.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], StoredDiffError> {
        if length > self.0.len() {
            return Err(StoredDiffError("truncated"));
        }
        let (head, rest) = self.0.split_at(length);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoredDiffError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn count(&mut self) -> Result<usize, StoredDiffError> {
        Ok(u32::from_be_bytes(self.array::<4>()?) as usize)
    }

    /// An integer of at most `N` bytes, right-aligned in `N`.
    fn uint<const N: usize>(&mut self) -> Result<[u8; N], StoredDiffError> {
        let length = usize::from(self.array::<1>()?[0]);
        if length > N {
            return Err(StoredDiffError("integer too long"));
        }
        let bytes = self.take(length)?;
        if bytes.first() == Some(&0) {
            return Err(StoredDiffError("integer with a leading zero"));
        }
        let mut value = [0u8; N];
        value[N - length..].copy_from_slice(bytes);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StateDiff {
        let account = |nonce: u64, balance: u64, code_hash: B256| AccountState {
            nonce,
            balance: U256::from(balance),
            code_hash,
        };
        let code = Bytes::from_static(&[0x60, 0x00, 0x60, 0x00, 0xf3]);
        StateDiff {
            accounts: [
                (
                    Address::with_last_byte(1),
                    AccountDiff {
                        info: Some(account(0, 0, KECCAK256_EMPTY)),
                        storage_cleared: false,
                        storage: SlotDiffs::default(),
                    },
                ),
                (
                    Address::with_last_byte(2),
                    AccountDiff {
                        info: Some(account(7, u64::MAX, keccak256(&code))),
                        storage_cleared: true,
                        storage: [(U256::ZERO, U256::from(5)), (U256::MAX, U256::ZERO)]
                            .into_iter()
                            .collect(),
                    },
                ),
                (Address::repeat_byte(0xff), AccountDiff::deleted()),
            ]
            .into_iter()
            .collect(),
            codes: BTreeMap::from([(keccak256(&code), code)]),
        }
    }

    #[test]
    fn a_diff_reads_back_as_written_and_every_shorter_prefix_is_refused() {
        let diff = sample();
        let bytes = encode_stored_diff(&diff);
        assert_eq!(decode_stored_diff(&bytes), Ok(diff));
        assert_eq!(
            decode_stored_diff(&encode_stored_diff(&StateDiff::default())),
            Ok(StateDiff::default())
        );
        for length in 0..bytes.len() {
            assert!(decode_stored_diff(&bytes[..length]).is_err(), "{length}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode_stored_diff(&longer),
            Err(StoredDiffError("bytes after the diff"))
        );
    }

    #[test]
    fn non_canonical_encodings_are_refused() {
        // One account, address 0x..01, no info, one slot: slot 1 = 2.
        let mut one = vec![0, 0, 0, 1];
        one.extend_from_slice(Address::with_last_byte(1).as_slice());
        let with = |tail: &[u8]| [one.as_slice(), tail].concat();
        assert!(decode_stored_diff(&with(&[0, 0, 0, 0, 1, 1, 1, 1, 2, 0, 0, 0, 0])).is_ok());
        let refused = [
            (
                with(&[0, 0, 0, 0, 1, 2, 0, 1, 1, 2, 0, 0, 0, 0]),
                "leading zero",
            ),
            (with(&[0, 0, 0, 0, 1, 33]), "integer too long"),
            (
                with(&[EMPTY_CODE, 0, 0, 0, 0, 0, 0, 0, 0]),
                "unknown account flags",
            ),
            (with(&[8, 0, 0, 0, 0, 0, 0, 0, 0]), "unknown account flags"),
            (
                with(&[0, 0, 0, 0, 2, 1, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]),
                "slots out of order",
            ),
            (
                with(&[&[INFO, 0, 0], KECCAK256_EMPTY.as_slice(), &[0; 8]].concat()),
                "the empty code hash written out",
            ),
        ];
        for (bytes, reason) in refused {
            assert!(
                decode_stored_diff(&bytes).is_err_and(|e| e.to_string().contains(reason)),
                "{reason}: {:?}",
                decode_stored_diff(&bytes)
            );
        }
        let mut twice = vec![0, 0, 0, 2];
        for _ in 0..2 {
            twice.extend_from_slice(Address::with_last_byte(1).as_slice());
            twice.extend_from_slice(&[0, 0, 0, 0, 0]);
        }
        twice.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            decode_stored_diff(&twice),
            Err(StoredDiffError("accounts out of order"))
        );
    }

    #[test]
    fn a_history_account_reads_back_as_written_and_damage_is_refused() {
        for account in [
            AccountState::EMPTY,
            AccountState {
                nonce: u64::MAX,
                balance: U256::MAX,
                code_hash: keccak256([1]),
            },
        ] {
            let bytes = encode_stored_account(&account);
            assert_eq!(decode_stored_account(&bytes), Ok(account));
            for length in 0..bytes.len() {
                // Without its code hash, a contract's bytes are another account's.
                if bytes.len().checked_sub(32) != Some(length) {
                    assert!(decode_stored_account(&bytes[..length]).is_err(), "{length}");
                }
            }
        }
        let empty_written_out = [&[0u8, 0][..], KECCAK256_EMPTY.as_slice()].concat();
        assert_eq!(
            decode_stored_account(&empty_written_out),
            Err(StoredDiffError("the empty code hash written out"))
        );
        assert!(decode_stored_account(&[0, 0, 1]).is_err());
    }

    /// Diffs over the whole range of every field: full-width and zero integers, any code.
    fn arbitrary_diff() -> impl proptest::strategy::Strategy<Value = StateDiff> {
        use proptest::{collection, prelude::*};
        let word = any::<[u8; 32]>().prop_map(U256::from_be_bytes);
        let small = (0u64..3).prop_map(U256::from);
        let value = prop_oneof![word.clone(), small];
        let info = (
            any::<u64>(),
            value.clone(),
            any::<bool>(),
            any::<[u8; 32]>(),
        )
            .prop_map(|(nonce, balance, no_code, hash)| AccountState {
                nonce,
                balance,
                code_hash: if no_code {
                    KECCAK256_EMPTY
                } else {
                    B256::from(hash)
                },
            });
        let account = (
            any::<[u8; 20]>(),
            proptest::option::of(info),
            any::<bool>(),
            collection::btree_map(value.clone(), value, 0..4),
        )
            .prop_map(|(address, info, storage_cleared, storage)| {
                (
                    Address::from(address),
                    AccountDiff {
                        info,
                        storage_cleared,
                        storage: storage.into_iter().collect(),
                    },
                )
            });
        let codes = collection::vec(collection::vec(any::<u8>(), 0..40), 0..3);
        (collection::vec(account, 0..6), codes).prop_map(|(accounts, codes)| StateDiff {
            accounts: accounts.into_iter().collect(),
            codes: codes
                .into_iter()
                .map(|code| (keccak256(&code), Bytes::from(code)))
                .collect(),
        })
    }

    proptest::proptest! {
        #[test]
        fn any_diff_reads_back_exactly(diff in arbitrary_diff()) {
            let bytes = encode_stored_diff(&diff);
            proptest::prop_assert_eq!(decode_stored_diff(&bytes), Ok(diff));
        }

        #[test]
        fn a_damaged_diff_is_refused_or_is_the_encoding_of_what_it_decodes_to(
            diff in arbitrary_diff(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
        ) {
            let mut bytes = encode_stored_diff(&diff);
            let at = at.index(bytes.len());
            bytes[at] = byte;
            if let Ok(decoded) = decode_stored_diff(&bytes) {
                proptest::prop_assert_eq!(encode_stored_diff(&decoded), bytes);
            }
        }
    }

    #[test]
    fn a_huge_count_is_refused_without_allocating_for_it() {
        assert_eq!(
            decode_stored_diff(&[0xff, 0xff, 0xff, 0xff]),
            Err(StoredDiffError("truncated"))
        );
    }
}
