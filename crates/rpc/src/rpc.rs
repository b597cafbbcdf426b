//! The handle every namespace's methods run on, and the lookups most of them share: the
//! head, the block a tag or id stands for, the state at a block.

use std::sync::Arc;

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::B256;
use stave_storage::read;

use crate::{
    convert::{StoredBlock, load_block},
    error::RpcError,
    eth::{
        fees::{REWARD_CACHE_BLOCKS, RewardCache},
        filters::Filters,
    },
    server::NodeContext,
    workers::Workers,
};

/// What a method returns before jsonrpsee turns the error into its JSON form.
pub(crate) type Outcome<T> = Result<T, RpcError>;

/// The method implementations over a shared [`NodeContext`], the server's installed
/// filters and its workers for heavy methods. Each namespace file implements its trait
/// on it.
#[derive(Clone)]
pub(crate) struct Rpc {
    /// The chain, the pool, the stream of new blocks and the limits.
    pub(crate) ctx: Arc<NodeContext>,
    /// The filters clients installed with `eth_new*Filter`.
    pub(crate) filters: Arc<Filters>,
    /// Where heavy methods run ([`Rpc::heavy`]).
    workers: Arc<Workers>,
    /// `eth_feeHistory` rewards of blocks already read.
    pub(crate) fee_rewards: Arc<RewardCache>,
}

impl Rpc {
    /// A handle over `ctx` with no filters installed and its worker threads started.
    pub(crate) fn new(ctx: NodeContext) -> Outcome<Self> {
        let workers = Workers::new(
            ctx.config.worker_threads,
            ctx.config.worker_queue,
            ctx.config.nice,
        )?;
        Ok(Self {
            filters: Arc::new(Filters::new(ctx.config.max_filters)),
            ctx: Arc::new(ctx),
            workers: Arc::new(workers),
            fee_rewards: Arc::new(RewardCache::new(REWARD_CACHE_BLOCKS)),
        })
    }

    /// Runs `work` on the heavy-method workers (see [`crate::workers`]): every method that
    /// reads block bodies, scans logs or runs the EVM goes through here.
    pub(crate) async fn heavy<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Rpc) -> Outcome<T> + Send + 'static,
    ) -> Outcome<T> {
        let rpc = self.clone();
        self.workers.run(move || work(&rpc)).await
    }

    pub(crate) fn head(&self) -> Outcome<u64> {
        Ok(self.ctx.view.head().map_err(RpcError::internal)?.0)
    }

    /// The block number a tag or id stands for. `safe` and `finalized` are the head: a
    /// node commits a block only once it is final (a validator or full node once the
    /// validators' certificate finalizes it; a single producer's blocks are final as
    /// made), so nothing below the head can be reverted. `pending` is the head too:
    /// blocks are built at once, so there is no pending block.
    pub(crate) fn number_of(&self, block: Option<BlockId>) -> Outcome<u64> {
        match block.unwrap_or(BlockId::Number(BlockNumberOrTag::Latest)) {
            BlockId::Hash(hash) => self.number_by_hash(hash.block_hash)?.ok_or_else(|| {
                RpcError::InvalidParams(format!("block {} not found", hash.block_hash))
            }),
            BlockId::Number(tag) => self.tag_number(tag),
        }
    }

    pub(crate) fn tag_number(&self, tag: BlockNumberOrTag) -> Outcome<u64> {
        Ok(match tag {
            BlockNumberOrTag::Earliest => 0,
            BlockNumberOrTag::Number(number) => number,
            _ => self.head()?,
        })
    }

    pub(crate) fn with_state<R>(
        &self,
        block: Option<BlockId>,
        query: impl FnOnce(&dyn stave_exec::StateReader) -> Result<R, stave_exec::StateError>,
    ) -> Outcome<R> {
        let number = self.number_of(block)?;
        self.ctx
            .view
            .with_state(Some(number), |state, _| query(state))?
            .map_err(RpcError::internal)
    }

    /// Stored block `number`, with its senders when `senders` (see [`load_block`]). A
    /// block stored but whose state is not in yet is `None`: it is shown (with its
    /// transactions and receipts) only once the head reaches it, so a client that saw a
    /// receipt also sees the state after it.
    pub(crate) fn visible_block(&self, number: u64, senders: bool) -> Outcome<Option<StoredBlock>> {
        if number > self.head()? {
            return Ok(None);
        }
        load_block(self.ctx.view.store(), number, senders)
    }

    /// The number of the stored block with this hash.
    pub(crate) fn number_by_hash(&self, hash: B256) -> Outcome<Option<u64>> {
        read::block_number(self.ctx.view.store(), hash).map_err(RpcError::internal)
    }
}
