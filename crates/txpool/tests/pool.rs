//! Admission, replacement, limits, selection and block updates of the txpool.

use std::{sync::Arc, time::Duration};

use alloy_primitives::{Address, U256};
use stave_primitives::{
    AccountDiff, AccountState, ChainSpec, DEFAULT_BASE_FEE, DEV_GAS_LIMIT, MemoryState,
    RecoveredTx, SignedTx, StateDiff, dev::dev_account,
};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_txpool::{PoolConfig, PoolError, PoolStatus, TxPool};
use stave_verify::SenderCache;

const CHAIN: u64 = 1337;
const FEE: u128 = 2 * DEFAULT_BASE_FEE as u128;

fn signer(i: u64) -> LocalSigner {
    LocalSigner::from_secret(&dev_account(i).secret).expect("dev key")
}

fn transfer(from: u64, nonce: u64, fee: u128, tip: u128) -> Vec<u8> {
    transfer_to(from, nonce, fee, tip, Address::repeat_byte(0xee))
}

fn transfer_to(from: u64, nonce: u64, fee: u128, tip: u128, to: Address) -> Vec<u8> {
    let builder = TxBuilder::eip1559(CHAIN, fee, tip);
    let tx = builder.transfer(nonce, to, U256::from(1));
    signer(from).sign_tx(tx).encoded()
}

/// What one of [`transfer`]'s transactions may cost at fee cap `fee`.
fn cost(fee: u128) -> U256 {
    U256::from(21_000 * fee + 1)
}

fn setup(config: impl FnOnce(&mut PoolConfig)) -> (TxPool, MemoryState, Arc<SenderCache>) {
    setup_funded(4, config)
}

/// A pool over the dev genesis with `accounts` funded accounts.
fn setup_funded(
    accounts: u64,
    config: impl FnOnce(&mut PoolConfig),
) -> (TxPool, MemoryState, Arc<SenderCache>) {
    let mut pool_config = PoolConfig::new(CHAIN, DEV_GAS_LIMIT);
    config(&mut pool_config);
    let cache = Arc::new(SenderCache::new(1024));
    let state = MemoryState::from_genesis(&ChainSpec::dev(CHAIN, accounts));
    (TxPool::new(pool_config, cache.clone()), state, cache)
}

/// Sets account `i`'s nonce and balance, as a block would.
fn set_account(state: &mut MemoryState, i: u64, nonce: u64, balance: U256) {
    let mut diff = StateDiff::default();
    diff.accounts.insert(
        dev_account(i).address,
        AccountDiff {
            info: Some(AccountState {
                nonce,
                balance,
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            }),
            ..AccountDiff::default()
        },
    );
    state.apply(&diff);
}

/// How many transactions `pool` dropped for the reason labelled `label`.
fn dropped(pool: &TxPool, label: &str) -> u64 {
    let counts = pool.dropped();
    counts
        .iter()
        .find(|(name, _)| *name == label)
        .unwrap_or_else(|| panic!("no reason {label} in {counts:?}"))
        .1
}

/// The nonces of `sender`'s pending and queued transactions.
fn nonces(pool: &TxPool, sender: u64) -> (Vec<u64>, Vec<u64>) {
    let content = pool.content();
    content
        .get(&dev_account(sender).address)
        .map(|content| {
            let of = |txs: &[Arc<stave_txpool::PoolTx>]| txs.iter().map(|tx| tx.nonce).collect();
            (of(&content.pending), of(&content.queued))
        })
        .unwrap_or_default()
}

/// One submission, as JSON-RPC makes it ([`TxPool::add_one`]: recovered on this thread).
fn add_one(
    pool: &TxPool,
    state: &MemoryState,
    bytes: Vec<u8>,
) -> Result<alloy_primitives::B256, PoolError> {
    pool.add_one(&bytes, state, DEFAULT_BASE_FEE)
}

