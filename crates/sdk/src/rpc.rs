//! A JSON-RPC client for the calls a load generator makes: HTTP with keep-alive (jsonrpsee's
//! pooled hyper client: connections are reused, and concurrent calls open more) and
//! JSON-RPC batches for sending transactions and polling receipts.
//!
//! A batch call returns one result per item in item order: the node may refuse some
//! transactions of a batch and accept the rest. Only a failure of the whole request
//! (connection, timeout, malformed answer) is the outer error.

use std::time::Duration;

use alloy_eips::BlockNumberOrTag;
use alloy_primitives::{Address, B256, Bytes, U64, U256, hex};
use alloy_rpc_types_eth::{Block, TransactionReceipt, TransactionRequest};
use jsonrpsee::{
    core::{
        ClientError,
        client::ClientT,
        params::{ArrayParams, BatchRequestBuilder},
    },
    http_client::{HttpClient, HttpClientBuilder},
    rpc_params,
};
use serde::de::DeserializeOwned;

use crate::error::SdkError;

/// How long one request (a whole batch included) may take before it fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest request and response, in bytes: 64 MiB, room for a batch of 100,000 signed
/// transfers (~230 bytes of hex each) or as many receipts (~1 KiB of JSON each, with logs
/// less: keep receipt batches smaller when transactions log much).
pub const MAX_MESSAGE_SIZE: u32 = 64 << 20;

/// The JSON-RPC error code of a node refusing work for now ("server busy, retry later";
/// go-ethereum's "limit exceeded" code), the one answer [`RpcClient`] retries.
pub const SERVER_BUSY: i32 = -32005;
/// The first pause before retrying a busy answer.
const BUSY_PAUSE_MIN: Duration = Duration::from_millis(20);
/// The longest pause between retries of a busy answer.
const BUSY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The call object of `eth_call` and `eth_estimateGas`.
fn call_object(from: Option<Address>, to: Address, data: &[u8]) -> TransactionRequest {
    let request = TransactionRequest::default()
        .to(to)
        .input(Bytes::copy_from_slice(data).into());
    match from {
        Some(from) => request.from(from),
        None => request,
    }
}

/// A JSON-RPC client of one node over HTTP.
#[derive(Debug, Clone)]
pub struct RpcClient {
    http: HttpClient,
}

impl From<ClientError> for SdkError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Call(error) => SdkError::Rpc {
                code: error.code(),
                message: error.message().to_owned(),
            },
            other => SdkError::Transport(other.to_string()),
        }
    }
}

impl RpcClient {
    /// A client of the node at `url` (`http://host:port`). Connects on first use.
    pub fn new(url: &str) -> Result<Self, SdkError> {
        let http = HttpClientBuilder::default()
            .request_timeout(REQUEST_TIMEOUT)
            .max_request_size(MAX_MESSAGE_SIZE)
            .max_response_size(MAX_MESSAGE_SIZE)
            .build(url)
            .map_err(|e| SdkError::Transport(format!("{url}: {e}")))?;
        Ok(Self { http })
    }

