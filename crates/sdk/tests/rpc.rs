//! `RpcClient` against a mock node: a jsonrpsee server that answers the calls the client
//! makes, accepts transactions with even nonces and refuses odd ones as a pool would.

use std::{collections::HashSet, sync::Mutex};

use alloy_consensus::Transaction as _;
use alloy_eips::BlockNumberOrTag;
use alloy_primitives::{Address, B256, U256, hex};
use alloy_rpc_types_eth::{Block, BlockTransactions, Header};
use jsonrpsee::{
    RpcModule,
    server::{Server, ServerHandle},
    types::ErrorObjectOwned,
};
use serde_json::{Value, json};
use stave_primitives::{SignedTx, dev::dev_account};
use stave_sdk::{LocalSigner, RawTx, RpcClient, SdkError, TxBuilder};

/// The mock's state: hashes of the transactions it accepted.
#[derive(Default)]
struct MockNode {
    accepted: Mutex<HashSet<B256>>,
}

fn send(node: &MockNode, hex_tx: &str) -> Result<B256, ErrorObjectOwned> {
    let invalid = |e: String| ErrorObjectOwned::owned(-32602, e, None::<()>);
    let bytes = hex::decode(hex_tx).map_err(|e| invalid(e.to_string()))?;
    let tx = SignedTx::decode(&bytes).map_err(|e| invalid(e.to_string()))?;
    let nonce = tx.envelope().nonce();
    if nonce % 2 == 1 {
        let message = format!("nonce too low: next nonce {}, tx nonce {nonce}", nonce + 1);
        return Err(ErrorObjectOwned::owned(-32000, message, None::<()>));
    }
    node.accepted.lock().expect("lock").insert(tx.hash());
    Ok(tx.hash())
}

fn receipt(hash: B256) -> Value {
    json!({
        "transactionHash": hash,
        "transactionIndex": "0x0",
        "blockHash": B256::repeat_byte(0xb1),
        "blockNumber": "0x1",
        "from": dev_account(0).address,
        "to": dev_account(1).address,
        "gasUsed": "0x5208",
        "cumulativeGasUsed": "0x5208",
        "effectiveGasPrice": "0x3b9aca00",
        "contractAddress": null,
        "logs": [],
        "logsBloom": format!("0x{}", "0".repeat(512)),
        "type": "0x0",
        "status": "0x1",
    })
}

async fn mock_node() -> (String, ServerHandle) {
    let server = Server::builder().build("127.0.0.1:0").await.expect("binds");
    let url = format!("http://{}", server.local_addr().expect("bound"));
    let mut module = RpcModule::new(MockNode::default());
    module
        .register_method("eth_chainId", |_, _, _| "0x539")
        .expect("registers");
    module
        .register_method("eth_blockNumber", |_, _, _| "0x10")
        .expect("registers");
    module
        .register_method("eth_getTransactionCount", |params, _, _| {
            let (_, block): (Address, BlockNumberOrTag) = params.parse()?;
            Ok::<_, ErrorObjectOwned>(if block.is_pending() { "0x7" } else { "0x5" })
        })
        .expect("registers");
    module
        .register_method("eth_getBalance", |_, _, _| "0xde0b6b3a7640000")
        .expect("registers");
    module
        .register_method("eth_sendRawTransaction", |params, node, _| {
            let (tx,): (String,) = params.parse()?;
            send(node, &tx)
        })
        .expect("registers");
    module
        .register_method("eth_getTransactionReceipt", |params, node, _| {
            let (hash,): (B256,) = params.parse()?;
            let known = node.accepted.lock().expect("lock").contains(&hash);
            Ok::<_, ErrorObjectOwned>(if known { receipt(hash) } else { Value::Null })
        })
        .expect("registers");
    module
        .register_method("eth_getBlockByNumber", |params, _, _| {
            let (number, full): (BlockNumberOrTag, bool) = params.parse()?;
            assert!(!full, "the client asks for hashes only");
            let header = alloy_consensus::Header {
                number: number.as_number().unwrap_or(16),
                ..Default::default()
            };
            let block = Block::<alloy_rpc_types_eth::Transaction> {
                header: Header::new(header),
                uncles: vec![],
                transactions: BlockTransactions::Hashes(vec![B256::repeat_byte(1)]),
                withdrawals: None,
            };
            Ok::<_, ErrorObjectOwned>(serde_json::to_value(block).expect("serializes"))
        })
        .expect("registers");
    let handle = server.start(module);
    (url, handle)
}

/// Transfers from dev account 0 with nonces `0..count`.
fn transfers(count: u64) -> Vec<RawTx> {
    let signer = LocalSigner::from_secret(&dev_account(0).secret).expect("dev key");
    let builder = TxBuilder::legacy(1337, 1_000_000_000);
    (0..count)
        .map(|nonce| {
            signer.sign_raw(&builder.transfer(nonce, dev_account(1).address, U256::from(1)))
        })
        .collect()
}