#[test]
fn admission_fills_the_sender_cache_and_counts_pending_and_queued() {
    let (pool, state, cache) = setup(|_| {});
    let hash = add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    assert_eq!(cache.get(&hash), Some(dev_account(0).address));
    add_one(&pool, &state, transfer(0, 1, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(0, 3, FEE, 1)).unwrap();
    assert_eq!(
        pool.status(),
        PoolStatus {
            pending: 2,
            queued: 1
        }
    );
    assert_eq!(pool.pending_nonce(dev_account(0).address), Some(2));
    assert_eq!(pool.pending_nonce(dev_account(1).address), None);
    let content = pool.content();
    let mine = &content[&dev_account(0).address];
    assert_eq!(
        mine.pending.iter().map(|tx| tx.nonce).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(
        mine.queued.iter().map(|tx| tx.nonce).collect::<Vec<_>>(),
        [3]
    );
    // Filling the gap makes all three executable.
    add_one(&pool, &state, transfer(0, 2, FEE, 1)).unwrap();
    assert_eq!(
        pool.status(),
        PoolStatus {
            pending: 4,
            queued: 0
        }
    );
    assert_eq!(pool.len(), 4);
    assert!(!pool.is_empty());
}

#[test]
fn encoded_gives_every_held_tx_as_sent_each_senders_in_nonce_order() {
    let (pool, state, _) = setup(|_| {});
    // Sender 0 with a nonce gap (2 queued behind it), sender 1 with one.
    let sent = [
        transfer(0, 2, FEE, 1),
        transfer(1, 0, FEE, 1),
        transfer(0, 0, FEE, 1),
    ];
    for bytes in &sent {
        add_one(&pool, &state, bytes.clone()).unwrap();
    }
    let zero = vec![sent[2].clone(), sent[0].clone()];
    let one = vec![sent[1].clone()];
    // The senders' order is the pool's own; within each, nonce order.
    let either = [[zero.clone(), one.clone()].concat(), [one, zero].concat()];
    let encoded = pool.encoded();
    assert!(
        either.contains(&encoded),
        "{} txs in an unexpected order",
        encoded.len()
    );
}

#[test]
fn encoded_before_gives_only_what_was_admitted_before_a_position() {
    let (pool, state, _) = setup(|_| {});
    let early = transfer(0, 0, FEE, 1);
    add_one(&pool, &state, early.clone()).unwrap();
    let position = pool.admission_position();
    let late = transfer(1, 0, FEE, 1);
    add_one(&pool, &state, late.clone()).unwrap();
    assert_eq!(pool.encoded_before(position, 10), vec![early.clone()]);
    assert_eq!(pool.encoded_before(pool.admission_position(), 10).len(), 2);
    assert_eq!(pool.encoded_before(pool.admission_position(), 1).len(), 1);
    assert!(pool.encoded_before(0, 10).is_empty());
}

#[test]
fn refusals_carry_the_messages_clients_match_on() {
    let (pool, mut state, _) = setup(|config| config.max_nonce_gap = 4);
    let bytes = transfer(0, 0, FEE, 1);
    add_one(&pool, &state, bytes.clone()).unwrap();
    assert_eq!(add_one(&pool, &state, bytes), Err(PoolError::AlreadyKnown));
    let same_nonce = add_one(&pool, &state, transfer(0, 0, FEE + 1, 1)).unwrap_err();
    assert_eq!(
        same_nonce.to_string(),
        "replacement transaction underpriced"
    );

    // An unfunded sender.
    let error = add_one(&pool, &state, transfer(99, 0, FEE, 1)).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("insufficient funds for gas * price + value"),
        "{error}"
    );

    // Another chain.
    let other = TxBuilder::new(CHAIN + 1, FEE).transfer(0, Address::ZERO, U256::ZERO);
    let error = add_one(&pool, &state, signer(1).sign_tx(other).encoded()).unwrap_err();
    assert!(error.to_string().starts_with("invalid chain id"), "{error}");

    // Fee cap below the base fee.
    let error = add_one(&pool, &state, transfer(1, 0, 1, 1)).unwrap_err();
    assert!(matches!(error, PoolError::FeeCapTooLow { .. }), "{error}");

    // Garbage.
    let error = add_one(&pool, &state, vec![0xde, 0xad]).unwrap_err();
    assert!(matches!(error, PoolError::Invalid(_)), "{error}");

    // Too far ahead.
    let error = add_one(&pool, &state, transfer(1, 5, FEE, 1)).unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::NonceTooHigh {
                next: 0,
                nonce: 5,
                limit: 4
            }
        ),
        "{error}"
    );

    // A stale nonce once the account moved on.
    set_account(&mut state, 2, 7, U256::from(10).pow(U256::from(21)));
    let error = add_one(&pool, &state, transfer(2, 6, FEE, 1)).unwrap_err();
    assert_eq!(error.to_string(), "nonce too low: next nonce 7, tx nonce 6");
}

