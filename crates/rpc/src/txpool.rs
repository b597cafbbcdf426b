//! `txpool_*`: what waits for a block, in go-ethereum's shapes.

use std::{collections::BTreeMap, sync::Arc};

use alloy_primitives::Address;

use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    convert::rpc_tx,
    limits::{Json, ResponseBudget},
    rpc::{Outcome, Rpc},
};

/// Transactions by sender (checksummed) and nonce (decimal), as go-ethereum keys them.
type BySender = BTreeMap<String, BTreeMap<String, Json>>;

/// What `txpool_content` answers, each transaction serialized once, as the response
/// budget counted it.
#[derive(Debug, Clone, Serialize)]
pub struct PoolContent {
    /// Transactions that can go in the next block.
    pending: BySender,
    /// Transactions behind a nonce gap or a balance they would exceed.
    queued: BySender,
}

/// `txpool_*` methods.
#[rpc(server)]
pub trait TxpoolApi {
    /// Pending and queued counts (go-ethereum's fields), and `dropped`: how many
    /// transactions left the pool without being included, by reason.
    #[method(name = "txpool_status")]
    fn status(&self) -> RpcResult<Value>;
    /// Every pooled transaction by sender and nonce.
    #[method(name = "txpool_content")]
    async fn content(&self) -> RpcResult<PoolContent>;
    /// One sender's pooled transactions by nonce.
    #[method(name = "txpool_contentFrom")]
    async fn content_from(&self, sender: Address) -> RpcResult<SenderContent>;
    /// Every pooled transaction by sender and nonce, summed up in go-ethereum's words:
    /// `to: value wei + gas gas × price wei`.
    #[method(name = "txpool_inspect")]
    async fn inspect(&self) -> RpcResult<PoolContent>;
}

/// What `txpool_contentFrom` answers: one sender's transactions by nonce (decimal).
#[derive(Debug, Clone, Serialize)]
pub struct SenderContent {
    /// Transactions that can go in the next block.
    pending: BTreeMap<String, Json>,
    /// Transactions behind a nonce gap or a balance they would exceed.
    queued: BTreeMap<String, Json>,
}

#[async_trait]
impl TxpoolApiServer for Rpc {
    fn status(&self) -> RpcResult<Value> {
        let status = self.ctx.pool.status();
        let dropped: serde_json::Map<_, _> = self
            .ctx
            .pool
            .dropped()
            .iter()
            .map(|(reason, count)| (reason.to_string(), json!(format!("{count:#x}"))))
            .collect();
        Ok(json!({
            "pending": format!("{:#x}", status.pending),
            "queued": format!("{:#x}", status.queued),
            "dropped": dropped,
        }))
    }

    async fn content(&self) -> RpcResult<PoolContent> {
        Ok(self
            .heavy(|rpc| rpc.pool_content(None, |tx, sender| rpc_tx(&tx.tx.tx, sender, None)))
            .await?)
    }

    async fn content_from(&self, sender: Address) -> RpcResult<SenderContent> {
        Ok(self
            .heavy(move |rpc| {
                let mut content =
                    rpc.pool_content(Some(sender), |tx, sender| rpc_tx(&tx.tx.tx, sender, None))?;
                let key = sender.to_checksum(None);
                Ok(SenderContent {
                    pending: content.pending.remove(&key).unwrap_or_default(),
                    queued: content.queued.remove(&key).unwrap_or_default(),
                })
            })
            .await?)
    }

    async fn inspect(&self) -> RpcResult<PoolContent> {
        Ok(self
            .heavy(|rpc| rpc.pool_content(None, |tx, _| summary(tx)))
            .await?)
    }
}

/// A pooled transaction as `txpool_inspect` sums it up (go-ethereum's format; the price
/// is the fee cap for EIP-1559 transactions).
fn summary(tx: &stave_txpool::PoolTx) -> String {
    use alloy_consensus::Transaction as _;
    let envelope = tx.tx.tx.envelope();
    let to = match envelope.to() {
        Some(to) => to.to_checksum(None),
        None => "contract creation".to_string(),
    };
    format!(
        "{to}: {} wei + {} gas × {} wei",
        envelope.value(),
        envelope.gas_limit(),
        tx.max_fee
    )
}

impl Rpc {
    /// The pool's transactions (of `only` that sender, if given) by sender and nonce,
    /// each as `show` makes it, on the calling thread (a worker's), within the response
    /// cap.
    fn pool_content<T: Serialize>(
        &self,
        only: Option<Address>,
        show: impl Fn(&stave_txpool::PoolTx, Address) -> T,
    ) -> Outcome<PoolContent> {
        let mut budget = ResponseBudget::new(&self.ctx.config);
        let (mut pending, mut queued) = (BySender::new(), BySender::new());
        let content = self.ctx.pool.content();
        let senders = content
            .into_iter()
            .filter(|(sender, _)| only.is_none_or(|only| only == *sender));
        for (sender, content) in senders {
            let mut by_nonce = |txs: &[Arc<stave_txpool::PoolTx>]| {
                txs.iter()
                    .map(|tx| {
                        let shown = show(tx, sender);
                        let json =
                            budget.charge(&shown, || "Ask for txpool_status instead.".into())?;
                        Ok((tx.nonce.to_string(), json))
                    })
                    .collect::<Outcome<BTreeMap<_, _>>>()
            };
            if !content.pending.is_empty() {
                pending.insert(sender.to_checksum(None), by_nonce(&content.pending)?);
            }
            if !content.queued.is_empty() {
                queued.insert(sender.to_checksum(None), by_nonce(&content.queued)?);
            }
        }
        Ok(PoolContent { pending, queued })
    }
}
