//! Signing transactions with RFC 6979 deterministic ECDSA.
//!
//! The backend is libsecp256k1 (the `secp256k1` crate 0.30, global context): it returns
//! the recovery id with the signature, so no trial recovery is needed, and its `s` is
//! always low (EIP-2). Its context is randomized once, when first used, not after every
//! signature (as 0.33 does). Measured here it signs faster than k256
//! (see ARCHITECTURE.md and `benches/sign.rs`).
//!
//! Allocation: [`LocalSigner::sign_raw`] allocates only its output bytes, sized exactly
//! (`tests/alloc.rs` counts). Encodings go through a per-thread scratch buffer.

use std::cell::RefCell;

use alloy_consensus::{
    SignableTransaction, Signed, TypedTransaction, transaction::RlpEcdsaEncodableTx,
};
use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};
use stave_primitives::SignedTx;

use crate::error::SdkError;

/// A secp256k1 key that signs transactions.
#[derive(Clone)]
pub struct LocalSigner {
    key: SecretKey,
    address: Address,
}

impl std::fmt::Debug for LocalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("LocalSigner")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A signed transaction as it goes on the wire: its EIP-2718 bytes and their hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTx {
    /// The canonical EIP-2718 encoding (legacy RLP, or type byte || RLP).
    pub bytes: Vec<u8>,
    /// keccak-256 of `bytes`: the transaction hash.
    pub hash: B256,
}

thread_local! {
    /// Scratch for encodings: grows to the largest transaction a thread has signed and is
    /// reused, so signing allocates nothing but its output.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's emptied scratch buffer.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        f(scratch)
    })
}

/// keccak-256 of the transaction's signing payload (EIP-155 for legacy with a chain id).
fn signature_hash(tx: &TypedTransaction) -> B256 {
    with_scratch(|payload| {
        tx.encode_for_signing(payload);
        keccak256(payload.as_slice())
    })
}

impl LocalSigner {
    /// A signer for a 32-byte secret key.
    pub fn from_secret(secret: &B256) -> Result<Self, SdkError> {
        let key = SecretKey::from_byte_array(&secret.0).map_err(|_| SdkError::InvalidKey)?;
        let public = PublicKey::from_secret_key(SECP256K1, &key).serialize_uncompressed();
        // Drop the 0x04 prefix: the address hashes the raw 64-byte point.
        let address = Address::from_raw_public_key(&public[1..]);
        Ok(Self { key, address })
    }

    /// The address that signs.
    pub fn address(&self) -> Address {
        self.address
    }

    /// Signs a 32-byte digest; the signature has low `s` and its y-parity.
    pub fn sign_hash(&self, hash: &B256) -> Signature {
        let signature = SECP256K1.sign_ecdsa_recoverable(&Message::from_digest(hash.0), &self.key);
        let (recovery_id, compact) = signature.serialize_compact();
        Signature::new(
            U256::from_be_slice(&compact[..32]),
            U256::from_be_slice(&compact[32..]),
            // libsecp256k1 never returns an overflowed R (recovery id 2 or 3) from
            // signing, so bit 0 is the y-parity.
            i32::from(recovery_id) & 1 == 1,
        )
    }

    /// Signs a transaction and returns its wire bytes and hash: one allocation, the bytes.
    ///
    /// The encoding goes through the scratch buffer and is copied out at its exact length:
    /// encoding straight into a `Vec` with `eip2718_encoded_length` capacity still made a
    /// second allocation (alloy-consensus 2.5 with bytes 1.12; `tests/alloc.rs` counts).
    pub fn sign_raw(&self, tx: &TypedTransaction) -> RawTx {
        let signature = self.sign_hash(&signature_hash(tx));
        with_scratch(|encoded| {
            tx.eip2718_encode(&signature, encoded);
            RawTx {
                bytes: encoded.to_vec(),
                hash: keccak256(encoded.as_slice()),
            }
        })
    }

