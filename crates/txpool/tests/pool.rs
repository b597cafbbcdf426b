//! Admission, replacement, limits, selection and block updates of the txpool.

use std::{sync::Arc, time::Duration};

use alloy_primitives::{Address, U256};
use stave_primitives::{
    AccountDiff, AccountState, ChainSpec, DEFAULT_BASE_FEE, DEV_GAS_LIMIT, MemoryState, StateDiff,
    dev::dev_account,
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
    let builder = TxBuilder::eip1559(CHAIN, fee, tip);
    let tx = builder.transfer(nonce, Address::repeat_byte(0xee), U256::from(1));
    signer(from).sign_tx(tx).encoded()
}

fn setup(config: impl FnOnce(&mut PoolConfig)) -> (TxPool, MemoryState, Arc<SenderCache>) {
    let mut pool_config = PoolConfig::new(CHAIN, DEV_GAS_LIMIT);
    config(&mut pool_config);
    let cache = Arc::new(SenderCache::new(1024));
    let state = MemoryState::from_genesis(&ChainSpec::dev(CHAIN, 4));
    (TxPool::new(pool_config, cache.clone()), state, cache)
}

fn add_one(
    pool: &TxPool,
    state: &MemoryState,
    bytes: Vec<u8>,
) -> Result<alloy_primitives::B256, PoolError> {
    pool.add(&[bytes], state, DEFAULT_BASE_FEE).remove(0)
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
    let mut diff = StateDiff::default();
    diff.accounts.insert(
        dev_account(2).address,
        AccountDiff {
            info: Some(AccountState {
                nonce: 7,
                balance: U256::from(10).pow(U256::from(21)),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            }),
            ..AccountDiff::default()
        },
    );
    state.apply(&diff);
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
