//! Block production from the txpool, and state queries at recent blocks.

mod support;

use std::sync::Arc;

use alloy_primitives::B256;
use stave_node::{BlockProducer, ViewError};
use stave_primitives::{Address, ChainSpec, DEFAULT_BASE_FEE, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_state::{FLUSH_BATCH, KEPT_LAYERS};
use stave_storage::LmdbStore;
use stave_txpool::TxPool;
use support::{OpenChain, open_chain};

const CHAIN_ID: u64 = 1337;

fn transfer(nonce: u64, value: u64) -> Vec<u8> {
    transfer_from(0, nonce, value, 2)
}

/// A transfer of `value` wei from dev account `account` paying `fee_times` the base fee.
fn transfer_from(account: u64, nonce: u64, value: u64, fee_times: u128) -> Vec<u8> {
    let signer = LocalSigner::from_secret(&dev_account(account).secret).expect("key");
    let tx = TxBuilder::new(CHAIN_ID, fee_times * u128::from(DEFAULT_BASE_FEE)).transfer(
        nonce,
        Address::repeat_byte(0x42),
        U256::from(value),
    );
    signer.sign_tx(tx).encoded()
}

#[test]
fn produced_blocks_empty_the_pool_and_every_recent_state_stays_queryable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 256 << 20).expect("opens");
    let spec = ChainSpec::dev(CHAIN_ID, 2);
    let OpenChain {
        mut producer,
        view,
        pool,
        layers,
    } = open_chain(&store, &spec);
    let receiver = Address::repeat_byte(0x42);
    let balance_at = |number: Option<u64>| {
        view.with_state(number, |state, _| {
            state
                .account(receiver)
                .expect("reads")
                .map_or(U256::ZERO, |account| account.balance)
        })
    };

    // An empty pool still makes a block: clients wait for "the next block".
    let empty = producer.produce(1).expect("produces");
    assert_eq!(
        (empty.block.number(), empty.block.transactions().len()),
        (1, 0)
    );
    let blocks = (KEPT_LAYERS + FLUSH_BATCH) as u64 + 3;
    for number in 2..=blocks {
        let added = pool.add(
            &[transfer(number - 2, 1)],
            &layers.latest(),
            DEFAULT_BASE_FEE,
        );
        assert!(added[0].is_ok(), "{added:?}");
        let produced = producer.produce(number).expect("produces");
        assert_eq!(produced.block.number(), number);
        assert_eq!(produced.block.transactions().len(), 1);
        assert_eq!(produced.dropped, 0);
        assert_eq!(pool.status().pending, 0);
    }
    // After block n the receiver holds n - 1 wei; that is queryable for at least the
    // last KEPT_LAYERS blocks (down to the flushed one), and before them the error says so.
    assert_eq!(balance_at(None).expect("head"), U256::from(blocks - 1));
    let oldest_kept = layers.flushed();
    assert!(oldest_kept > 0 && oldest_kept <= blocks - KEPT_LAYERS as u64);
    for number in oldest_kept..=blocks {
        assert_eq!(
            balance_at(Some(number)).expect("kept"),
            U256::from(number - 1),
            "block {number}"
        );
    }
    assert!(matches!(
        balance_at(Some(oldest_kept - 1)),
        Err(ViewError::StateNotAvailable(_))
    ));
    assert!(matches!(
        balance_at(Some(blocks + 1)),
        Err(ViewError::UnknownBlock(_))
    ));
}

/// A producer over `store` with its own pool (sender cache shared with its chain).
fn producer_over<'s>(store: &'s LmdbStore, spec: &ChainSpec) -> (BlockProducer<'s>, Arc<TxPool>) {
    let OpenChain { producer, pool, .. } = open_chain(store, spec);
    (producer, pool)
}

