//! Blocks by number, tag or hash: the head's number, whole blocks, their transaction
//! counts and their receipts. Everything that reads a block's body runs on the
//! heavy-method workers.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{B256, U64};
use alloy_rpc_types_eth::{Block, Header, TransactionReceipt};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_storage::read;

use crate::{
    convert::{StoredBlock, rpc_block, rpc_receipts},
    error::RpcError,
    limits::{Json, ResponseBudget},
    rpc::{Outcome, Rpc},
};

/// `eth_*` methods that read blocks.
#[rpc(server)]
pub trait EthBlocksApi {
    /// The head's number.
    #[method(name = "eth_blockNumber")]
    fn block_number(&self) -> RpcResult<U64>;
    /// A block by number or tag.
    #[method(name = "eth_getBlockByNumber")]
    async fn block_by_number(
        &self,
        number: BlockNumberOrTag,
        full: bool,
    ) -> RpcResult<Option<Block>>;
    /// A block by hash.
    #[method(name = "eth_getBlockByHash")]
    async fn block_by_hash(&self, hash: B256, full: bool) -> RpcResult<Option<Block>>;
    /// How many transactions a block by number or tag holds.
    #[method(name = "eth_getBlockTransactionCountByNumber")]
    async fn block_tx_count_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<U64>>;
    /// How many transactions a block by hash holds.
    #[method(name = "eth_getBlockTransactionCountByHash")]
    async fn block_tx_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>>;
    /// Every receipt of a block.
    #[method(name = "eth_getBlockReceipts")]
    async fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<Json>>>;
    /// A block's header by number or tag.
    #[method(name = "eth_getHeaderByNumber")]
    async fn header_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<Header>>;
    /// A block's header by hash.
    #[method(name = "eth_getHeaderByHash")]
    async fn header_by_hash(&self, hash: B256) -> RpcResult<Option<Header>>;
}

impl Rpc {
    fn block(&self, number: u64, full: bool) -> Outcome<Option<Block>> {
        let Some(block) = self.visible_block(number, full)? else {
            return Ok(None);
        };
        let bloom = read::logs_bloom(self.ctx.view.store(), number)
            .map_err(RpcError::internal)?
            .unwrap_or_default();
        Ok(Some(rpc_block(&block, bloom, full)))
    }

    fn tx_count(&self, number: u64) -> Outcome<Option<U64>> {
        let block = self.visible_block(number, false)?;
        Ok(block.map(|block| U64::from(block.txs.len())))
    }

    /// Block `number` with the RPC receipts of its transactions; `None` until the head
    /// reaches it.
    pub(crate) fn receipts(
        &self,
        number: u64,
    ) -> Outcome<Option<(StoredBlock, Vec<TransactionReceipt>)>> {
        let Some(block) = self.visible_block(number, true)? else {
            return Ok(None);
        };
        let receipts = read::receipts(self.ctx.view.store(), number)
            .map_err(RpcError::internal)?
            .unwrap_or_default();
        let rpc = rpc_receipts(&block, &receipts);
        Ok(Some((block, rpc)))
    }
}

#[async_trait]
impl EthBlocksApiServer for Rpc {
    fn block_number(&self) -> RpcResult<U64> {
        Ok(U64::from(self.head()?))
    }

    async fn block_by_number(
        &self,
        number: BlockNumberOrTag,
        full: bool,
    ) -> RpcResult<Option<Block>> {
        let number = self.tag_number(number)?;
        Ok(self.heavy(move |rpc| rpc.block(number, full)).await?)
    }

    async fn block_by_hash(&self, hash: B256, full: bool) -> RpcResult<Option<Block>> {
        Ok(self
            .heavy(move |rpc| match rpc.number_by_hash(hash)? {
                Some(number) => rpc.block(number, full),
                None => Ok(None),
            })
            .await?)
    }

    async fn header_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<Header>> {
        let number = self.tag_number(number)?;
        let block = self.heavy(move |rpc| rpc.block(number, false)).await?;
        Ok(block.map(|block| block.header))
    }

    async fn header_by_hash(&self, hash: B256) -> RpcResult<Option<Header>> {
        let block = self
            .heavy(move |rpc| match rpc.number_by_hash(hash)? {
                Some(number) => rpc.block(number, false),
                None => Ok(None),
            })
            .await?;
        Ok(block.map(|block| block.header))
    }

    async fn block_tx_count_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<U64>> {
        let number = self.tag_number(number)?;
        Ok(self.heavy(move |rpc| rpc.tx_count(number)).await?)
    }

    async fn block_tx_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>> {
        Ok(self
            .heavy(move |rpc| match rpc.number_by_hash(hash)? {
                Some(number) => rpc.tx_count(number),
                None => Ok(None),
            })
            .await?)
    }

    async fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<Json>>> {
        let number = self.number_of(Some(block))?;
        Ok(self
            .heavy(move |rpc| {
                let Some((_, receipts)) = rpc.receipts(number)? else {
                    return Ok(None);
                };
                let mut budget = ResponseBudget::new(&rpc.ctx.config);
                let hint = || "Ask for the receipts one by one (eth_getTransactionReceipt).".into();
                let receipts = receipts
                    .iter()
                    .map(|receipt| budget.charge(receipt, hint))
                    .collect::<Outcome<_>>()?;
                Ok(Some(receipts))
            })
            .await?)
    }
}
