//! The signer's cost: the bare curve operation of each backend (k256 and libsecp256k1 via
//! the `secp256k1` crate) on a 32-byte hash, then whole transfers built, encoded and signed
//! (`sign_raw`, `sign_tx`). The gap between the two groups is what building and encoding
//! add over the curve; the backend comparison is why the SDK signs with libsecp256k1.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;

use alloy_primitives::{U256, keccak256};
use criterion::{Criterion, criterion_group, criterion_main};
use k256::ecdsa::SigningKey;
use stave_primitives::dev::dev_account;
use stave_sdk::{LocalSigner, TxBuilder};

fn sign(c: &mut Criterion) {
    let secret = dev_account(0).secret;
    let to = dev_account(1).address;
    let hash = keccak256(b"a transaction's signing hash");

    let mut group = c.benchmark_group("sign_hash");
    let k256_key = SigningKey::from_bytes(&secret.0.into()).expect("dev key");
    group.bench_function("k256", |b| {
        b.iter(|| {
            k256_key
                .sign_prehash_recoverable(black_box(hash.as_slice()))
                .expect("signs")
        })
    });
    let signer = LocalSigner::from_secret(&secret).expect("dev key");
    group.bench_function("secp256k1", |b| {
        b.iter(|| signer.sign_hash(black_box(&hash)))
    });
    group.finish();

    let mut group = c.benchmark_group("sign_transfer");
    for (name, builder) in [
        ("legacy_raw", TxBuilder::legacy(1337, 1_000_000_000)),
        ("eip1559_raw", TxBuilder::new(1337, 1_000_000_000)),
    ] {
        let mut nonce = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                nonce += 1;
                signer.sign_raw(&builder.transfer(nonce, to, U256::from(1)))
            })
        });
    }
    let builder = TxBuilder::new(1337, 1_000_000_000);
    group.bench_function("eip1559_decoded", |b| {
        b.iter(|| signer.sign_tx(builder.transfer(black_box(7), to, U256::from(1))))
    });
    group.finish();
}

criterion_group!(benches, sign);
criterion_main!(benches);