#[test]
fn a_replacement_paying_ten_percent_more_takes_the_nonce() {
    let (pool, state, _) = setup(|_| {});
    let old = add_one(&pool, &state, transfer(0, 0, FEE, 10)).unwrap();
    let new = add_one(&pool, &state, transfer(0, 0, FEE * 11 / 10, 11)).unwrap();
    assert!(pool.get(&old).is_none());
    assert_eq!(pool.get(&new).unwrap().nonce, 0);
    assert_eq!(
        pool.status(),
        PoolStatus {
            pending: 1,
            queued: 0
        }
    );
}

#[test]
fn a_full_pool_evicts_the_cheapest_or_refuses() {
    let (pool, state, _) = setup(|config| config.max_txs = 2);
    let cheap = add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(1, 0, FEE, 5)).unwrap();
    // Paying no more than the cheapest: refused.
    assert_eq!(
        add_one(&pool, &state, transfer(2, 0, FEE, 1)),
        Err(PoolError::PoolFull)
    );
    // Paying more: the cheapest goes.
    add_one(&pool, &state, transfer(2, 0, FEE, 3)).unwrap();
    assert!(pool.get(&cheap).is_none());
    assert_eq!(pool.status().pending, 2);
}

#[test]
fn the_per_sender_limit_holds() {
    let (pool, state, _) = setup(|config| config.max_per_sender = 2);
    add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(0, 1, FEE, 1)).unwrap();
    let error = add_one(&pool, &state, transfer(0, 2, FEE, 1)).unwrap_err();
    assert_eq!(error, PoolError::SenderFull { limit: 2 });
}

#[test]
fn selection_is_by_tip_then_arrival_in_nonce_order() {
    let (pool, state, _) = setup(|_| {});
    // Sender 0: low tip; sender 1: high tip on nonce 0, then a higher one on nonce 1;
    // sender 2: same tip as sender 0 but later.
    add_one(&pool, &state, transfer(0, 0, FEE, 2)).unwrap();
    add_one(&pool, &state, transfer(1, 1, FEE, 9)).unwrap();
    add_one(&pool, &state, transfer(1, 0, FEE, 5)).unwrap();
    add_one(&pool, &state, transfer(2, 0, FEE, 2)).unwrap();
    // Sender 3's tx waits behind a gap and must not be selected.
    add_one(&pool, &state, transfer(3, 1, FEE, 100)).unwrap();
    let picked: Vec<_> = pool
        .select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 100)
        .iter()
        .map(|tx| {
            (
                tx.sender,
                alloy_consensus::Transaction::nonce(tx.tx.envelope()),
            )
        })
        .collect();
    let a = |i| dev_account(i).address;
    assert_eq!(picked, [(a(1), 0), (a(1), 1), (a(0), 0), (a(2), 0)]);
    // Limits: by count and by gas.
    assert_eq!(pool.select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 2).len(), 2);
    assert_eq!(pool.select(DEFAULT_BASE_FEE, 21_000 * 3, 100).len(), 3);
}

