//! Deterministic dev accounts for benches, tests and `stave genesis new`.
//!
//! Account `i` has secret key `keccak256("stave-dev-account" || i as u64 big-endian)`, so a
//! bench can regenerate a million keys from their indices instead of storing them. These
//! keys are public knowledge: never fund them on a chain that matters. (The Hardhat
//! mnemonic accounts of `stave node --dev` are derived with BIP-32 in the binary; that is
//! ~100x slower per key and needless for bench accounts.)

use alloy_primitives::{Address, B256, keccak256};
use secp256k1::{PublicKey, SECP256K1, SecretKey};

/// A dev account: its secret key and address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAccount {
    /// The secp256k1 secret key.
    pub secret: B256,
    /// The address of its public key.
    pub address: Address,
}

/// Domain tag of the dev key derivation.
const DEV_KEY_TAG: &[u8] = b"stave-dev-account";

/// Dev account number `index`.
pub fn dev_account(index: u64) -> DevAccount {
    let mut preimage = DEV_KEY_TAG.to_vec();
    preimage.extend_from_slice(&index.to_be_bytes());
    let mut secret = keccak256(&preimage);
    // A hash is a valid key unless it is zero or >= the curve order (probability ~2^-128);
    // rehash until it is one, so every index has a key.
    let key = loop {
        if let Ok(key) = SecretKey::from_byte_array(&secret.0) {
            break key;
        }
        secret = keccak256(secret);
    };
    DevAccount {
        secret,
        address: address_of(&key),
    }
}

/// The Ethereum address of a secret key.
pub fn address_of(key: &SecretKey) -> Address {
    let public = PublicKey::from_secret_key(SECP256K1, key);
    alloy_consensus::crypto::secp256k1::public_key_to_address(public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_accounts_are_deterministic_and_distinct() {
        assert_eq!(dev_account(5), dev_account(5));
        assert_ne!(dev_account(5).address, dev_account(6).address);
        let key = SecretKey::from_byte_array(&dev_account(5).secret.0).expect("valid key");
        assert_eq!(address_of(&key), dev_account(5).address);
    }
}
