//! What the layers store: keys and values of the state, in one type per kind.

use alloy_primitives::{Address, B256, Bytes, U256};
use stave_exec::AccountState;

/// A piece of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StateKey {
    /// An account's nonce, balance and code hash.
    Account(Address),
    /// One storage slot of an account.
    Storage(Address, U256),
    /// Code by hash.
    Code(B256),
    /// Bloom filters only: the account's storage was wiped, so any of its slots may have
    /// changed.
    Wiped(Address),
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

impl StateKey {
    /// The account the key belongs to; `None` for code, which belongs to none.
    pub(crate) fn account(&self) -> Option<Address> {
        match self {
            Self::Account(address) | Self::Storage(address, _) | Self::Wiped(address) => {
                Some(*address)
            }
            Self::Code(_) => None,
        }
    }

    /// Two 64-bit hashes for the bloom filter. Addresses, code hashes and mapping slots are
    /// keccak outputs already, so their bytes are the hash; small slot numbers are mixed
    /// with the address.
    pub(crate) fn hashes(&self) -> (u64, u64) {
        const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
        match self {
            Self::Account(address) => (word(address.as_slice(), 0), word(address.as_slice(), 8)),
            Self::Storage(address, slot) => {
                let slot = slot.to_le_bytes::<32>();
                let a = word(address.as_slice(), 0) ^ word(&slot, 0).wrapping_mul(MIX);
                let b =
                    word(address.as_slice(), 8) ^ word(&slot, 24).wrapping_mul(MIX).rotate_left(17);
                (a ^ word(&slot, 8), b ^ word(&slot, 16))
            }
            Self::Code(hash) => (word(hash.as_slice(), 0) ^ MIX, word(hash.as_slice(), 8)),
            Self::Wiped(address) => (
                word(address.as_slice(), 0).rotate_left(29) ^ MIX,
                word(address.as_slice(), 8) ^ MIX,
            ),
        }
    }
}

/// The value of a [`StateKey`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateValue {
    /// An account, or `None` when it does not exist.
    Account(Option<AccountState>),
    /// A slot's value (zero when unset).
    Storage(U256),
    /// Code, or `None` when unknown.
    Code(Option<Bytes>),
}
