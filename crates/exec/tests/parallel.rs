//! Differential tests: for random blocks mixing every workload, the parallel executor's
//! outcome (receipts, gas, fees, skipped txs, state diff) equals the serial executor's
//! exactly, with 1, 2 and 8 threads, building a block and validating one alike.

mod support;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use alloy_primitives::{Address, B256, Bytes, TxKind};
use proptest::prelude::*;
use stave_exec::{ExecutionOutcome, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{RecoveredTx, SerialLeaves};
use stave_sdk::erc20_transfer_calldata;
use support::*;

/// One transaction of a random block.
#[derive(Debug, Clone)]
enum Op {
    /// ETH to an address derived from `to`.
    Transfer { to: u8 },
    /// ETH to the hot account every `Hot` tx touches (and `PROBE` reads).
    Hot,
    /// Token transfer; amounts above 100 revert.
    Erc20 { to: u8, amount: u64 },
    /// Reads the hot account's balance into storage.
    Probe,
    /// Runs out of gas.
    Spin,
    /// Creates a contract that self-destructs to the hot account.
    CreateAndDestroy,
    /// Deploys a contract that creates a child.
    CreateCreator,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(|to| Op::Transfer { to }),
        2 => Just(Op::Hot),
        3 => (any::<u8>(), 0u64..120).prop_map(|(to, amount)| Op::Erc20 { to, amount }),
        1 => Just(Op::Probe),
        1 => Just(Op::Spin),
        1 => Just(Op::CreateAndDestroy),
        1 => Just(Op::CreateCreator),
    ]
}

/// Builds signed txs: (sender, op, skip-a-nonce) triples; a skipped nonce makes that
/// sender's later txs invalid, which Build mode must leave out identically.
fn block(ops: &[(u64, Op, bool)]) -> Vec<RecoveredTx> {
    let mut nonces = [0u64; SENDERS as usize];
    ops.iter()
        .map(|(sender, op, skip)| {
            let nonce = &mut nonces[*sender as usize];
            if *skip {
                *nonce += 1;
            }
            let n = *nonce;
            *nonce += 1;
            let recipient = |b: u8| Address::with_last_byte(b).create(u64::from(b));
            match op {
                Op::Transfer { to } => tx(
                    *sender,
                    n,
                    TxKind::Call(recipient(*to)),
                    1,
                    21_000,
                    Bytes::new(),
                ),
                Op::Hot => tx(*sender, n, TxKind::Call(TARGET), 3, 21_000, Bytes::new()),
                Op::Erc20 { to, amount } => tx(
                    *sender,
                    n,
                    TxKind::Call(TOKEN),
                    0,
                    100_000,
                    erc20_transfer_calldata(
                        recipient(*to),
                        (*amount).try_into().unwrap_or_default(),
                    ),
                ),
                Op::Probe => tx(*sender, n, TxKind::Call(PROBE), 0, 100_000, Bytes::new()),
                Op::Spin => tx(*sender, n, TxKind::Call(SPINNER), 0, 40_000, Bytes::new()),
                Op::CreateAndDestroy => {
                    let mut initcode = vec![0x73];
                    initcode.extend_from_slice(TARGET.as_slice());
                    initcode.push(0xff);
                    tx(*sender, n, TxKind::Create, 7, 100_000, initcode.into())
                }
                Op::CreateCreator => tx(
                    *sender,
                    n,
                    TxKind::Create,
                    0,
                    200_000,
                    Bytes::from_static(&[0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0xf0, 0x50, 0x00]),
                ),
            }
        })
        .collect()
}

fn check(ops: &[(u64, Op, bool)], executors: &[ParallelExecutor]) {
    let state = state();
    let txs = block(ops);
    // A gas limit that some blocks exceed, so the block gas rule is exercised too.
    let header = header(2_000_000);
    let serial = execute_serial(input(&state, &header, &txs, Mode::Build)).expect("serial");
    // The block as a proposer builds it, validated as a received block is.
    let built: Vec<RecoveredTx> = serial.included.iter().map(|&i| txs[i].clone()).collect();
    let validated = execute_serial(input(&state, &header, &built, Mode::Validate))
        .expect("a built block is valid");
    assert_eq!(validated.diff, serial.diff);
    // The random block itself, received: refused (or not) alike.
    let received = execute_serial(input(&state, &header, &txs, Mode::Validate));
    for executor in executors {
        let threads = executor.threads();
        let parallel = executor
            .execute(input(&state, &header, &txs, Mode::Build))
            .expect("parallel");
        assert_same(&parallel, &serial, threads);
        let parallel = executor
            .execute(input(&state, &header, &built, Mode::Validate))
            .expect("a built block is valid in parallel");
        assert_same(&parallel, &validated, threads);
        let parallel = executor.execute(input(&state, &header, &txs, Mode::Validate));
        assert_eq!(parallel, received, "{threads} threads: the received block");
    }
}

