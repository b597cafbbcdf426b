//! Transactions: submitting one, and finding one (pending or included) with its receipt;
//! reads of an included one (its block's body) run on the heavy-method workers.

use alloy_eips::BlockNumberOrTag;
use alloy_primitives::{B256, Bytes};
use alloy_rpc_types_eth::{Index, Transaction, TransactionReceipt};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};

use crate::{
    convert::{position, rpc_tx},
    error::RpcError,
    rpc::{Outcome, Rpc},
};

/// `eth_*` methods that submit or find transactions.
#[rpc(server)]
pub trait EthTransactionsApi {
    /// Submits a signed transaction to the txpool.
    #[method(name = "eth_sendRawTransaction")]
    fn send_raw_transaction(&self, bytes: Bytes) -> RpcResult<B256>;
    /// A transaction, pending or included.
    #[method(name = "eth_getTransactionByHash")]
    async fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>>;
    /// An included transaction's receipt.
    #[method(name = "eth_getTransactionReceipt")]
    async fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>>;
    /// The transaction at a position in a block by number or tag.
    #[method(name = "eth_getTransactionByBlockNumberAndIndex")]
    async fn tx_by_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>>;
    /// The transaction at a position in a block by hash.
    #[method(name = "eth_getTransactionByBlockHashAndIndex")]
    async fn tx_by_hash_and_index(
        &self,
        hash: B256,
        index: Index,
    ) -> RpcResult<Option<Transaction>>;
    /// A transaction, pending or included, in its signed EIP-2718 form.
    #[method(name = "eth_getRawTransactionByHash")]
    async fn raw_transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Bytes>>;
}

impl Rpc {
    /// Where the included transaction with this hash is: block number and index.
    pub(crate) fn tx_location(&self, hash: B256) -> Outcome<Option<(u64, usize)>> {
        let location = self
            .ctx
            .view
            .tx_location(hash)
            .map_err(RpcError::internal)?;
        Ok(location.map(|(number, index)| (number, index as usize)))
    }

    /// The signed EIP-2718 bytes of the transaction with this hash, pending or included.
    pub(crate) fn raw_transaction(&self, hash: B256) -> Outcome<Option<Bytes>> {
        if let Some(pooled) = self.ctx.pool.get(&hash) {
            return Ok(Some(Bytes::from(pooled.tx.tx.encoded())));
        }
        let Some((number, index)) = self.tx_location(hash)? else {
            return Ok(None);
        };
        let block = self.visible_block(number, false)?;
        Ok(block.and_then(|block| {
            let (tx, _) = block.txs.get(index)?;
            Some(Bytes::from(tx.encoded()))
        }))
    }

    /// The transaction at `index` in block `number`, with its sender and position.
    fn tx_at(&self, number: u64, index: usize) -> Outcome<Option<Transaction>> {
        let block = self.visible_block(number, true)?;
        Ok(block.and_then(|block| {
            block
                .txs
                .get(index)
                .map(|(tx, sender)| rpc_tx(tx, *sender, Some(position(&block, index))))
        }))
    }
}

#[async_trait]
impl EthTransactionsApiServer for Rpc {
    fn send_raw_transaction(&self, bytes: Bytes) -> RpcResult<B256> {
        let pool = &self.ctx.pool;
        // Recovered here, on the server's runtime: one signature, cheaper than a hand-off
        // to a worker, and never on rayon's global pool, which imports blocks.
        let result = self
            .ctx
            .view
            .with_state(None, |state, header| {
                pool.add_one(&bytes, state, header.base_fee_per_gas)
            })
            .map_err(RpcError::from)?;
        let hash = result.map_err(RpcError::from)?;
        if let Some(admitted) = &self.ctx.admitted {
            // A closed channel means the node is stopping; the tx stays in the pool.
            let _ = admitted.send(bytes.to_vec());
        }
        Ok(hash)
    }

    async fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>> {
        if let Some(pooled) = self.ctx.pool.get(&hash) {
            return Ok(Some(rpc_tx(&pooled.tx.tx, pooled.tx.sender, None)));
        }
        Ok(self
            .heavy(move |rpc| match rpc.tx_location(hash)? {
                Some((number, index)) => rpc.tx_at(number, index),
                None => Ok(None),
            })
            .await?)
    }

    async fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>> {
        Ok(self
            .heavy(move |rpc| {
                let Some((number, index)) = rpc.tx_location(hash)? else {
                    return Ok(None);
                };
                Ok(rpc.receipts(number)?.and_then(|(_, mut receipts)| {
                    index
                        .lt(&receipts.len())
                        .then(|| receipts.swap_remove(index))
                }))
            })
            .await?)
    }

    async fn tx_by_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>> {
        let number = self.tag_number(number)?;
        Ok(self
            .heavy(move |rpc| rpc.tx_at(number, index.into()))
            .await?)
    }

    async fn tx_by_hash_and_index(
        &self,
        hash: B256,
        index: Index,
    ) -> RpcResult<Option<Transaction>> {
        Ok(self
            .heavy(move |rpc| match rpc.number_by_hash(hash)? {
                Some(number) => rpc.tx_at(number, index.into()),
                None => Ok(None),
            })
            .await?)
    }

    async fn raw_transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Bytes>> {
        Ok(self.heavy(move |rpc| rpc.raw_transaction(hash)).await?)
    }
}
