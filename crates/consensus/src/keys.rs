//! Validator consensus keys. A key is ed25519; a node keeps its 32-byte seed (hex, in a
//! file only its owner reads), and the genesis names each validator by its 32-byte public
//! key (`config.stave.validators`). The same key signs votes and is the key of the node's
//! TLS certificate, so a peer's TLS identity is its validator identity.

use alloy_primitives::B256;
use commonware_codec::{Copying, ReadExt as _};
use commonware_cryptography::Signer as _;
pub use commonware_cryptography::ed25519::{PrivateKey, PublicKey};

/// Why a consensus key was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A key file that is not 32 bytes of hex.
    #[error("a consensus key must be 32 bytes of hex (64 hex digits), got {0} characters")]
    Seed(usize),
    /// 32 bytes that are not a point on the curve.
    #[error("{0} is not an ed25519 public key")]
    PublicKey(B256),
}

/// The private key whose seed is `seed` (RFC 8032).
pub fn private_key(seed: &[u8; 32]) -> PrivateKey {
    PrivateKey::read(&mut Copying(&seed[..])).expect("any 32 bytes are an ed25519 seed")
}

/// Parses a key file's text: 64 hex digits, `0x` and surrounding white space allowed.
pub fn parse_seed(text: &str) -> Result<[u8; 32], KeyError> {
    let text = text.trim();
    let digits = text.strip_prefix("0x").unwrap_or(text);
    let mut seed = [0; 32];
    hex::decode_to_slice(digits, &mut seed).map_err(|_| KeyError::Seed(text.len()))?;
    Ok(seed)
}

/// The public key of `key`, as the genesis names it.
pub fn public_key_bytes(key: &PrivateKey) -> B256 {
    B256::from_slice(key.public_key().as_ref())
}

/// The public key the genesis names as `bytes`.
pub fn public_key(bytes: &B256) -> Result<PublicKey, KeyError> {
    PublicKey::read(&mut Copying(bytes.as_slice())).map_err(|_| KeyError::PublicKey(*bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_round_trips_through_its_key_file_text() {
        let seed = [7u8; 32];
        let text = format!("0x{}\n", hex::encode(seed));
        assert_eq!(parse_seed(&text).expect("valid"), seed);
        assert!(matches!(parse_seed("0x1234"), Err(KeyError::Seed(6))));
        assert!(matches!(
            parse_seed(&"zz".repeat(32)),
            Err(KeyError::Seed(64))
        ));
    }

    #[test]
    fn the_genesis_name_of_a_key_reads_back_as_its_public_key() {
        let key = private_key(&[9; 32]);
        let named = public_key_bytes(&key);
        assert_eq!(public_key(&named).expect("on the curve"), key.public_key());
        // Another seed, another key.
        assert_ne!(public_key_bytes(&private_key(&[8; 32])), named);
    }
}
