//! Blocks by number, tag or hash: the head's number, whole blocks, their transaction
//! counts and their receipts.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{B256, U64};
use alloy_rpc_types_eth::{Block, TransactionReceipt};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};
use stave_storage::read;

use crate::{
    convert::{StoredBlock, rpc_block, rpc_receipts},
    error::RpcError,
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
    fn block_by_number(&self, number: BlockNumberOrTag, full: bool) -> RpcResult<Option<Block>>;
    /// A block by hash.
    #[method(name = "eth_getBlockByHash")]
    fn block_by_hash(&self, hash: B256, full: bool) -> RpcResult<Option<Block>>;
    /// How many transactions a block by number or tag holds.
    #[method(name = "eth_getBlockTransactionCountByNumber")]
    fn block_tx_count_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<U64>>;
    /// How many transactions a block by hash holds.
    #[method(name = "eth_getBlockTransactionCountByHash")]
    fn block_tx_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>>;
    /// Every receipt of a block.
    #[method(name = "eth_getBlockReceipts")]
    fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>>;
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

impl EthBlocksApiServer for Rpc {
    fn block_number(&self) -> RpcResult<U64> {
        Ok(U64::from(self.head()?))
    }

    fn block_by_number(&self, number: BlockNumberOrTag, full: bool) -> RpcResult<Option<Block>> {
        let number = self.tag_number(number)?;
        Ok(self.block(number, full)?)
    }

    fn block_by_hash(&self, hash: B256, full: bool) -> RpcResult<Option<Block>> {
        match self.number_by_hash(hash)? {
            Some(number) => Ok(self.block(number, full)?),
            None => Ok(None),
        }
    }

    fn block_tx_count_by_number(&self, number: BlockNumberOrTag) -> RpcResult<Option<U64>> {
        let number = self.tag_number(number)?;
        Ok(self.tx_count(number)?)
    }

    fn block_tx_count_by_hash(&self, hash: B256) -> RpcResult<Option<U64>> {
        match self.number_by_hash(hash)? {
            Some(number) => Ok(self.tx_count(number)?),
            None => Ok(None),
        }
    }

    fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>> {
        let number = self.number_of(Some(block))?;
        Ok(self.receipts(number)?.map(|(_, receipts)| receipts))
    }
}
