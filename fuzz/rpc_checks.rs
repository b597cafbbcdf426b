//! The property the `rpc_params` fuzz target checks, shared with
//! `crates/rpc/tests/fuzz_corpus.rs`, which replays the checked-in corpus under `cargo
//! test`: arbitrary bytes, as a whole JSON-RPC request body or as the parameters of any
//! method, get a JSON-RPC answer (a result or an error), never a panic, whether the method
//! runs on the server's runtime or on its heavy-method workers.

use std::{
    path::Path,
    sync::{Arc, OnceLock},
};

use jsonrpsee::RpcModule;
use serde_json::{Value, json};
use stave_node::{BlockProducer, ChainView};
use stave_primitives::{Address, DEFAULT_BASE_FEE, SignedTx, U256, dev::dev_account};
use stave_rpc::{NodeContext, RpcConfig};
use stave_sdk::{LocalSigner, TxBuilder, workload_genesis};
use stave_state::StateLayers;
use stave_storage::LmdbStore;
use stave_txpool::TxPool;

// The chain opener the node's tests use.
#[path = "../crates/node/tests/support/mod.rs"]
mod node_support;

use node_support::{OpenChain, open_chain};

const CHAIN_ID: u64 = 1337;
/// Blocks the chain under test holds, each with one token transfer (one log).
const BLOCKS: u64 = 3;

/// The methods over a small chain, and the runtime their async parts run on.
struct Harness {
    module: RpcModule<()>,
    names: Vec<&'static str>,
    runtime: tokio::runtime::Runtime,
}

/// A chain in a fresh data dir whose genesis funds two dev accounts and holds the token
/// at [`TOKEN`], with the pool and producer that extend it (shared with
/// `crates/rpc/tests/rpc.rs`).
pub struct TokenChain {
    /// Its blocks and state.
    pub view: Arc<ChainView<'static>>,
    /// Its txpool.
    pub pool: Arc<TxPool>,
    /// What makes its blocks.
    pub producer: BlockProducer<'static>,
    /// Its state layers (the latest is what the pool checks against).
    pub layers: Arc<StateLayers<'static>>,
    /// Its store, leaked for `'static`.
    pub store: &'static LmdbStore,
}

/// Where the token's contract is.
pub const TOKEN: Address = Address::repeat_byte(0x70);

impl TokenChain {
    /// Opens the chain in `dir`, whose map may grow to `map_size` bytes.
    pub fn open(dir: &Path, map_size: usize) -> Self {
        let store: &'static LmdbStore =
            Box::leak(Box::new(LmdbStore::open(dir, map_size).expect("opens")));
        let spec = workload_genesis(CHAIN_ID, 2, Some(TOKEN));
        let OpenChain {
            producer,
            view,
            pool,
            layers,
        } = open_chain(store, &spec);
        Self {
            view,
            pool,
            producer,
            layers,
            store,
        }
    }

    /// Makes block `nonce + 1` holding one token transfer of dev account 0 (one log).
    pub fn transfer_block(&mut self, nonce: u64) {
        let tx = token_transfer(nonce);
        let added = self
            .pool
            .add(&[tx.encoded()], &self.layers.latest(), DEFAULT_BASE_FEE);
        assert!(added[0].is_ok(), "{added:?}");
        let produced = self.producer.produce(nonce + 1).expect("produces");
        assert_eq!(produced.block.transactions().len(), 1);
    }
}

/// Dev account 0's transfer of 1 token to dev account 1, at `nonce`.
pub fn token_transfer(nonce: u64) -> SignedTx {
    let sender = LocalSigner::from_secret(&dev_account(0).secret).expect("key");
    let builder = TxBuilder::new(CHAIN_ID, 2 * u128::from(DEFAULT_BASE_FEE));
    sender.sign_tx(builder.erc20_transfer(nonce, TOKEN, dev_account(1).address, U256::from(1)))
}

/// Built once per process: a chain in a temporary data dir (kept until the process ends).
fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().expect("tempdir")));
        let mut chain = TokenChain::open(dir.path(), 64 << 20);
        for nonce in 0..BLOCKS {
            chain.transfer_block(nonce);
        }
        let (heads, _) = tokio::sync::broadcast::channel(4);
        let config = RpcConfig {
            // Small limits, so the fuzzer reaches them and loops end fast.
            gas_cap: 1_000_000,
            evm_timeout: std::time::Duration::from_millis(200),
            max_log_blocks: 2,
            max_logs: 2,
            max_filters: 8,
            max_filter_addresses: 4,
            max_filter_topics: 4,
            fee_history_max_percentiles: 8,
            simulate_max_blocks: 8,
            simulate_max_calls: 16,
            max_response_bytes: 64 * 1024,
            worker_threads: 1,
            worker_queue: 4,
            ..RpcConfig::default()
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let module = {
            let _entered = runtime.enter();
            stave_rpc::methods(NodeContext {
                view: chain.view,
                pool: chain.pool,
                heads,
                admitted: None,
                sync: None,
                peer_count: None,
                dev: None,
                config,
            })
            .expect("methods")
        };
        let mut names: Vec<_> = module.method_names().collect();
        names.sort_unstable();
        Harness {
            module,
            names,
            runtime,
        }
    })
}

/// Sends `request` to the methods; the answer must be a JSON-RPC result or error that no
/// worker panicked to give.
fn answer(harness: &Harness, request: &str) {
    let answered = harness
        .runtime
        .block_on(harness.module.raw_json_request(request, 4));
    // Bytes that are not a JSON-RPC request at all are refused before any method runs.
    let Ok((response, _subscription)) = answered else {
        return;
    };
    let response: Value = serde_json::from_str(response.get()).expect("the answer is JSON");
    assert!(
        response.get("result").is_some() || response.get("error").is_some(),
        "{response}"
    );
    assert!(
        !response.to_string().contains("failed on its worker"),
        "a method panicked: {request} -> {response}"
    );
}

/// `data` as a whole request body, then its first byte choosing a method and the rest
/// as that method's parameters (JSON if it parses, else one string).
pub fn rpc_params(data: &[u8]) {
    let harness = harness();
    answer(harness, &String::from_utf8_lossy(data));
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let method = harness.names[usize::from(choice) % harness.names.len()];
    let text = String::from_utf8_lossy(rest);
    let params = serde_json::from_str::<Value>(&text).unwrap_or_else(|_| json!([text]));
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    answer(harness, &request.to_string());
}
