//! The dev chain's constants in one place, and deterministic dev accounts.
//!
//! The dev chain (`stave node --dev`, `stave testnet`, `stave load`'s default funder) is
//! chain id [`DEV_CHAIN_ID`] with the Hardhat/Anvil mnemonic's first [`DEV_MNEMONIC_ACCOUNTS`]
//! accounts funded: [`dev_chain`] builds its genesis.
//!
//! Bench account `i` ([`dev_account`]) has secret key
//! `keccak256("stave-dev-account" || i as u64 big-endian)`, so a bench can regenerate a
//! million keys from their indices instead of storing them. The mnemonic's accounts are
//! derived with BIP-32, far slower per key and needless for bench accounts. All these keys
//! are public knowledge: never fund them on a chain that matters.

use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_signer_local::{MnemonicBuilder, coins_bip39::English};
use secp256k1::{PublicKey, SECP256K1, SecretKey};

use crate::{ChainSpec, ChainSpecError, DEV_BALANCE_WEI};

/// Chain id of the dev chain, as Hardhat and Anvil.
pub const DEV_CHAIN_ID: u64 = 1337;

/// The mnemonic of Hardhat and Anvil, whose first accounts a dev chain funds.
pub const DEV_MNEMONIC: &str = "test test test test test test test test test test test junk";

/// How many of [`DEV_MNEMONIC`]'s accounts the dev chain funds.
pub const DEV_MNEMONIC_ACCOUNTS: u32 = 10;

/// A funded account of the dev chain, printed at a dev node's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MnemonicAccount {
    /// Its address.
    pub address: Address,
    /// Its secret key.
    pub secret: B256,
}

/// The signer of [`DEV_MNEMONIC`]'s account `index` (BIP-44 path `m/44'/60'/0'/0/index`).
pub fn mnemonic_signer(
    index: u32,
) -> Result<alloy_signer_local::PrivateKeySigner, alloy_signer_local::LocalSignerError> {
    MnemonicBuilder::<English>::default()
        .phrase(DEV_MNEMONIC)
        .index(index)?
        .build()
}

/// The dev chain's genesis, and the mnemonic accounts it funds with [`DEV_BALANCE_WEI`].
pub fn dev_chain() -> Result<(ChainSpec, Vec<MnemonicAccount>), ChainSpecError> {
    let mut genesis = ChainSpec::dev(DEV_CHAIN_ID, 0).genesis().clone();
    let mut accounts = Vec::new();
    for index in 0..DEV_MNEMONIC_ACCOUNTS {
        // The phrase is a constant that parses and the indices are small, so derivation
        // cannot fail.
        let signer = mnemonic_signer(index).expect("the dev mnemonic derives");
        genesis.alloc.insert(
            signer.address(),
            alloy_genesis::GenesisAccount::default().with_balance(U256::from(DEV_BALANCE_WEI)),
        );
        accounts.push(MnemonicAccount {
            address: signer.address(),
            secret: B256::from_slice(&signer.credential().to_bytes()),
        });
    }
    Ok((ChainSpec::from_genesis(genesis)?, accounts))
}

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

/// Domain tag of filler addresses.
const FILLER_TAG: &[u8] = b"stave-filler-account";

/// Filler account number `index` of a generated state
/// ([`GeneratedState`](crate::chainspec::GeneratedState)): an address spread over the
/// key space as real ones are, whose key nobody knows. A hash, not a key derivation, so
/// tens of millions of them take seconds.
pub fn filler_address(index: u64) -> Address {
    let mut preimage = [0u8; FILLER_TAG.len() + 8];
    preimage[..FILLER_TAG.len()].copy_from_slice(FILLER_TAG);
    preimage[FILLER_TAG.len()..].copy_from_slice(&index.to_be_bytes());
    Address::from_slice(&keccak256(preimage)[12..])
}

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
    fn the_dev_chain_funds_the_hardhat_accounts() {
        let (spec, accounts) = dev_chain().expect("the dev chain builds");
        assert_eq!(spec.chain_id(), DEV_CHAIN_ID);
        assert_eq!(accounts.len(), DEV_MNEMONIC_ACCOUNTS as usize);
        // Hardhat's and Anvil's first account.
        assert_eq!(
            accounts[0].address,
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
                .parse::<Address>()
                .expect("an address")
        );
        let key = SecretKey::from_byte_array(&accounts[3].secret.0).expect("valid key");
        assert_eq!(address_of(&key), accounts[3].address);
        for account in &accounts {
            let funded = spec.genesis().alloc.get(&account.address).expect("funded");
            assert_eq!(funded.balance, U256::from(DEV_BALANCE_WEI));
        }
    }

    #[test]
    fn dev_accounts_are_deterministic_and_distinct() {
        assert_eq!(dev_account(5), dev_account(5));
        assert_ne!(dev_account(5).address, dev_account(6).address);
        let key = SecretKey::from_byte_array(&dev_account(5).secret.0).expect("valid key");
        assert_eq!(address_of(&key), dev_account(5).address);
    }
}