    /// Signs a transaction and returns it decoded, for building blocks.
    pub fn sign_tx(&self, tx: TypedTransaction) -> SignedTx {
        let signature = self.sign_hash(&signature_hash(&tx));
        let hash = tx.tx_hash(&signature);
        SignedTx::from_envelope(Signed::new_unchecked(tx, signature, hash).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TxBuilder;
    use alloy_consensus::{Transaction as _, TxEnvelope};
    use alloy_eips::eip2718::Decodable2718 as _;
    use stave_primitives::{decode_and_validate, dev::dev_account};

    const CHAIN_ID: u64 = 1337;

    fn signer() -> LocalSigner {
        LocalSigner::from_secret(&dev_account(0).secret).expect("dev key")
    }

    fn builders() -> [TxBuilder; 3] {
        [
            TxBuilder::legacy(CHAIN_ID, 7),
            TxBuilder::eip2930(CHAIN_ID, 7),
            TxBuilder::eip1559(CHAIN_ID, 9, 2),
        ]
    }

    #[test]
    fn address_matches_the_dev_account() {
        assert_eq!(signer().address(), dev_account(0).address);
    }

    #[test]
    fn rejects_zero_and_out_of_range_secrets() {
        assert_eq!(
            LocalSigner::from_secret(&B256::ZERO).unwrap_err(),
            SdkError::InvalidKey
        );
        assert_eq!(
            LocalSigner::from_secret(&B256::repeat_byte(0xff)).unwrap_err(),
            SdkError::InvalidKey
        );
    }

    #[test]
    fn every_type_validates_and_recovers_the_signer() {
        let signer = signer();
        for (i, builder) in builders().into_iter().enumerate() {
            let tx = builder.transfer(i as u64, dev_account(1).address, U256::from(5));
            let raw = signer.sign_raw(&tx);
            assert_eq!(raw.hash, keccak256(&raw.bytes));
            let checked = decode_and_validate(&raw.bytes, Some(CHAIN_ID)).expect("valid");
            assert_eq!(checked.sender, signer.address(), "{:?}", builder.format);
            assert_eq!(checked.tx.tx_type(), i as u8);
            assert_eq!(checked.tx.hash(), raw.hash);
        }
    }

    #[test]
    fn sign_tx_and_sign_raw_agree() {
        let signer = signer();
        for builder in builders() {
            let tx = builder.erc20_transfer(
                3,
                Address::repeat_byte(0xe2),
                Address::repeat_byte(1),
                U256::MAX,
            );
            let raw = signer.sign_raw(&tx);
            let signed = signer.sign_tx(tx);
            assert_eq!(signed.encoded(), raw.bytes);
            assert_eq!(signed.hash(), raw.hash);
        }
    }

    #[test]
    fn legacy_matches_the_eip155_example() {
        // The worked example of EIP-155: key 0x46..46, nonce 9, 20 gwei, 1 ether, chain 1.
        let signer = LocalSigner::from_secret(&B256::repeat_byte(0x46)).expect("key");
        let tx = TxBuilder::legacy(1, 20_000_000_000).transfer(
            9,
            Address::repeat_byte(0x35),
            U256::from(10u64).pow(U256::from(18)),
        );
        let raw = signer.sign_raw(&tx);
        assert_eq!(
            alloy_primitives::hex::encode(&raw.bytes),
            "f86c098504a817c800825208943535353535353535353535353535353535353535880de0b6b3a76400008025a028ef61340bd939bc2195fe537567866003e1a15d3c71ff63e1590620aa636276a067cbe9d8997f761aecb703304b3800ccf555c9f3dc64214b297fb1966a3b6d83"
        );
        let TxEnvelope::Legacy(signed) =
            TxEnvelope::decode_2718_exact(&raw.bytes).expect("decodes")
        else {
            panic!("not legacy");
        };
        assert_eq!(signed.tx().chain_id(), Some(1));
        assert_eq!(signed.recover_signer().expect("recovers"), signer.address());
    }

    #[test]
    fn s_is_low_for_many_signatures() {
        let half_n = U256::from_be_slice(&alloy_primitives::hex!(
            "7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0"
        ));
        let signer = signer();
        for i in 0..256u64 {
            let signature = signer.sign_hash(&keccak256(i.to_be_bytes()));
            assert!(signature.s() <= half_n, "hash {i}");
        }
    }

    #[test]
    fn signing_is_deterministic() {
        let hash = keccak256(b"rfc 6979");
        assert_eq!(signer().sign_hash(&hash), signer().sign_hash(&hash));
    }
}
