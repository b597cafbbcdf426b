//! A chain opened over a store with the pool and producer that extend it, as the node's
//! tests open it; `fuzz/rpc_checks.rs` (and through it the RPC tests) includes this file
//! by path.

use std::sync::Arc;

use stave_node::{BlockProducer, Chain, ChainView, Parallelism};
use stave_primitives::ChainSpec;
use stave_state::StateLayers;
use stave_storage::LmdbStore;
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::SenderCache;

/// A chain's producer, with the view and the pool it shares and the chain's state layers.
pub struct OpenChain<'s> {
    /// What makes the chain's blocks.
    pub producer: BlockProducer<'s>,
    /// Its blocks and state.
    pub view: Arc<ChainView<'s>>,
    /// Its txpool.
    pub pool: Arc<TxPool>,
    /// Its state layers (the latest is what the pool checks against).
    pub layers: Arc<StateLayers<'s>>,
}

/// Opens `spec`'s chain over `store` on 2 threads, its sender cache filled by its pool,
/// with a producer of at most 100 transactions per block.
pub fn open_chain<'s>(store: &'s LmdbStore, spec: &ChainSpec) -> OpenChain<'s> {
    let cache = Arc::new(SenderCache::new(1024));
    let chain = Chain::open_with(store, spec, 2, Parallelism::Parallel, Some(cache.clone()))
        .expect("opens");
    let view = Arc::new(ChainView::new(&chain, spec.clone()));
    let layers = chain.layers();
    let pool = Arc::new(TxPool::new(
        PoolConfig::new(spec.chain_id(), spec.gas_limit()),
        cache,
    ));
    let producer = BlockProducer::new(chain, view.clone(), pool.clone(), 100);
    OpenChain {
        producer,
        view,
        pool,
        layers,
    }
}
