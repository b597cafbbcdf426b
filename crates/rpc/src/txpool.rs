//! `txpool_*`: what waits for a block, in go-ethereum's shapes.

use std::{collections::BTreeMap, sync::Arc};

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
        Ok(self.heavy(Rpc::pool_content).await?)
    }
}

impl Rpc {
    /// `txpool_content` on the calling thread (a worker's), within the response cap.
    fn pool_content(&self) -> Outcome<PoolContent> {
        let mut budget = ResponseBudget::new(&self.ctx.config);
        let (mut pending, mut queued) = (BySender::new(), BySender::new());
        for (sender, content) in self.ctx.pool.content() {
            let mut by_nonce = |txs: &[Arc<stave_txpool::PoolTx>]| {
                txs.iter()
                    .map(|tx| {
                        let rpc = rpc_tx(&tx.tx.tx, sender, None);
                        let json =
                            budget.charge(&rpc, || "Ask for txpool_status instead.".into())?;
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
