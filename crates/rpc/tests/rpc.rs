//! The RPC server in-process over a real data dir: logs and their limits, fee history,
//! storage reads, state at earlier blocks and its horizon, headers, raw forms and pool
//! views.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use alloy_primitives::{Address, B256, U256};
use jsonrpsee::{
    core::{ClientError, client::ClientT},
    http_client::HttpClientBuilder,
    rpc_params,
};
use serde_json::Value;
use stave_node::BlockProducer;
use stave_primitives::{DEFAULT_BASE_FEE, dev::dev_account};
use stave_rpc::{NodeContext, RpcConfig, SyncProgress, error::LIMIT_EXCEEDED, net::SYNCING_GAP};
use stave_sdk::{
    LocalSigner, TxBuilder,
    contracts::{ERC20_TRANSFER_TOPIC, stave_token_balance_slot},
};
use stave_state::{FLUSH_BATCH, KEPT_LAYERS};
use stave_storage::LmdbStore;
use stave_txpool::TxPool;

const CHAIN_ID: u64 = 1337;
// The chain these tests and the fuzz target serve (its fuzz check is not used here).
#[allow(dead_code)]
#[path = "../../../fuzz/rpc_checks.rs"]
mod rpc_checks;

use rpc_checks::TOKEN;

fn hex_u64(value: &Value) -> u64 {
    u64::from_str_radix(value.as_str().expect("hex").trim_start_matches("0x"), 16).expect("number")
}

/// A chain in a fresh data dir (genesis: two funded accounts and the token) and an RPC
/// server over it with `config`; the producer makes its blocks.
async fn serve(
    dir: &std::path::Path,
    config: RpcConfig,
) -> (
    std::net::SocketAddr,
    stave_rpc::RpcServer,
    BlockProducer<'static>,
    Arc<TxPool>,
    Arc<stave_state::StateLayers<'static>>,
    &'static LmdbStore,
) {
    serve_with(dir, config, None).await
}