#[test]
fn a_committed_block_removes_its_txs_and_the_nonces_it_used() {
    let (pool, mut state, _) = setup(|config| config.queued_lifetime = Duration::ZERO);
    add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    let second = add_one(&pool, &state, transfer(0, 1, FEE, 1)).unwrap();
    let included = pool.select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 1);
    assert_eq!(included.len(), 1);
    // The block also used nonce 1 (say, through another node's tx).
    let mut diff = StateDiff::default();
    let mut account = stave_primitives::StateReader::account(&state, dev_account(0).address)
        .unwrap()
        .unwrap();
    account.nonce = 2;
    diff.accounts.insert(
        dev_account(0).address,
        AccountDiff {
            info: Some(account),
            ..AccountDiff::default()
        },
    );
    state.apply(&diff);
    // A queued tx of another sender expires (lifetime zero).
    add_one(&pool, &state, transfer(1, 3, FEE, 1)).unwrap();
    pool.on_block(&included, &state).unwrap();
    assert!(pool.get(&second).is_none());
    assert_eq!(pool.status(), PoolStatus::default());
}

#[test]
fn pending_filters_read_admissions_from_their_position_and_the_log_is_bounded() {
    let (pool, state, _) = setup(|config| config.admission_log = 2);
    let start = pool.admission_position();
    let first = add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    // Refused transactions are not admissions.
    add_one(&pool, &state, transfer(0, 0, FEE, 1)).expect_err("already known");
    let (hashes, next) = pool.admitted_since(start);
    assert_eq!(hashes, [first]);
    assert_eq!(pool.admitted_since(next), (vec![], next));
    let second = add_one(&pool, &state, transfer(1, 0, FEE, 1)).unwrap();
    let third = add_one(&pool, &state, transfer(2, 0, FEE, 1)).unwrap();
    assert_eq!(pool.admitted_since(next).0, [second, third]);
    // Only the last two are kept: a filter that waited since the start lost the first.
    let (hashes, end) = pool.admitted_since(start);
    assert_eq!(hashes, [second, third]);
    assert_eq!(end, pool.admission_position());
}

#[test]
fn a_senders_pending_transactions_must_be_affordable_together() {
    let (pool, mut state, _) = setup(|_| {});
    let one = cost(FEE);
    let balance = one * U256::from(5) / U256::from(2);
    set_account(&mut state, 3, 0, balance);
    add_one(&pool, &state, transfer(3, 0, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(3, 1, FEE, 1)).unwrap();
    // Each alone is affordable; a third is not, with the two pending: go-ethereum's text.
    let error = add_one(&pool, &state, transfer(3, 2, FEE, 1)).unwrap_err();
    let queued = one * U256::from(2);
    assert_eq!(
        error.to_string(),
        format!(
            "insufficient funds for gas * price + value: balance {balance}, queued cost {queued}, tx cost {one}, overshot {}",
            queued + one - balance
        )
    );
    // Behind a gap too: what waits there is paid from the same balance.
    let error = add_one(&pool, &state, transfer(3, 4, FEE, 1)).unwrap_err();
    assert!(
        matches!(error, PoolError::InsufficientFundsQueued { .. }),
        "{error}"
    );
    // A replacement may not push the run over the balance either.
    let bumped = cost(2 * FEE);
    let error = add_one(&pool, &state, transfer(3, 1, 2 * FEE, 2)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "insufficient funds for gas * price + value: balance {balance}, queued cost {queued}, tx bumped {}, overshot {}",
            bumped - one,
            queued + bumped - one - balance
        )
    );
    // Alone it costs more than the balance: the first check, with its own text.
    let error = add_one(&pool, &state, transfer(3, 2, 3 * FEE, 1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "insufficient funds for gas * price + value: balance {balance}, tx cost {}, overshot {}",
            cost(3 * FEE),
            cost(3 * FEE) - balance
        )
    );
    assert_eq!(nonces(&pool, 3), (vec![0, 1], vec![]));
    assert_eq!(pool.select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 100).len(), 2);
    pool.check_invariants().unwrap();
}

