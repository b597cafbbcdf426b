//! The verify stage against real signatures: bad ones anywhere are caught with their
//! index, the parallel path equals the serial one, and the cache is exact.

use std::sync::Arc;

use alloy_consensus::{Signed, TxEnvelope};
use alloy_primitives::{Signature, U256};
use stave_codec::{IndexedList, encode_transactions};
use stave_primitives::{SignedTx, TxError};
use stave_sdk::{TxBuilder, Workload, signed_workload};
use stave_verify::{SenderCache, Verifier, VerifyError, verify_serial};

const CHAIN_ID: u64 = 1337;

fn block(n: usize) -> Vec<SignedTx> {
    signed_workload(Workload::Transfer, &TxBuilder::new(CHAIN_ID, 7), n).expect("signs")
}

/// The same transaction with its signature's `s` replaced.
fn with_s(tx: &SignedTx, s: impl Fn(U256) -> U256, flip: bool) -> SignedTx {
    let TxEnvelope::Eip1559(signed) = tx.envelope().clone() else {
        panic!("workload is 1559")
    };
    let (inner, sig, _) = signed.into_parts();
    let sig = Signature::new(sig.r(), s(sig.s()), sig.v() ^ flip);
    SignedTx::from_envelope(TxEnvelope::Eip1559(Signed::new_unhashed(inner, sig)))
}

const N: U256 = U256::from_be_slice(&[
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
    0xba, 0xae, 0xdc, 0xe6, 0xaf, 0x48, 0xa0, 0x3b, 0xbf, 0xd2, 0x5e, 0x8c, 0xd0, 0x36, 0x41, 0x41,
]);

#[test]
fn parallel_equals_serial_and_recovers_the_signers() {
    let txs = block(300);
    let serial = verify_serial(txs.clone(), CHAIN_ID, None).expect("valid");
    let mut verifier = Verifier::new(CHAIN_ID, 4, None);
    let parallel = verifier.verify(txs.clone()).expect("valid");
    assert_eq!(parallel, serial);
    for (i, tx) in parallel.iter().enumerate() {
        assert_eq!(
            tx.sender,
            stave_primitives::dev::dev_account(i as u64).address
        );
    }
    // Fed from the decoder: same result.
    let bytes = encode_transactions(&txs).expect("encodes");
    let list = IndexedList::parse(&bytes).expect("valid");
    assert_eq!(verifier.decode_and_verify(&list).expect("valid"), serial);
}

#[test]
fn a_bad_signature_first_middle_or_last_is_rejected_with_its_index() {
    let mut verifier = Verifier::new(CHAIN_ID, 2, None);
    for at in [0, 150, 299] {
        let mut txs = block(300);
        // s = 0 is out of range whatever the rest of the signature.
        txs[at] = with_s(&txs[at], |_| U256::ZERO, false);
        let err = verifier.verify(txs.clone()).unwrap_err();
        assert!(
            matches!(err, VerifyError::Invalid { index, source: TxError::SignatureOutOfRange { .. } } if index == at),
            "{err}"
        );
        assert_eq!(verify_serial(txs, CHAIN_ID, None).unwrap_err(), err);
    }
}

#[test]
fn a_high_s_signature_is_rejected() {
    let mut verifier = Verifier::new(CHAIN_ID, 2, None);
    let mut txs = block(10);
    txs[4] = with_s(&txs[4], |s| N - s, true);
    let err = verifier.verify(txs).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Invalid {
                index: 4,
                source: TxError::HighS(_)
            }
        ),
        "{err}"
    );
}

#[test]
fn a_wrong_chain_id_is_rejected() {
    let txs = signed_workload(Workload::Transfer, &TxBuilder::new(1, 7), 3).expect("signs");
    let mut verifier = Verifier::new(CHAIN_ID, 2, None);
    let err = verifier.verify(txs).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Invalid {
                index: 0,
                source: TxError::WrongChainId {
                    found: 1,
                    expected: CHAIN_ID
                }
            }
        ),
        "{err}"
    );
}

#[test]
fn cached_senders_skip_recovery_and_a_one_byte_change_misses() {
    let txs = block(20);
    let cache = Arc::new(SenderCache::new(1_000));
    // Admission: verify and remember.
    for tx in verify_serial(txs.clone(), CHAIN_ID, None).expect("valid") {
        cache.insert(tx.tx.hash(), tx.sender);
    }
    let mut verifier = Verifier::new(CHAIN_ID, 2, Some(Arc::clone(&cache)));
    let recovered = verifier.verify(txs.clone()).expect("valid");
    assert_eq!(cache.stats().hits, 20);
    assert_eq!(verifier.recoveries(), 0, "every sender came from the cache");
    let mut uncached = Verifier::new(CHAIN_ID, 2, None);
    uncached.verify(txs.clone()).expect("valid");
    assert_eq!(uncached.recoveries(), 20);
    assert_eq!(
        recovered,
        verify_serial(txs.clone(), CHAIN_ID, None).expect("valid")
    );

    // A transaction one byte away from a cached one (another nonce byte in its bytes)
    // is recovered afresh and found invalid, not served from the cache.
    let mut bytes = txs[3].encoded();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let altered = SignedTx::decode(&bytes).expect("still decodes");
    assert_ne!(altered.hash(), txs[3].hash());
    let misses = cache.stats().misses;
    let outcome = verifier.verify(vec![altered]);
    assert_eq!(cache.stats().misses, misses + 1);
    // Changing the signature's last byte yields another sender or none: never the cached one.
    match outcome {
        Ok(recovered) => assert_ne!(
            recovered[0].sender,
            stave_primitives::dev::dev_account(3).address
        ),
        Err(err) => assert!(matches!(err, VerifyError::Invalid { index: 0, .. })),
    }
}

#[test]
fn senders_match_the_transaction_vectors() {
    // Every valid TransactionTests vector with a chain id recovers the expected sender
    // through the parallel verifier too.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/ethereum-tests/TransactionTests/ttSignature");
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(root).expect("vectors") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        let json: serde_json::Value = serde_json::from_str(&text).expect("json");
        for (_, case) in json.as_object().expect("cases") {
            let Some(result) = case["result"].get("Cancun") else {
                continue;
            };
            let Some(sender) = result.get("sender").and_then(|s| s.as_str()) else {
                continue;
            };
            let bytes = hex::decode(
                case["txbytes"]
                    .as_str()
                    .expect("hex")
                    .trim_start_matches("0x"),
            )
            .expect("hex");
            let tx = SignedTx::decode(&bytes).expect("valid vector decodes");
            if tx.chain_id().is_none_or(|id| id == 1) {
                cases.push((tx, sender.to_string()));
            }
        }
    }
    assert!(cases.len() >= 15, "found {} signature vectors", cases.len());
    let (txs, senders): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
    let mut verifier = Verifier::new(1, 2, None);
    let recovered = verifier.verify(txs).expect("valid vectors");
    for (tx, sender) in recovered.iter().zip(senders) {
        assert_eq!(format!("{:#x}", tx.sender), sender);
    }
}