#[test]
fn blocks_built_on_uncommitted_parents_commit_to_the_chain_a_plain_import_makes() {
    let spec = ChainSpec::dev(CHAIN_ID, 2);
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let stores: Vec<_> = dirs
        .iter()
        .map(|dir| LmdbStore::open(dir.path(), 256 << 20).expect("opens"))
        .collect();
    let (mut proposer, pool) = producer_over(&stores[0], &spec);
    let (mut validator, _) = producer_over(&stores[1], &spec);
    let (mut follower, _) = producer_over(&stores[2], &spec);
    let genesis_state = stave_exec::MemoryState::from_genesis(&spec);
    let added = pool.add(
        &[transfer(0, 5), transfer(1, 7), transfer(2, 11)],
        &genesis_state,
        DEFAULT_BASE_FEE,
    );
    assert!(added.iter().all(Result::is_ok), "{added:?}");

    // Block 2 is built on block 1 before block 1 commits: the pool skips block 1's
    // transactions, and block 2 executes on block 1's state (nonce 3 is valid only after
    // nonces 0..=2).
    let first = proposer.propose_on(&[], 1).expect("proposes");
    assert_eq!(first.prepared.block.transactions().len(), 3);
    let added = pool.add(&[transfer(3, 13)], &genesis_state, DEFAULT_BASE_FEE);
    assert!(added[0].is_ok(), "{added:?}");
    let second = proposer
        .propose_on(&[&first], 2)
        .expect("proposes on block 1");
    assert_eq!(second.prepared.block.number(), 2);
    assert_eq!(second.prepared.block.transactions().len(), 1);
    // A proposer whose clock is behind block 2's stamp stamps block 2's time, which
    // validators accept, rather than an earlier one they would refuse.
    let behind = proposer
        .propose_on(&[&first, &second], 1)
        .expect("proposes on block 2");
    assert_eq!(behind.prepared.block.header().timestamp, 2);

    // Another node validates both before either is final, then commits them.
    let encode = |block: &stave_node::SpeculativeBlock| {
        stave_codec::encode_block_parts(block.prepared.block.header(), &block.prepared.body)
    };
    let (bytes1, bytes2) = (encode(&first), encode(&second));
    let checked1 = validator
        .validate_on(&[], bytes1.as_slice(), 2)
        .expect("block 1 valid");
    // Block 2 (timestamp 2) from a node whose clock allows at most 1 is refused.
    assert!(matches!(
        validator.validate_on(&[&checked1], bytes2.as_slice(), 1),
        Err(stave_node::ImportError::BadTimestamp { .. })
    ));
    let checked2 = validator
        .validate_on(&[&checked1], bytes2.as_slice(), 2)
        .expect("block 2 valid on block 1");
    // A block claiming another state root is refused.
    let mut forged = second.prepared.block.header().clone();
    forged.state_root = B256::repeat_byte(1);
    let forged = stave_codec::encode_block_parts(&forged, &second.prepared.body);
    assert!(matches!(
        validator.validate_on(&[&checked1], forged.as_slice(), 2),
        Err(stave_node::ImportError::HeaderMismatch {
            field: "state_root",
            ..
        })
    ));
    validator.commit_final(checked1).expect("commits 1");
    validator.commit_final(checked2).expect("commits 2");
    proposer.commit_final(first).expect("commits 1");
    proposer.commit_final(second).expect("commits 2");
    assert_eq!(pool.status().pending, 0);

    // A plain import of the same bytes ends at the same head.
    let mut followed = Vec::new();
    follower
        .follow_stream([bytes1.as_slice(), bytes2.as_slice()], |produced| {
            followed.push(produced.block.number());
        })
        .expect("imports 1 and 2");
    assert_eq!(followed, [1, 2]);
    let heads: Vec<_> = [&proposer, &validator, &follower]
        .iter()
        .map(|producer| producer.head().expect("head"))
        .collect();
    assert_eq!(heads[0].0, 2);
    assert!(heads.iter().all(|head| *head == heads[0]), "{heads:?}");
    let roots: Vec<_> = stores
        .iter()
        .map(|store| {
            stave_storage::read::header(store, 2)
                .expect("reads")
                .expect("stored")
                .state_root
        })
        .collect();
    assert!(roots.iter().all(|root| *root == roots[0]));
}

/// Fills `pool` (of a 2-account dev chain) with a full block of transactions that fail at
/// execution, paying the most, and 3 good ones. Account 5 has nothing on the chain, but
/// the pool admitted its transactions against a state that funds it (as a pool whose view
/// of a balance is stale would).
fn add_failing_and_good(pool: &TxPool) {
    let funded_elsewhere = stave_exec::MemoryState::from_genesis(&ChainSpec::dev(CHAIN_ID, 6));
    let failing: Vec<_> = (0..100)
        .map(|nonce| transfer_from(5, nonce, 1, 4))
        .collect();
    let added = pool.add(&failing, &funded_elsewhere, DEFAULT_BASE_FEE);
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    let good: Vec<_> = (0..3).map(|nonce| transfer_from(1, nonce, 1, 2)).collect();
    let added = pool.add(&good, &funded_elsewhere, DEFAULT_BASE_FEE);
    assert!(added.iter().all(Result::is_ok), "{added:?}");
}

#[test]
fn a_block_is_filled_from_the_rest_when_selected_transactions_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 256 << 20).expect("opens");
    let spec = ChainSpec::dev(CHAIN_ID, 2);
    let (mut producer, pool) = producer_over(&store, &spec);
    // The failing transactions are selected first and fail at execution.
    add_failing_and_good(&pool);

    let produced = producer.produce(1).expect("produces");
    // The block holds the rest, not nothing; only account 5's first transaction failed on
    // its own and left the pool, its later ones wait behind the gap.
    assert_eq!(produced.block.transactions().len(), 3);
    assert_eq!(produced.dropped, 1);
    assert_eq!(
        pool.status(),
        stave_txpool::PoolStatus {
            pending: 0,
            queued: 99
        }
    );
    assert_eq!(
        pool.dropped()[stave_txpool::DropReason::FailedExecution.index()],
        ("failed_execution", 1)
    );
    // The next block has nothing executable: empty, and nothing more fails.
    let produced = producer.produce(2).expect("produces");
    assert_eq!(
        (produced.block.transactions().len(), produced.dropped),
        (0, 0)
    );
}

#[test]
fn one_fill_round_builds_a_block_once_without_a_refill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 256 << 20).expect("opens");
    let spec = ChainSpec::dev(CHAIN_ID, 2);
    let (producer, pool) = producer_over(&store, &spec);
    let mut producer = producer.with_fill_rounds(1);
    add_failing_and_good(&pool);
    // Built once: the failing selection leaves the block empty, and is not refilled.
    let produced = producer.produce(1).expect("produces");
    assert_eq!(
        (produced.block.transactions().len(), produced.dropped),
        (0, 1)
    );
    // The good ones wait for the next block.
    let produced = producer.produce(2).expect("produces");
    assert_eq!(produced.block.transactions().len(), 3);
}