#[test]
fn a_balance_drop_demotes_the_unaffordable_tail_and_drops_the_unpayable() {
    let (pool, mut state, _) = setup(|_| {});
    let one = cost(FEE);
    for nonce in 0..3 {
        add_one(&pool, &state, transfer(3, nonce, FEE, 1)).unwrap();
    }
    let included = pool.select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 1);
    assert_eq!(included.len(), 1);
    // The block took nonce 0, and other spends left enough for one more transaction.
    set_account(&mut state, 3, 1, one + one / U256::from(2));
    pool.on_block(&included, &state).unwrap();
    assert_eq!(nonces(&pool, 3), (vec![1], vec![2]));
    assert_eq!(
        pool.status(),
        PoolStatus {
            pending: 1,
            queued: 1
        }
    );
    let selected = pool.select(DEFAULT_BASE_FEE, DEV_GAS_LIMIT, 100);
    assert_eq!(selected.len(), 1);
    assert_eq!(pool.pending_nonce(dev_account(3).address), Some(2));
    assert_eq!(dropped(&pool, "nonce_used"), 0);
    pool.check_invariants().unwrap();

    // A block that sends to the account is a block that touches it: its balance is read
    // again, and what alone costs more than what is left goes.
    set_account(&mut state, 3, 1, one / U256::from(2));
    let to_three = transfer_to(0, 0, FEE, 1, dev_account(3).address);
    let block = [RecoveredTx {
        tx: SignedTx::decode(&to_three).unwrap(),
        sender: dev_account(0).address,
    }];
    pool.on_block(&block, &state).unwrap();
    assert_eq!(nonces(&pool, 3), (vec![], vec![]));
    assert_eq!(pool.pending_nonce(dev_account(3).address), None);
    assert_eq!(dropped(&pool, "unaffordable"), 2);
    assert!(pool.is_empty());
    pool.check_invariants().unwrap();
}

#[test]
fn a_transaction_behind_a_gap_never_evicts_an_executable_one() {
    let (pool, state, _) = setup(|config| config.max_txs = 3);
    let a0 = add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    let b0 = add_one(&pool, &state, transfer(1, 0, FEE, 1)).unwrap();
    let c3 = add_one(&pool, &state, transfer(2, 3, FEE, 50)).unwrap();
    // Queued, paying less than the queued one: refused, though pending ones pay less.
    assert_eq!(
        add_one(&pool, &state, transfer(3, 5, FEE, 10)),
        Err(PoolError::PoolFull)
    );
    // Executable: the queued one goes first, whatever it pays.
    let d0 = add_one(&pool, &state, transfer(3, 0, FEE, 1)).unwrap();
    assert!(pool.get(&c3).is_none());
    assert_eq!(dropped(&pool, "evicted"), 1);
    // All pending now: a queued newcomer paying far more still cannot take a slot.
    let error = add_one(&pool, &state, transfer(2, 3, FEE, 100)).unwrap_err();
    assert_eq!(error, PoolError::FutureReplacePending);
    assert_eq!(
        error.to_string(),
        "future transaction tries to replace pending"
    );
    // An executable newcomer paying more takes the cheapest last pending one (the latest
    // of equal tips).
    add_one(&pool, &state, transfer(2, 0, FEE, 5)).unwrap();
    assert!(pool.get(&d0).is_none());
    assert!(pool.get(&a0).is_some() && pool.get(&b0).is_some());
    assert_eq!(dropped(&pool, "evicted"), 2);
    assert_eq!(pool.status().pending, 3);
    pool.check_invariants().unwrap();
}