/// [`serve`] for a node that takes its blocks from others and reports `sync`.
async fn serve_with(
    dir: &std::path::Path,
    config: RpcConfig,
    sync: Option<SyncProgress>,
) -> (
    std::net::SocketAddr,
    stave_rpc::RpcServer,
    BlockProducer<'static>,
    Arc<TxPool>,
    Arc<stave_state::StateLayers<'static>>,
    &'static LmdbStore,
) {
    let rpc_checks::TokenChain {
        view,
        pool,
        producer,
        layers,
        store,
    } = rpc_checks::TokenChain::open(dir, 256 << 20);
    let (heads, _) = tokio::sync::broadcast::channel(16);
    let server = stave_rpc::start(NodeContext {
        view,
        pool: pool.clone(),
        heads,
        admitted: None,
        sync,
        peer_count: None,
        dev: None,
        config: RpcConfig {
            addr: "127.0.0.1:0".parse().expect("address"),
            ..config
        },
    })
    .await
    .expect("starts");
    (server.addr(), server, producer, pool, layers, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_fees_storage_and_history_over_a_real_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RpcConfig {
        max_log_blocks: 5,
        max_logs: 3,
        ..RpcConfig::default()
    };
    let (addr, _server, mut producer, pool, layers, store) = serve(dir.path(), config).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{addr}"))
        .expect("client");

    // Enough blocks for a flush; each moves 1 token from account 0 to account 1 (one log).
    let sender = LocalSigner::from_secret(&dev_account(0).secret).expect("key");
    let receiver = dev_account(1).address;
    let builder = TxBuilder::new(CHAIN_ID, 2 * u128::from(DEFAULT_BASE_FEE));
    let blocks = (KEPT_LAYERS + FLUSH_BATCH) as u64 + 2;
    for nonce in 0..blocks {
        let tx = sender.sign_tx(builder.erc20_transfer(nonce, TOKEN, receiver, U256::from(1)));
        let added = pool.add(&[tx.encoded()], &layers.latest(), DEFAULT_BASE_FEE);
        assert!(added[0].is_ok(), "{added:?}");
        let produced = producer.produce(nonce + 1).expect("produces");
        assert_eq!(produced.block.transactions().len(), 1);
    }

    // Logs: a small range is served, filtered by address and topic.
    let filter = serde_json::json!({
        "fromBlock": "0x1", "toBlock": "0x3", "address": TOKEN,
        "topics": [ERC20_TRANSFER_TOPIC],
    });
    let logs: Vec<Value> = client
        .request("eth_getLogs", rpc_params![filter])
        .await
        .expect("logs");
    assert_eq!(logs.len(), 3);
    assert_eq!(hex_u64(&logs[2]["blockNumber"]), 3);
    let none: Vec<Value> = client
        .request(
            "eth_getLogs",
            rpc_params![
                serde_json::json!({"fromBlock": "0x1", "toBlock": "0x3", "address": Address::ZERO})
            ],
        )
        .await
        .expect("logs");
    assert!(none.is_empty());
    // Too many blocks, or too many results: an error naming a range that would work.
    for (range, suggestion) in [
        (("0x1", "0x9"), "[0x1, 0x5]"),
        (("0x1", "0x5"), "[0x1, 0x3]"),
    ] {
        let filter = serde_json::json!({"fromBlock": range.0, "toBlock": range.1});
        let error = client
            .request::<Vec<Value>, _>("eth_getLogs", rpc_params![filter])
            .await
            .expect_err("over a limit");
        let ClientError::Call(error) = error else {
            panic!("{error}")
        };
        assert_eq!(error.code(), LIMIT_EXCEEDED);
        assert!(error.message().contains(suggestion), "{}", error.message());
    }

    // Storage: the receiver's token balance slot.
    let slot = U256::from_be_bytes(stave_token_balance_slot(receiver).0);
    let value: B256 = client
        .request("eth_getStorageAt", rpc_params![TOKEN, slot, "latest"])
        .await
        .expect("storage");
    let start = U256::from(1_000u64) * U256::from(10u64).pow(U256::from(18));
    assert_eq!(U256::from_be_bytes(value.0), start + U256::from(blocks));
    // The same slot at earlier blocks, down to the horizon, and an error past it.
    let flushed = layers.flushed();
    assert!(flushed > 0 && flushed <= blocks - KEPT_LAYERS as u64);
    for number in [blocks - 1, blocks - KEPT_LAYERS as u64, flushed] {
        let value: B256 = client
            .request(
                "eth_getStorageAt",
                rpc_params![TOKEN, slot, format!("{number:#x}")],
            )
            .await
            .expect("kept");
        assert_eq!(U256::from_be_bytes(value.0), start + U256::from(number));
    }
    let too_old = format!("{:#x}", flushed - 1);
    let error = client
        .request::<B256, _>("eth_getStorageAt", rpc_params![TOKEN, slot, too_old])
        .await
        .expect_err("past the horizon");
    assert!(error.to_string().contains("state not available"), "{error}");

    // Fee history: base fees (one more than blocks), ratios and reward percentiles.
    let history: Value = client
        .request("eth_feeHistory", rpc_params!["0x4", "latest", vec![50.0]])
        .await
        .expect("fee history");
    assert_eq!(hex_u64(&history["oldestBlock"]), blocks - 3);
    assert_eq!(history["baseFeePerGas"].as_array().expect("list").len(), 5);
    assert_eq!(history["gasUsedRatio"].as_array().expect("list").len(), 4);
    assert_eq!(history["reward"][0][0], serde_json::json!("0x1"));

    // Senders: served as recorded at import, or recovered for a block stored without them
    // (a data dir from before the record).
    let mut batch = stave_storage::WriteBatch::new();
    batch.delete(stave_storage::Table::Senders, 2u64.to_be_bytes());
    stave_storage::KvStore::write(store, batch).expect("writes");
    for number in ["0x1", "0x2"] {
        let block: Value = client
            .request("eth_getBlockByNumber", rpc_params![number, true])
            .await
            .expect("block");
        let tx = &block["transactions"][0];
        assert_eq!(tx["from"], serde_json::json!(sender.address()), "{number}");
        let receipt: Value = client
            .request("eth_getTransactionReceipt", rpc_params![tx["hash"].clone()])
            .await
            .expect("receipt");
        assert_eq!(
            receipt["from"],
            serde_json::json!(sender.address()),
            "{number}"
        );
    }

    // A block's transaction count and its transactions by position, by number and by hash.
    let block: Value = client
        .request("eth_getBlockByNumber", rpc_params!["0x2", false])
        .await
        .expect("block");
    let by_hash: Value = client
        .request(
            "eth_getTransactionByHash",
            rpc_params![block["transactions"][0].clone()],
        )
        .await
        .expect("tx");
    for (count_method, tx_method, id) in [
        (
            "eth_getBlockTransactionCountByNumber",
            "eth_getTransactionByBlockNumberAndIndex",
            Value::from("0x2"),
        ),
        (
            "eth_getBlockTransactionCountByHash",
            "eth_getTransactionByBlockHashAndIndex",
            block["hash"].clone(),
        ),
    ] {
        let count: Value = client
            .request(count_method, rpc_params![id.clone()])
            .await
            .expect("count");
        assert_eq!(count, serde_json::json!("0x1"), "{count_method}");
        let tx: Value = client
            .request(tx_method, rpc_params![id.clone(), "0x0"])
            .await
            .expect("tx");
        assert_eq!(tx, by_hash, "{tx_method}");
        let past_the_end: Value = client
            .request(tx_method, rpc_params![id.clone(), "0x1"])
            .await
            .expect("answers");
        assert!(past_the_end.is_null(), "{tx_method}");
    }
    let unknown: Value = client
        .request(
            "eth_getBlockTransactionCountByHash",
            rpc_params![B256::repeat_byte(3)],
        )
        .await
        .expect("answers");
    assert!(unknown.is_null());
    let future: Value = client
        .request(
            "eth_getBlockTransactionCountByNumber",
            rpc_params![format!("{:#x}", blocks + 1)],
        )
        .await
        .expect("answers");
    assert!(future.is_null());

    // Filters, as clients polling over HTTP use them: installed now, they report only the
    // blocks and token logs that come after, once each.
    let logs_filter: String = client
        .request(
            "eth_newFilter",
            rpc_params![serde_json::json!({"address": TOKEN})],
        )
        .await
        .expect("installs");
    let blocks_filter: String = client
        .request("eth_newBlockFilter", rpc_params![])
        .await
        .expect("installs");
    let pending_filter: String = client
        .request("eth_newPendingTransactionFilter", rpc_params![])
        .await
        .expect("installs");
    let changes = |id: String| {
        let client = &client;
        async move {
            client
                .request::<Vec<Value>, _>("eth_getFilterChanges", rpc_params![id])
                .await
        }
    };
    assert!(
        changes(logs_filter.clone())
            .await
            .expect("polls")
            .is_empty()
    );
    let mut admitted = Vec::new();
    for nonce in blocks..blocks + 2 {
        let tx = sender.sign_tx(builder.erc20_transfer(nonce, TOKEN, receiver, U256::from(1)));
        let added = pool.add(&[tx.encoded()], &layers.latest(), DEFAULT_BASE_FEE);
        assert!(added[0].is_ok(), "{added:?}");
        admitted.push(serde_json::json!(tx.hash()));
        producer.produce(nonce + 1).expect("produces");
    }
    // The pending filter saw both admissions, once, though both are already in blocks.
    assert_eq!(
        changes(pending_filter.clone()).await.expect("polls"),
        admitted
    );
    assert!(
        changes(pending_filter.clone())
            .await
            .expect("polls")
            .is_empty()
    );
    let error = client
        .request::<Vec<Value>, _>("eth_getFilterLogs", rpc_params![pending_filter])
        .await
        .expect_err("not a log filter");
    assert!(error.to_string().contains("not a log filter"), "{error}");
    let new_blocks = changes(blocks_filter.clone()).await.expect("polls");
    let new_logs = changes(logs_filter.clone()).await.expect("polls");
    assert_eq!(new_blocks.len(), 2);
    assert_eq!(new_logs.len(), 2);
    for (block_hash, log) in new_blocks.iter().zip(&new_logs) {
        assert_eq!(&log["blockHash"], block_hash);
    }
    assert_eq!(hex_u64(&new_logs[1]["blockNumber"]), blocks + 2);
    assert!(
        changes(blocks_filter.clone())
            .await
            .expect("polls")
            .is_empty()
    );
    assert!(
        changes(logs_filter.clone())
            .await
            .expect("polls")
            .is_empty()
    );
    // The filter's own range (latest, by default) for eth_getFilterLogs.
    let filter_logs: Vec<Value> = client
        .request("eth_getFilterLogs", rpc_params![logs_filter.clone()])
        .await
        .expect("logs");
    assert_eq!(filter_logs, new_logs[1..]);
    for id in [logs_filter, blocks_filter] {
        let removed: bool = client
            .request("eth_uninstallFilter", rpc_params![id.clone()])
            .await
            .expect("uninstalls");
        assert!(removed);
        let error = changes(id).await.expect_err("uninstalled");
        assert!(error.to_string().contains("filter not found"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_evm_timeout_is_stopped_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RpcConfig {
        evm_timeout: std::time::Duration::from_millis(100),
        // A trillion gas: without the timeout the loop below would run for minutes.
        gas_cap: 1_000_000_000_000,
        ..RpcConfig::default()
    };
    let (addr, _server, _producer, _pool, _layers, _store) = serve(dir.path(), config).await;
    let client = HttpClientBuilder::default()
        .request_timeout(std::time::Duration::from_secs(30))
        .build(format!("http://{addr}"))
        .expect("client");
    // Initcode JUMPDEST PUSH1 0 JUMP: a creation that loops forever.
    let looping = serde_json::json!({ "data": "0x5b600056" });
    for method in ["eth_call", "eth_estimateGas"] {
        let started = std::time::Instant::now();
        let error = client
            .request::<Value, _>(method, rpc_params![looping.clone(), "latest"])
            .await
            .expect_err("stopped");
        assert!(
            error
                .to_string()
                .contains("execution aborted (timeout = 0.1s)"),
            "{method}: {error}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    // So is a simulation whose call loops, its gas cut to the cap, not to a block's.
    let simulation = serde_json::json!({
        "blockStateCalls": [{
            "blockOverrides": {"gasLimit": "0xe8d4a51000"},
            "calls": [{"data": "0x5b600056"}],
        }],
    });
    let started = std::time::Instant::now();
    let error = client
        .request::<Value, _>("eth_simulateV1", rpc_params![simulation, "latest"])
        .await
        .expect_err("stopped");
    assert!(
        error
            .to_string()
            .contains("execution aborted (timeout = 0.1s)"),
        "eth_simulateV1: {error}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // Still serving, and an ordinary call still answers.
    let chain_id: Value = client
        .request("eth_chainId", rpc_params![])
        .await
        .expect("serves");
    assert_eq!(chain_id, "0x539");
    let mut input = vec![0x70, 0xa0, 0x82, 0x31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    input.extend_from_slice(dev_account(0).address.as_slice());
    let balance: Value = client
        .request(
            "eth_call",
            rpc_params![
                serde_json::json!({ "to": TOKEN, "data": format!("0x{}", hex::encode(input)) }),
                "latest"
            ],
        )
        .await
        .expect("answers");
    assert_eq!(balance.as_str().map(str::len), Some(66));
}

/// `eth_sendRawTransaction` recovers the sender on the server's own threads: a
/// submission is admitted while every thread of rayon's global pool, which imports
/// blocks, is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_is_admitted_while_the_import_pool_is_busy() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, _server, _producer, pool, _layers, _store) =
        serve(dir.path(), RpcConfig::default()).await;
    let client = HttpClientBuilder::default()
        .request_timeout(std::time::Duration::from_secs(30))
        .build(format!("http://{addr}"))
        .expect("client");
    let (busy, released) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    for _ in 0..rayon::current_num_threads() {
        let (busy, released) = (busy.clone(), released.clone());
        rayon::spawn(move || {
            busy.fetch_add(1, Ordering::SeqCst);
            while !released.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
    }
    while busy.load(Ordering::SeqCst) < rayon::current_num_threads() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    let tx = rpc_checks::token_transfer(0);
    let submitted = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.request::<B256, _>(
            "eth_sendRawTransaction",
            rpc_params![format!("0x{}", hex::encode(tx.encoded()))],
        ),
    )
    .await;
    released.store(true, Ordering::SeqCst);
    let hash = submitted
        .expect("answered while the global pool is busy")
        .expect("admitted");
    assert_eq!(hash, tx.hash());
    assert!(pool.get(&hash).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncing_reports_progress_only_while_the_node_is_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let highest = Arc::new(AtomicU64::new(0));
    let sync = SyncProgress {
        starting_block: 0,
        highest_block: highest.clone(),
    };
    let (addr, _server, _producer, ..) =
        serve_with(dir.path(), RpcConfig::default(), Some(sync)).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{addr}"))
        .expect("client");
    let syncing = || async {
        client
            .request::<Value, _>("eth_syncing", rpc_params![])
            .await
            .expect("answers")
    };
    // At the tip, or a few blocks short of it while a block travels: not syncing.
    assert_eq!(syncing().await, Value::Bool(false));
    highest.store(SYNCING_GAP, Ordering::Release);
    assert_eq!(syncing().await, Value::Bool(false));
    // Far behind: where it started, where it is, where the chain is.
    highest.store(1_000, Ordering::Release);
    let progress = syncing().await;
    assert_eq!(hex_u64(&progress["startingBlock"]), 0, "{progress}");
    assert_eq!(hex_u64(&progress["currentBlock"]), 0, "{progress}");
    assert_eq!(hex_u64(&progress["highestBlock"]), 1_000, "{progress}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_raw_forms_pool_views_and_node_facts_are_served() {
    use alloy_consensus::ReceiptEnvelope;
    use alloy_eips::eip2718::Decodable2718 as _;
    use alloy_primitives::{Bytes, keccak256};

    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, _server, mut producer, pool, layers, _store) =
        serve(dir.path(), RpcConfig::default()).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{addr}"))
        .expect("client");
    let sender = LocalSigner::from_secret(&dev_account(0).secret).expect("key");
    let receiver = dev_account(1).address;
    let builder = TxBuilder::new(CHAIN_ID, 2 * u128::from(DEFAULT_BASE_FEE));
    let included = sender.sign_tx(builder.erc20_transfer(0, TOKEN, receiver, U256::from(1)));
    let added = pool.add(&[included.encoded()], &layers.latest(), DEFAULT_BASE_FEE);
    assert!(added[0].is_ok(), "{added:?}");
    producer.produce(1).expect("produces");
    // One more, left in the pool.
    let pending = sender.sign_tx(builder.erc20_transfer(1, TOKEN, receiver, U256::from(2)));
    let added = pool.add(&[pending.encoded()], &layers.latest(), DEFAULT_BASE_FEE);
    assert!(added[0].is_ok(), "{added:?}");

    // Headers, by number and by hash, are the blocks' own.
    let block: Value = client
        .request("eth_getBlockByNumber", rpc_params!["0x1", false])
        .await
        .expect("block");
    let header: Value = client
        .request("eth_getHeaderByNumber", rpc_params!["0x1"])
        .await
        .expect("header");
    assert_eq!(header["hash"], block["hash"]);
    assert_eq!(header["stateRoot"], block["stateRoot"]);
    assert!(header.get("transactions").is_none());
    let by_hash: Value = client
        .request("eth_getHeaderByHash", rpc_params![block["hash"].clone()])
        .await
        .expect("header");
    assert_eq!(by_hash, header);
    // `finalized` and `safe` are the head: every block held is final.
    for tag in ["finalized", "safe", "latest"] {
        let head: Value = client
            .request("eth_getHeaderByNumber", rpc_params![tag])
            .await
            .expect("header");
        assert_eq!(head["hash"], block["hash"], "{tag}");
    }

    // Raw forms: transactions included and pooled, the header as hashed, the block, the
    // receipts in their envelopes.
    for tx in [&included, &pending] {
        for method in ["eth_getRawTransactionByHash", "debug_getRawTransaction"] {
            let raw: Bytes = client
                .request(method, rpc_params![tx.hash()])
                .await
                .expect("raw tx");
            assert_eq!(raw.to_vec(), tx.encoded(), "{method}");
        }
    }
    let missing: Option<Bytes> = client
        .request("eth_getRawTransactionByHash", rpc_params![B256::ZERO])
        .await
        .expect("answered");
    assert!(missing.is_none());
    let raw_header: Bytes = client
        .request("debug_getRawHeader", rpc_params!["0x1"])
        .await
        .expect("raw header");
    assert_eq!(
        format!("{:?}", keccak256(&raw_header)),
        block["hash"].as_str().expect("hash")
    );
    let raw_block: Bytes = client
        .request("debug_getRawBlock", rpc_params!["0x1"])
        .await
        .expect("raw block");
    let mut rest = &raw_block[..];
    let outer = alloy_rlp::Header::decode(&mut rest).expect("a list");
    assert!(outer.list && outer.payload_length == rest.len());
    assert!(rest.starts_with(&raw_header));
    let mut body = &rest[raw_header.len()..];
    let txs: Vec<alloy_consensus::TxEnvelope> =
        alloy_rlp::Decodable::decode(&mut body).expect("transactions");
    assert_eq!(txs.len(), 1);
    assert_eq!(*txs[0].tx_hash(), included.hash());
    assert_eq!(body, [0xc0], "no uncles");
    let receipts: Vec<Bytes> = client
        .request("debug_getRawReceipts", rpc_params!["0x1"])
        .await
        .expect("raw receipts");
    assert_eq!(receipts.len(), 1);
    let receipt = ReceiptEnvelope::decode_2718(&mut &receipts[0][..]).expect("a receipt");
    assert!(receipt.is_success());
    assert_eq!(receipt.logs().len(), 1);

    // The pool, by sender and summed up.
    let from: Value = client
        .request("txpool_contentFrom", rpc_params![sender.address()])
        .await
        .expect("content");
    assert_eq!(
        from["pending"]["1"]["hash"],
        serde_json::json!(pending.hash())
    );
    assert_eq!(from["queued"], serde_json::json!({}));
    let inspect: Value = client
        .request("txpool_inspect", rpc_params![])
        .await
        .expect("inspect");
    let summary = inspect["pending"][sender.address().to_checksum(None)]["1"]
        .as_str()
        .expect("a summary")
        .to_string();
    let expected_price = 2 * u128::from(DEFAULT_BASE_FEE);
    assert!(
        summary.starts_with(&format!("{}: 0 wei + ", TOKEN.to_checksum(None)))
            && summary.ends_with(&format!(" gas × {expected_price} wei")),
        "{summary}"
    );

    // Facts about the node.
    let peers: String = client
        .request("net_peerCount", rpc_params![])
        .await
        .expect("peers");
    assert_eq!(peers, "0x0");
    let hash: B256 = client
        .request("web3_sha3", rpc_params!["0x68656c6c6f"])
        .await
        .expect("sha3");
    assert_eq!(hash, keccak256(b"hello"));
    let coinbase: Address = client
        .request("eth_coinbase", rpc_params![])
        .await
        .expect("coinbase");
    assert_eq!(serde_json::json!(coinbase), block["miner"]);

    // A node that is not a dev node neither signs nor mines on request.
    let accounts: Vec<Address> = client
        .request("eth_accounts", rpc_params![])
        .await
        .expect("accounts");
    assert!(accounts.is_empty());
    for method in ["evm_mine", "eth_sendTransaction", "anvil_setAutomine"] {
        let error = client
            .request::<Value, _>(method, rpc_params![])
            .await
            .expect_err("not served");
        assert!(
            error.to_string().contains("Method not found"),
            "{method}: {error}"
        );
    }
}

/// `eth_simulateV1` over the token chain: blocks of calls that see each other's state,
/// answered as blocks with their calls' results, and hostile payloads refused with their
/// codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_v1_runs_blocks_of_calls_and_refuses_what_it_cannot() {
    use serde_json::json;
    use stave_rpc::error::simulate::{
        BASE_FEE_TOO_LOW, BLOCK_NUMBER_INVALID, BLOCK_TIMESTAMP_INVALID, CLIENT_LIMIT_EXCEEDED,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let config = RpcConfig {
        simulate_max_blocks: 8,
        simulate_max_calls: 4,
        ..RpcConfig::default()
    };
    let (addr, _server, _producer, _pool, _layers, _store) = serve(dir.path(), config).await;
    let client = HttpClientBuilder::default()
        .build(format!("http://{addr}"))
        .expect("client");
    let (holder, receiver) = (dev_account(0).address, dev_account(1).address);
    let hex_data = |bytes: &[u8]| format!("0x{}", hex::encode(bytes));
    let transfer = |amount: U256| hex_data(&stave_sdk::erc20_transfer_calldata(receiver, amount));
    let mut balance_of = vec![0x70, 0xa0, 0x82, 0x31];
    balance_of.extend_from_slice(&[0; 12]);
    balance_of.extend_from_slice(receiver.as_slice());
    let thousand = U256::from(1_000u64) * U256::from(10u64).pow(U256::from(18));
    let simulate = |payload: Value| {
        let client = &client;
        async move {
            client
                .request::<Vec<Value>, _>("eth_simulateV1", rpc_params![payload, "latest"])
                .await
        }
    };

    // Block 1: a token transfer, then one for more than the holder has (a revert).
    // Block 2: the receiver's balance, as block 1 left it.
    let payload = json!({
        "blockStateCalls": [
            {"calls": [
                {"from": holder, "to": TOKEN, "data": transfer(U256::from(5))},
                {"from": holder, "to": TOKEN, "data": transfer(thousand * U256::from(2))},
            ]},
            {"calls": [{"to": TOKEN, "data": hex_data(&balance_of)}]},
        ],
        "returnFullTransactions": true,
    });
    let blocks = simulate(payload).await.expect("simulates");
    assert_eq!(blocks.len(), 2);
    let (first, second) = (&blocks[0], &blocks[1]);
    assert_eq!(hex_u64(&first["number"]), 1);
    assert_eq!(hex_u64(&second["number"]), 2);
    assert_eq!(second["parentHash"], first["hash"]);
    assert_eq!(
        hex_u64(&first["baseFeePerGas"]),
        0,
        "no validation: no base fee"
    );
    let calls = first["calls"].as_array().expect("calls");
    assert_eq!(calls[0]["status"], "0x1");
    assert_eq!(
        calls[0]["returnData"],
        format!("0x{}", hex::encode(B256::with_last_byte(1)))
    );
    let log = &calls[0]["logs"][0];
    assert_eq!(
        log["address"].as_str().map(str::to_lowercase),
        Some(format!("{TOKEN:#x}"))
    );
    assert_eq!(log["topics"][0], json!(ERC20_TRANSFER_TOPIC));
    assert_eq!(log["blockHash"], first["hash"]);
    assert_eq!(log["blockNumber"], "0x1");
    assert_eq!(log["transactionHash"], first["transactions"][0]["hash"]);
    assert_eq!(
        (&log["logIndex"], &log["transactionIndex"]),
        (&json!("0x0"), &json!("0x0"))
    );
    assert_eq!(
        first["transactions"][0]["from"]
            .as_str()
            .map(str::to_lowercase),
        Some(format!("{holder:#x}"))
    );
    // The revert: status 0, no return data, code 3 with the revert data.
    assert_eq!(calls[1]["status"], "0x0");
    assert_eq!(calls[1]["returnData"], "0x");
    assert_eq!(calls[1]["error"]["code"], 3);
    assert!(
        calls[1]["error"]["message"]
            .as_str()
            .expect("message")
            .starts_with("execution reverted"),
        "{}",
        calls[1]["error"]
    );
    assert!(
        calls[1]["error"]["data"]
            .as_str()
            .is_some_and(|data| data.len() > 2)
    );
    assert!(calls[1]["logs"].as_array().expect("logs").is_empty());
    let gas_used = hex_u64(&calls[0]["gasUsed"]) + hex_u64(&calls[1]["gasUsed"]);
    assert_eq!(hex_u64(&first["gasUsed"]), gas_used);
    let read = &second["calls"][0]["returnData"];
    let start = thousand;
    assert_eq!(
        U256::from_str_radix(read.as_str().expect("hex").trim_start_matches("0x"), 16)
            .expect("number"),
        start + U256::from(5),
        "block 2 sees block 1's transfer"
    );
    // Nothing was written: the chain is still at its genesis.
    let head: Value = client
        .request("eth_blockNumber", rpc_params![])
        .await
        .expect("head");
    assert_eq!(head, "0x0");

    // Block overrides and a state override; an ETH transfer traced as a log.
    let payload = json!({
        "blockStateCalls": [{
            "blockOverrides": {"number": "0x5", "time": "0x77359400"},
            "stateOverrides": {"0x00000000000000000000000000000000000000aa": {"balance": "0x64"}},
            "calls": [{"from": "0x00000000000000000000000000000000000000aa",
                       "to": "0x00000000000000000000000000000000000000bb", "value": "0x10"}],
        }],
        "traceTransfers": true,
    });
    let blocks = simulate(payload).await.expect("simulates");
    assert_eq!(blocks.len(), 5, "four blocks then the one asked for");
    let last = &blocks[4];
    assert_eq!(
        (hex_u64(&last["number"]), hex_u64(&last["timestamp"])),
        (5, 2_000_000_000)
    );
    let log = &last["calls"][0]["logs"][0];
    assert_eq!(log["address"], "0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
    assert_eq!(
        log["data"],
        format!("0x{}", hex::encode(B256::with_last_byte(0x10)))
    );

    // Refusals, each with its code.
    let refused = |payload: Value| async move {
        match simulate(payload).await.expect_err("refused") {
            ClientError::Call(error) => (error.code(), error.message().to_owned()),
            other => panic!("{other}"),
        }
    };
    let at = |number: &str| json!({"blockOverrides": {"number": number}});
    let cases = [
        (
            json!({"blockStateCalls": [at("0x3"), at("0x2")]}),
            BLOCK_NUMBER_INVALID,
        ),
        (
            json!({"blockStateCalls": [at("0x0")]}),
            BLOCK_NUMBER_INVALID,
        ),
        (
            json!({"blockStateCalls": [{"blockOverrides": {"time": "0x0"}}]}),
            BLOCK_TIMESTAMP_INVALID,
        ),
        (
            json!({"blockStateCalls": [at("0x9")]}),
            CLIENT_LIMIT_EXCEEDED,
        ),
        (
            json!({"blockStateCalls": [at("0xffffffffffffffffffffffffffffffffffffffff")]}),
            CLIENT_LIMIT_EXCEEDED,
        ),
        (
            json!({"blockStateCalls": vec![json!({}); 9]}),
            CLIENT_LIMIT_EXCEEDED,
        ),
        (
            json!({"blockStateCalls": [{"calls": vec![json!({}); 5]}]}),
            CLIENT_LIMIT_EXCEEDED,
        ),
        (
            json!({"blockStateCalls": []}),
            stave_rpc::error::INVALID_PARAMS,
        ),
        (
            json!({"blockStateCalls": [{"stateOverrides": {
                "0x00000000000000000000000000000000000000aa": {"state": {}, "stateDiff": {}}}}]}),
            stave_rpc::error::INVALID_PARAMS,
        ),
        (
            json!({"blockStateCalls": [{"calls": [{"gasPrice": "0x1", "maxFeePerGas": "0x1"}]}]}),
            stave_rpc::error::INVALID_PARAMS,
        ),
        (
            json!({"blockStateCalls": "many"}),
            stave_rpc::error::INVALID_PARAMS,
        ),
        (
            json!({"blockStateCalls": [{"calls": [{"from": holder, "to": receiver}]}],
                   "validation": true}),
            BASE_FEE_TOO_LOW,
        ),
    ];
    for (payload, code) in cases {
        let (got, message) = refused(payload.clone()).await;
        assert_eq!(got, code, "{payload}: {message}");
    }
    // Still serving.
    let chain_id: Value = client
        .request("eth_chainId", rpc_params![])
        .await
        .expect("serves");
    assert_eq!(chain_id, "0x539");
}
