//! What the layers store: keys and values of the state, in one type per kind.

use alloy_primitives::{Address, B256, Bytes, U256};
use stave_primitives::AccountState;

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

/// An odd constant (2^64 over the golden ratio): multiplied by it, a word cannot cancel
/// its twin out, and XORed in, it salts one key kind's hashes apart from another's.
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// Two hashes of all 20 bytes of `address`, each key kind salting them its own way.
fn address_hashes(address: &Address, salt: u64) -> (u64, u64) {
    let bytes = address.as_slice();
    // Bytes 12..20: the last eight, overlapping the middle word by four. Each word is
    // mixed in turn (an address of one byte repeated must not cancel itself out).
    let (first, middle, last) = (word(bytes, 0), word(bytes, 8), word(bytes, 12) ^ salt);
    let inner = mix(middle ^ last.wrapping_mul(MIX));
    let outer = mix(first ^ inner);
    (outer, mix(outer ^ inner.rotate_left(32)))
}

/// The splitmix64 finalizer: every input bit moves about half the output bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    /// Two 64-bit hashes for the bloom filter and the shards of the pools below the layers.
    /// Code hashes are keccak outputs, so their bytes are the hash. Addresses are mixed
    /// whole: many are not keccak outputs (precompiles, system contracts, test accounts
    /// counted up from a prefix), and taken as they are, addresses that differ only in
    /// their last bytes all fell in one block of the filter (which then let every one of
    /// them through to the layers) and in one shard: in `bench pipeline` every read of a
    /// transfer's recipient (`0x5a…`, counted up) searched the layers' index, ~150 ns.
    /// Slots are mixed with their address.
    pub(crate) fn hashes(&self) -> (u64, u64) {
        match self {
            Self::Account(address) => address_hashes(address, 0),
            Self::Storage(address, slot) => {
                let (a, b) = address_hashes(address, 0);
                let slot = slot.to_le_bytes::<32>();
                let low = word(&slot, 0) ^ word(&slot, 16).wrapping_mul(MIX);
                let high = word(&slot, 8) ^ word(&slot, 24).wrapping_mul(MIX);
                (mix(a ^ low), mix(b ^ high ^ low.rotate_left(32)))
            }
            Self::Code(hash) => (word(hash.as_slice(), 0) ^ MIX, word(hash.as_slice(), 8)),
            Self::Wiped(address) => address_hashes(address, MIX),
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

/// Address `i` counted up from a prefix of `prefix` bytes, as a chain's system contracts or
/// a test's recipients are: an address that is not a keccak output.
#[cfg(test)]
pub(crate) fn counted_address(prefix: u8, i: u64) -> Address {
    let mut bytes = [prefix; 20];
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(bytes)
}