/// Asserts equality, naming the first difference instead of printing both outcomes.
fn assert_same(parallel: &ExecutionOutcome, serial: &ExecutionOutcome, threads: usize) {
    assert_eq!(
        parallel.included, serial.included,
        "{threads} threads: included"
    );
    assert_eq!(
        parallel.skipped, serial.skipped,
        "{threads} threads: skipped"
    );
    for (i, (p, s)) in parallel.receipts.iter().zip(&serial.receipts).enumerate() {
        assert_eq!(
            p, s,
            "{threads} threads: receipt {i} (tx {})",
            serial.included[i]
        );
    }
    for (address, change) in &serial.diff.accounts {
        assert_eq!(
            parallel.diff.accounts.get(address),
            Some(change),
            "{threads} threads: {address}"
        );
    }
    assert_eq!(parallel, serial, "{threads} threads");
    // The parallel executor hashes receipt leaves ahead while its threads wait, and tells
    // the roots whether the changes it merged wrote slots.
    assert_eq!(
        parallel.roots(B256::ZERO, &SerialLeaves),
        serial.roots(B256::ZERO, &SerialLeaves),
        "{threads} threads: roots"
    );
}

fn executors() -> Vec<ParallelExecutor> {
    [1, 2, 8]
        .into_iter()
        .map(|threads| ParallelExecutor::new(threads).expect("threads"))
        .collect()
}

/// Executors shared by every case: each block starts on the change maps the blocks
/// before it emptied (refused ones included).
fn shared_executors() -> &'static [ParallelExecutor] {
    static EXECUTORS: std::sync::OnceLock<Vec<ParallelExecutor>> = std::sync::OnceLock::new();
    EXECUTORS.get_or_init(executors)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn parallel_equals_serial_on_random_blocks(
        ops in prop::collection::vec((0..SENDERS, op(), prop::bool::weighted(0.03)), 0..120)
    ) {
        check(&ops, shared_executors());
    }
}

#[test]
fn parallel_equals_serial_when_every_tx_touches_one_hot_account() {
    let ops: Vec<_> = (0..200)
        .map(|i| {
            (
                i % SENDERS,
                if i % 3 == 0 { Op::Probe } else { Op::Hot },
                false,
            )
        })
        .collect();
    check(&ops, &executors());
}

#[test]
fn parallel_equals_serial_on_independent_transfers_and_validate_mode_agrees() {
    let ops: Vec<_> = (0..300)
        .map(|i| (i % SENDERS, Op::Transfer { to: i as u8 }, false))
        .collect();
    check(&ops, &executors());
    let txs = block(&ops);
    let header = header(30_000_000);
    let serial = execute_serial(input(&state(), &header, &txs, Mode::Validate)).expect("valid");
    let parallel = executors()[1]
        .execute(input(&state(), &header, &txs, Mode::Validate))
        .expect("valid");
    assert_eq!(parallel, serial);
    assert_eq!(serial.included.len(), 300);
}

#[test]
fn an_executor_that_learned_uneven_chunks_still_equals_serial() {
    // Each block teaches the executor how much of the next its first chunk takes (the
    // speculated chunk is slower per transaction, so more than half): every share it
    // moves through gives the serial result.
    let ops: Vec<_> = (0..300)
        .map(|i| (i % SENDERS, Op::Transfer { to: i as u8 }, false))
        .collect();
    let executor = [ParallelExecutor::new(2).expect("threads")];
    for _ in 0..12 {
        check(&ops, &executor);
    }
}