#[tokio::test]
async fn single_calls_decode_their_answers() {
    let (url, _node) = mock_node().await;
    let client = RpcClient::new(&url).expect("client");
    let who = dev_account(0).address;
    assert_eq!(client.chain_id().await, Ok(1337));
    assert_eq!(client.block_number().await, Ok(16));
    assert_eq!(
        client
            .get_transaction_count(who, BlockNumberOrTag::Pending)
            .await,
        Ok(7)
    );
    assert_eq!(
        client
            .get_transaction_count(who, BlockNumberOrTag::Latest)
            .await,
        Ok(5)
    );
    assert_eq!(
        client.get_balance(who).await,
        Ok(U256::from(10u64).pow(U256::from(18)))
    );
    let block = client
        .get_block_by_number(BlockNumberOrTag::Number(3))
        .await
        .expect("answers")
        .expect("a block");
    assert_eq!(block.header.number, 3);
    assert_eq!(
        block.transactions.hashes().collect::<Vec<_>>(),
        [B256::repeat_byte(1)]
    );
}

#[tokio::test]
async fn a_batch_send_reports_each_transaction_in_order() {
    let (url, _node) = mock_node().await;
    let client = RpcClient::new(&url).expect("client");
    let txs = transfers(6);
    let bytes: Vec<&[u8]> = txs.iter().map(|tx| tx.bytes.as_slice()).collect();
    let results = client.send_raw_transactions(&bytes).await.expect("batch");
    assert_eq!(results.len(), 6);
    for (nonce, (result, tx)) in results.iter().zip(&txs).enumerate() {
        if nonce % 2 == 0 {
            assert_eq!(result, &Ok(tx.hash), "nonce {nonce}");
        } else {
            let error = result.as_ref().expect_err("odd nonces are refused");
            assert!(error.is_nonce_error(), "nonce {nonce}: {error}");
        }
    }
    assert_eq!(
        client.send_raw_transaction(&txs[2].bytes).await,
        Ok(txs[2].hash)
    );
}

#[tokio::test]
async fn receipts_are_none_until_the_node_has_the_transaction() {
    let (url, _node) = mock_node().await;
    let client = RpcClient::new(&url).expect("client");
    let txs = transfers(2);
    assert_eq!(client.get_transaction_receipt(txs[0].hash).await, Ok(None));
    client
        .send_raw_transaction(&txs[0].bytes)
        .await
        .expect("accepted");
    let receipts = client
        .get_transaction_receipts(&[txs[0].hash, txs[1].hash])
        .await
        .expect("batch");
    let first = receipts[0]
        .as_ref()
        .expect("answered")
        .as_ref()
        .expect("mined");
    assert_eq!(first.transaction_hash, txs[0].hash);
    assert!(first.status());
    assert_eq!(first.block_number, Some(1));
    assert_eq!(receipts[1], Ok(None));
}

#[tokio::test]
async fn an_empty_batch_sends_nothing() {
    let (url, node) = mock_node().await;
    let client = RpcClient::new(&url).expect("client");
    node.stop().expect("stops");
    node.stopped().await;
    // No request is made, so the stopped node cannot fail it.
    assert_eq!(
        client.send_raw_transactions::<Vec<u8>>(&[]).await,
        Ok(vec![])
    );
    assert_eq!(client.get_transaction_receipts(&[]).await, Ok(vec![]));
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    drop(listener);
    let client = RpcClient::new(&url).expect("client");
    assert!(matches!(
        client.chain_id().await,
        Err(SdkError::Transport(_))
    ));
    assert!(matches!(
        RpcClient::new("not a url"),
        Err(SdkError::Transport(_))
    ));
}

#[tokio::test]
async fn busy_answers_are_retried_and_other_errors_are_not() {
    let server = Server::builder().build("127.0.0.1:0").await.expect("binds");
    let url = format!("http://{}", server.local_addr().expect("bound"));
    // Busy for the first three calls, then the head.
    let mut module = RpcModule::new(std::sync::atomic::AtomicU32::new(3));
    module
        .register_method("eth_blockNumber", |_, busy_left, _| {
            let left = busy_left.load(std::sync::atomic::Ordering::SeqCst);
            if left == 0 {
                return Ok("0x10");
            }
            busy_left.store(left - 1, std::sync::atomic::Ordering::SeqCst);
            Err(ErrorObjectOwned::owned(
                stave_sdk::SERVER_BUSY,
                "server busy: 68 heavy requests running or queued, retry later",
                None::<()>,
            ))
        })
        .expect("registers");
    module
        .register_method("eth_chainId", |_, _, _| {
            Err::<&str, _>(ErrorObjectOwned::owned(-32000, "not today", None::<()>))
        })
        .expect("registers");
    let _node = server.start(module);
    let client = RpcClient::new(&url).expect("client");
    assert_eq!(client.block_number().await, Ok(16));
    assert_eq!(
        client.chain_id().await,
        Err(SdkError::Rpc {
            code: -32000,
            message: "not today".into()
        })
    );
}