    /// One call; a "server busy" answer is retried after a pause that doubles up to
    /// [`BUSY_PAUSE_MAX`], for at most [`REQUEST_TIMEOUT`] in all, as the node asks
    /// ("retry later"): its heavy-work queue is shared with every other client.
    async fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        params: ArrayParams,
    ) -> Result<R, SdkError> {
        let started = tokio::time::Instant::now();
        let mut pause = BUSY_PAUSE_MIN;
        loop {
            match self.http.request(method, params.clone()).await {
                Err(ClientError::Call(error))
                    if error.code() == SERVER_BUSY
                        && started.elapsed() + pause < REQUEST_TIMEOUT =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(BUSY_PAUSE_MAX);
                }
                answer => return Ok(answer?),
            }
        }
    }

    /// One batch request calling `method` once per item of `params`; one result per item.
    async fn batch<R: DeserializeOwned + std::fmt::Debug>(
        &self,
        method: &str,
        params: impl Iterator<Item = ArrayParams>,
    ) -> Result<Vec<Result<R, SdkError>>, SdkError> {
        let mut batch = BatchRequestBuilder::new();
        let mut items = 0;
        for item in params {
            batch
                .insert(method, item)
                .map_err(|e| SdkError::Transport(e.to_string()))?;
            items += 1;
        }
        if items == 0 {
            // jsonrpsee refuses an empty batch, as the JSON-RPC spec does.
            return Ok(Vec::new());
        }
        let responses = self.http.batch_request::<R>(batch).await?;
        if responses.len() != items {
            return Err(SdkError::Transport(format!(
                "{method} batch: {} answers to {items} calls",
                responses.len()
            )));
        }
        Ok(responses
            .into_iter()
            .map(|entry| {
                entry.map_err(|error| SdkError::Rpc {
                    code: error.code(),
                    message: error.message().to_owned(),
                })
            })
            .collect())
    }

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64, SdkError> {
        Ok(self.call::<U64>("eth_chainId", rpc_params![]).await?.to())
    }

    /// `eth_blockNumber`: the head's number.
    pub async fn block_number(&self) -> Result<u64, SdkError> {
        Ok(self
            .call::<U64>("eth_blockNumber", rpc_params![])
            .await?
            .to())
    }

    /// `eth_getTransactionCount` at `block`; at [`BlockNumberOrTag::Pending`] it counts the
    /// pool's executable transactions too: the next nonce to send.
    pub async fn get_transaction_count(
        &self,
        address: Address,
        block: BlockNumberOrTag,
    ) -> Result<u64, SdkError> {
        let count: U64 = self
            .call("eth_getTransactionCount", rpc_params![address, block])
            .await?;
        Ok(count.to())
    }

    /// `eth_getBalance` at the head, in wei.
    pub async fn get_balance(&self, address: Address) -> Result<U256, SdkError> {
        self.call(
            "eth_getBalance",
            rpc_params![address, BlockNumberOrTag::Latest],
        )
        .await
    }

    /// `eth_call` of `data` on `to` from `from` at the head: the return data. A revert is
    /// an [`SdkError::Rpc`] whose message carries the reason.
    pub async fn call_contract(
        &self,
        from: Option<Address>,
        to: Address,
        data: &[u8],
    ) -> Result<Bytes, SdkError> {
        self.call(
            "eth_call",
            rpc_params![call_object(from, to, data), BlockNumberOrTag::Latest],
        )
        .await
    }

    /// `eth_estimateGas` of `data` sent to `to` from `from`: the gas it needs. A call that
    /// would revert is an [`SdkError::Rpc`] with the reason.
    pub async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        data: &[u8],
    ) -> Result<u64, SdkError> {
        self.estimate(call_object(Some(from), to, data)).await
    }

    /// `eth_estimateGas` of a transaction from `from` sending `value` wei to `to` (or
    /// creating a contract from `data` when `to` is `None`).
    pub async fn estimate_tx_gas(
        &self,
        from: Address,
        to: Option<Address>,
        value: U256,
        data: &[u8],
    ) -> Result<u64, SdkError> {
        let request = TransactionRequest::default()
            .from(from)
            .value(value)
            .input(Bytes::copy_from_slice(data).into());
        let request = match to {
            Some(to) => request.to(to),
            None => TransactionRequest {
                to: Some(alloy_primitives::TxKind::Create),
                ..request
            },
        };
        self.estimate(request).await
    }

    async fn estimate(&self, request: TransactionRequest) -> Result<u64, SdkError> {
        let gas: U64 = self.call("eth_estimateGas", rpc_params![request]).await?;
        Ok(gas.to())
    }

    /// `eth_gasPrice`: a gas price, in wei, that the next block accepts.
    pub async fn gas_price(&self) -> Result<u128, SdkError> {
        let price: U256 = self.call("eth_gasPrice", rpc_params![]).await?;
        Ok(price.to())
    }

    /// `eth_maxPriorityFeePerGas`: the tip per gas, in wei, the node suggests.
    pub async fn max_priority_fee(&self) -> Result<u128, SdkError> {
        let tip: U256 = self.call("eth_maxPriorityFeePerGas", rpc_params![]).await?;
        Ok(tip.to())
    }

    /// `eth_sendRawTransaction`: the transaction's hash once the node accepted it.
    pub async fn send_raw_transaction(&self, tx: &[u8]) -> Result<B256, SdkError> {
        self.call(
            "eth_sendRawTransaction",
            rpc_params![hex::encode_prefixed(tx)],
        )
        .await
    }

    /// `eth_sendRawTransaction` for each of `txs` in one batch request.
    pub async fn send_raw_transactions<T: AsRef<[u8]>>(
        &self,
        txs: &[T],
    ) -> Result<Vec<Result<B256, SdkError>>, SdkError> {
        self.batch(
            "eth_sendRawTransaction",
            txs.iter()
                .map(|tx| rpc_params![hex::encode_prefixed(tx.as_ref())]),
        )
        .await
    }

    /// `eth_getTransactionReceipt`: `None` while the transaction is not in a block.
    pub async fn get_transaction_receipt(
        &self,
        hash: B256,
    ) -> Result<Option<TransactionReceipt>, SdkError> {
        self.call("eth_getTransactionReceipt", rpc_params![hash])
            .await
    }

    /// `eth_getTransactionReceipt` for each of `hashes` in one batch request.
    pub async fn get_transaction_receipts(
        &self,
        hashes: &[B256],
    ) -> Result<Vec<Result<Option<TransactionReceipt>, SdkError>>, SdkError> {
        self.batch(
            "eth_getTransactionReceipt",
            hashes.iter().map(|hash| rpc_params![hash]),
        )
        .await
    }

    /// `eth_getBlockByNumber` with transaction hashes only (not full transactions).
    pub async fn get_block_by_number(
        &self,
        block: BlockNumberOrTag,
    ) -> Result<Option<Block>, SdkError> {
        self.call("eth_getBlockByNumber", rpc_params![block, false])
            .await
    }
}
