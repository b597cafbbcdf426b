//! A block's state root (5,000 changed accounts, what 2,500 transfers leave) hashed on
//! one thread, on the executor's threads (the caller's among them) and on rayon's global
//! pool: where the node hashes a block's roots when it executes on all threads. And the
//! block's two roots on the executor's threads, one after the other or hashed together.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use alloy_primitives::{Address, B256, KECCAK256_EMPTY, U256, keccak256};
use criterion::{Criterion, criterion_group, criterion_main};
use stave_exec::{AccountDiff, AccountState, ParallelExecutor, StateDiff};
use stave_primitives::{
    GlobalPoolLeaves, LeafHasher, Receipt, ReceiptLeaves, SerialLeaves, SlotsHint,
    receipts_and_state_roots, receipts_root, state_root,
};

const ACCOUNTS: u64 = 5_000;

fn diff() -> StateDiff {
    let mut changes: Vec<(Address, AccountDiff)> = (0..ACCOUNTS)
        .map(|i| {
            let info = AccountState {
                nonce: i,
                balance: U256::from(i),
                code_hash: KECCAK256_EMPTY,
            };
            let change = AccountDiff {
                info: Some(info),
                ..AccountDiff::default()
            };
            (
                Address::from_slice(&keccak256(i.to_be_bytes())[12..]),
                change,
            )
        })
        .collect();
    changes.sort_by_key(|(address, _)| *address);
    let mut diff = StateDiff::default();
    for (address, change) in changes {
        diff.accounts.insert(address, change);
    }
    diff
}

fn roots(c: &mut Criterion) {
    let diff = diff();
    let executor = ParallelExecutor::new(2).expect("threads");
    let hashers: [(&str, &dyn LeafHasher); 3] = [
        ("one_thread", &SerialLeaves),
        ("executor_2_threads", &executor),
        ("global_pool", &GlobalPoolLeaves),
    ];
    let mut group = c.benchmark_group("state_root_of_5000_accounts");
    for (name, hasher) in hashers {
        group.bench_function(name, |b| b.iter(|| state_root(B256::ZERO, &diff, hasher)));
    }
    group.finish();
    let receipts: Vec<Receipt> = (1..=2_500)
        .map(|i| {
            alloy_consensus::Receipt {
                status: true.into(),
                cumulative_gas_used: 21_000 * i,
                logs: vec![],
            }
            .into()
        })
        .collect();
    let mut group = c.benchmark_group("both_roots_of_2500_transfers_on_2_threads");
    group.bench_function("one_after_the_other", |b| {
        b.iter(|| {
            (
                receipts_root(&receipts, &executor),
                state_root(B256::ZERO, &diff, &executor),
            )
        })
    });
    group.bench_function("together", |b| {
        b.iter(|| {
            receipts_and_state_roots(
                &receipts,
                &ReceiptLeaves::default(),
                B256::ZERO,
                &diff,
                SlotsHint::Unknown,
                &executor,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, roots);
criterion_main!(benches);
