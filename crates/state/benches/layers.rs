//! Reading accounts through 128 diff layers of 5,000 changed accounts each (a full window
//! of 2,500-transfer blocks): accounts last changed in the newest layer, in one 64 blocks
//! back, and spread over every layer. Isolates the cost of finding a key's layer.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use alloy_primitives::{Address, B256, U256};
use criterion::{Criterion, criterion_group, criterion_main};
use stave_primitives::{AccountDiff, AccountState, StateDiff, StateReader};
use stave_state::{KEPT_LAYERS, StateLayers};
use stave_storage::{LmdbStore, commit::TxPositions};

const ACCOUNTS_PER_LAYER: u64 = 5_000;
const READS: u64 = 2_500;

/// Account `i` of layer `number`: random-looking addresses, as real ones are.
fn address(number: u64, i: u64) -> Address {
    let hash = alloy_primitives::keccak256([number.to_be_bytes(), i.to_be_bytes()].concat());
    Address::from_slice(&hash[12..])
}

fn layer(number: u64) -> StateDiff {
    let mut diff = StateDiff::default();
    let mut changes: Vec<(Address, AccountDiff)> = (0..ACCOUNTS_PER_LAYER)
        .map(|i| {
            let info = AccountState {
                nonce: number,
                balance: U256::from(i),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            };
            (
                address(number, i),
                AccountDiff {
                    info: Some(info),
                    ..AccountDiff::default()
                },
            )
        })
        .collect();
    changes.sort_by_key(|(address, _)| *address);
    for (address, change) in changes {
        diff.accounts.insert(address, change);
    }
    diff
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let top = KEPT_LAYERS as u64;
    for number in 1..=top {
        layers
            .push(number, B256::ZERO, layer(number), TxPositions::default())
            .expect("pushes");
    }
    let snapshot = layers.latest();
    let read_all = |addresses: &[Address]| {
        for address in addresses {
            let account = snapshot.account(*address).expect("reads");
            assert!(account.is_some());
        }
    };
    let newest: Vec<Address> = (0..READS).map(|i| address(top, i)).collect();
    let back_64: Vec<Address> = (0..READS).map(|i| address(top - 64, i)).collect();
    let spread: Vec<Address> = (0..READS).map(|i| address(1 + i % top, i)).collect();
    let mut group = c.benchmark_group("read_2500_accounts_through_128_layers");
    group.bench_function("newest_layer", |b| b.iter(|| read_all(&newest)));
    group.bench_function("64_layers_back", |b| b.iter(|| read_all(&back_64)));
    group.bench_function("every_layer", |b| b.iter(|| read_all(&spread)));
    group.finish();
}

criterion_group!(benches, reads);
criterion_main!(benches);
