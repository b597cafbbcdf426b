//! Block production from the txpool, and state queries at recent blocks.

use std::sync::Arc;

use stave_node::{BlockProducer, Chain, ChainView, ViewError};
use stave_primitives::{Address, ChainSpec, DEFAULT_BASE_FEE, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_state::{FLUSH_BATCH, KEPT_LAYERS};
use stave_storage::LmdbStore;
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::SenderCache;

const CHAIN_ID: u64 = 1337;

fn transfer(nonce: u64, value: u64) -> Vec<u8> {
    let signer = LocalSigner::from_secret(&dev_account(0).secret).expect("key");
    let tx = TxBuilder::new(CHAIN_ID, 2 * u128::from(DEFAULT_BASE_FEE)).transfer(
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
    let cache = Arc::new(SenderCache::new(1024));
    let chain = Chain::open_with(
        &store,
        &spec,
        2,
        stave_node::Parallelism::Parallel,
        Some(cache.clone()),
    )
    .expect("opens");
    let view = Arc::new(ChainView::new(&chain, spec.clone()));
    let layers = chain.layers();
    let pool = Arc::new(TxPool::new(
        PoolConfig::new(CHAIN_ID, spec.gas_limit()),
        cache,
    ));
    let mut producer = BlockProducer::new(chain, view.clone(), pool.clone(), 100);
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
