//! Subscriptions over WebSocket: `newHeads`, `logs` and `newPendingTransactions`.

use std::time::Duration;

use alloy_primitives::Address;
use alloy_rpc_types_eth::Filter;
use jsonrpsee::{
    PendingSubscriptionSink,
    core::{SubscriptionResult, async_trait},
    proc_macros::rpc,
};
use serde_json::{Value, json};
use stave_node::Produced;
use stave_primitives::block_bloom;
use tokio::sync::broadcast;

use crate::{
    convert::{StoredBlock, rpc_header, rpc_logs},
    error::RpcError,
    limits::check_filter,
    rpc::Rpc,
};

/// How often a `newPendingTransactions` subscription reads the pool's admission log.
const PENDING_POLL: Duration = Duration::from_millis(100);

/// `eth_subscribe` and `eth_unsubscribe`.
#[rpc(server)]
pub trait EthPubSubApi {
    /// `newHeads`, `logs` or `newPendingTransactions` notifications.
    #[subscription(name = "eth_subscribe" => "eth_subscription", unsubscribe = "eth_unsubscribe", item = Value)]
    async fn subscribe(
        &self,
        kind: String,
        filter: Option<Filter>,
    ) -> jsonrpsee::core::SubscriptionResult;
}

#[async_trait]
impl EthPubSubApiServer for Rpc {
    async fn subscribe(
        &self,
        pending: PendingSubscriptionSink,
        kind: String,
        filter: Option<Filter>,
    ) -> SubscriptionResult {
        if kind == "newPendingTransactions" {
            return self.pending_transactions(pending).await;
        }
        if kind != "newHeads" && kind != "logs" {
            pending
                .reject(RpcError::InvalidParams(format!(
                    "unsupported subscription {kind:?}: newHeads, logs and newPendingTransactions are"
                )))
                .await;
            return Ok(());
        }
        let filter = filter.unwrap_or_default();
        if let Err(error) = check_filter(&filter, &self.ctx.config) {
            pending.reject(error).await;
            return Ok(());
        }
        let mut blocks = self.ctx.heads.subscribe();
        let sink = pending.accept().await?;
        loop {
            let produced = tokio::select! {
                _ = sink.closed() => return Ok(()),
                next = blocks.recv() => match next {
                    Ok(produced) => produced,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "a subscriber fell behind; blocks skipped");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            let items = notifications(&kind, &filter, &produced);
            for item in items {
                sink.send(serde_json::value::to_raw_value(&item)?).await?;
            }
        }
    }
}

impl Rpc {
    /// A `newPendingTransactions` subscription: the hash of every transaction the pool
    /// admits from now on, read from its admission log every [`PENDING_POLL`].
    async fn pending_transactions(&self, pending: PendingSubscriptionSink) -> SubscriptionResult {
        let sink = pending.accept().await?;
        let mut next = self.ctx.pool.admission_position();
        let mut ticks = tokio::time::interval(PENDING_POLL);
        loop {
            tokio::select! {
                _ = sink.closed() => return Ok(()),
                _ = ticks.tick() => {}
            }
            let (hashes, end) = self.ctx.pool.admitted_since(next);
            next = end;
            for hash in hashes {
                sink.send(serde_json::value::to_raw_value(&hash)?).await?;
            }
        }
    }
}

/// What a `kind` subscriber hears about a new block.
fn notifications(kind: &str, filter: &Filter, produced: &Produced) -> Vec<Value> {
    let block = &produced.block;
    let bloom = block_bloom(&produced.receipts);
    if kind == "newHeads" {
        let size = alloy_rlp::encode(block.header()).len();
        return vec![json!(rpc_header(block.header(), block.hash(), bloom, size))];
    }
    if !filter.matches_bloom(bloom) {
        return Vec::new();
    }
    let stored = StoredBlock {
        header: block.header().clone(),
        hash: block.hash(),
        txs: block
            .transactions()
            .iter()
            .map(|tx| (tx.clone(), Address::ZERO))
            .collect(),
        size: 0,
    };
    rpc_logs(&stored, &produced.receipts)
        .into_iter()
        .flatten()
        .filter(|log| filter.matches(&log.inner))
        .map(|log| json!(log))
        .collect()
}