#[test]
fn a_block_whose_speculator_starts_late_still_equals_serial() {
    // The executor's one pool thread is held busy, so the caller runs on into the second
    // chunk, every transaction of it once the hold outlasts the block, before the
    // speculator cuts what is left.
    let ops: Vec<_> = (0..300)
        .map(|i| (i % SENDERS, Op::Transfer { to: i as u8 }, false))
        .collect();
    let executor = ParallelExecutor::new(2).expect("threads");
    for hold in [Duration::from_micros(200), Duration::from_millis(200)] {
        let (holding, released) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|scope| {
            let (executor, holding, released) = (&executor, &holding, &released);
            scope.spawn(move || {
                executor.join(
                    || {
                        holding.store(true, Ordering::Release);
                        while !released.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                    },
                    || (),
                )
            });
            while !holding.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            scope.spawn(move || {
                std::thread::sleep(hold);
                released.store(true, Ordering::Release);
            });
            check(&ops, std::slice::from_ref(executor));
        });
    }
}

#[test]
fn the_mixed_workload_deploys_reverts_and_is_identical_in_parallel() {
    use stave_sdk::{Targets, TxBuilder, Workload, signed_workload};
    let count = 200;
    let state = stave_exec::MemoryState::from_genesis(&Workload::Mixed.genesis(
        CHAIN_ID,
        count,
        &Targets::default(),
    ));
    let signed = signed_workload(
        Workload::Mixed,
        &TxBuilder::new(CHAIN_ID, 2 * u128::from(BASE_FEE)),
        count as usize,
    )
    .expect("signs");
    let txs: Vec<RecoveredTx> = signed
        .into_iter()
        .enumerate()
        .map(|(i, tx)| RecoveredTx {
            tx,
            sender: stave_primitives::dev::dev_account(i as u64).address,
        })
        .collect();
    let header = header(200_000_000);
    let serial = execute_serial(input(&state, &header, &txs, Mode::Validate)).expect("serial");
    assert_eq!(serial.included.len(), txs.len());
    // Every fifth tx is a deploy, and the one after it reverts.
    assert_eq!(
        serial.diff.codes.len(),
        1,
        "one code, deployed {} times",
        count / 5
    );
    let failed = serial
        .receipts
        .iter()
        .filter(|r| !r.receipt.status.coerce_status())
        .count();
    assert_eq!(failed, count as usize / 5);
    for executor in executors() {
        let parallel = executor
            .execute(input(&state, &header, &txs, Mode::Validate))
            .expect("parallel");
        assert_same(&parallel, &serial, executor.threads());
    }
}

#[test]
fn token_transfers_from_distinct_senders_merge_the_token_storage_of_every_chunk() {
    // Every chunk writes the token's balances (distinct holders, distinct senders), so no
    // chunk conflicts and the token's storage changes of all chunks are merged.
    let ops: Vec<_> = (0..SENDERS)
        .map(|i| {
            let op = Op::Erc20 {
                to: i as u8,
                amount: 1 + i % 50,
            };
            (i, op, false)
        })
        .collect();
    check(&ops, &executors());
    let serial = execute_serial(input(
        &state(),
        &header(30_000_000),
        &block(&ops),
        Mode::Validate,
    ))
    .expect("valid");
    let token = serial.diff.accounts.get(&TOKEN).expect("token written");
    // Each transfer writes the sender's and the recipient's balance slots.
    assert!(
        token.storage.len() > SENDERS as usize,
        "{}",
        token.storage.len()
    );
}

#[test]
fn a_transaction_after_one_left_out_of_its_chunk_sees_the_state_without_it() {
    // On 2 threads the second chunk is sender 5's two transactions. The first does not
    // fit the gas the block has left, so it is left out; its speculation still gave the
    // sender nonce 1, which the second's speculation read. Serially the second has a
    // nonce gap and is left out too.
    // Distinct recipients, so nothing but the sender links the two chunks' reads.
    let to = |byte| TxKind::Call(Address::repeat_byte(byte));
    let txs = vec![
        tx(0, 0, to(0x71), 1, 21_000, Bytes::new()),
        tx(1, 0, to(0x72), 1, 21_000, Bytes::new()),
        tx(5, 0, to(0x73), 1, 30_000, Bytes::new()),
        tx(5, 1, to(0x74), 1, 21_000, Bytes::new()),
    ];
    let header = header(63_000);
    let serial = execute_serial(input(&state(), &header, &txs, Mode::Build)).expect("serial");
    assert_eq!(serial.included, [0, 1]);
    assert!(
        serial.skipped[1].reason.contains("nonce"),
        "{:?}",
        serial.skipped
    );
    for executor in executors() {
        let parallel = executor
            .execute(input(&state(), &header, &txs, Mode::Build))
            .expect("parallel");
        assert_same(&parallel, &serial, executor.threads());
    }
}