/// Fills a pool of `senders + 1` funded accounts with one transaction from each of the
/// first `senders` (the first pays the least), then has the last account add two: the
/// first evicts the cheapest; the second finds its own sender's the cheapest and takes the
/// next. Returns how many index entries each eviction looked at.
fn eviction_probes(senders: u64) -> (usize, usize) {
    let (pool, state, _) = setup_funded(senders + 1, |config| {
        config.max_txs = senders as usize;
    });
    let tip = |i: u64| if i == 0 { 2 } else { 10 + i as u128 % 7 };
    let raw: Vec<_> = (0..senders).map(|i| transfer(i, 0, FEE, tip(i))).collect();
    let added = pool.add(&raw, &state, DEFAULT_BASE_FEE);
    assert!(added.iter().all(Result::is_ok));
    let cheapest = added[0].clone().expect("admitted");
    add_one(&pool, &state, transfer(senders, 0, FEE, 5)).expect("evicts the cheapest");
    assert!(pool.get(&cheapest).is_none());
    let first = pool.last_eviction_probes();
    add_one(&pool, &state, transfer(senders, 1, FEE, 12)).expect("evicts the next");
    let second = pool.last_eviction_probes();
    // The one taken paid 10 (the lowest left); the newcomer's nonce 0 stays.
    assert_eq!(nonces(&pool, senders).0, [0, 1]);
    assert_eq!(pool.len(), senders as usize);
    assert_eq!(dropped(&pool, "evicted"), 2);
    pool.check_invariants().expect("consistent");
    (first, second)
}

#[test]
fn eviction_looks_at_the_same_few_entries_however_many_senders_there_are() {
    assert_eq!(eviction_probes(8), (1, 2));
    assert_eq!(eviction_probes(600), (1, 2));
}

#[test]
fn every_drop_is_counted_by_reason() {
    let (pool, mut state, _) = setup(|config| config.queued_lifetime = Duration::ZERO);
    assert_eq!(
        pool.dropped().map(|(label, _)| label),
        stave_txpool::DropReason::LABELS
    );
    assert!(pool.dropped().iter().all(|(_, count)| *count == 0));
    add_one(&pool, &state, transfer(0, 0, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(0, 0, 2 * FEE, 2)).unwrap();
    let failed = add_one(&pool, &state, transfer(1, 0, FEE, 1)).unwrap();
    pool.discard(&[failed], stave_txpool::DropReason::FailedExecution);
    add_one(&pool, &state, transfer(2, 0, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(2, 1, FEE, 1)).unwrap();
    add_one(&pool, &state, transfer(3, 2, FEE, 1)).unwrap();
    // Another node's block used account 2's nonces 0 and 1.
    set_account(&mut state, 2, 2, U256::from(10).pow(U256::from(21)));
    let other = transfer(2, 0, 3 * FEE, 3);
    let block = [RecoveredTx {
        tx: SignedTx::decode(&other).unwrap(),
        sender: dev_account(2).address,
    }];
    pool.on_block(&block, &state).unwrap();
    let counts: Vec<u64> = pool.dropped().iter().map(|(_, count)| *count).collect();
    // replaced, evicted, expired (account 3's queued tx), nonce_used, failed_execution,
    // unaffordable, reverted.
    assert_eq!(counts, [1, 0, 1, 2, 1, 0, 0]);
    assert_eq!(pool.len(), 1);
    pool.check_invariants().unwrap();
    // A dev chain going back to a snapshot empties the pool; its senders start over.
    pool.clear(stave_txpool::DropReason::Reverted);
    assert_eq!(pool.dropped()[6], ("reverted", 1));
    assert!(pool.is_empty());
    pool.check_invariants().unwrap();
    add_one(&pool, &state, transfer(0, 0, 3 * FEE, 1)).expect("admitted again");
}
