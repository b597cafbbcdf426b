//! The method implementations and the server that serves them on HTTP and WebSocket.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy_consensus::Transaction as _;
use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, B256, Bytes, TxKind, U64, U256};
use alloy_rpc_types_eth::{
    Block, FeeHistory, Filter, FilterBlockOption, FilterChanges, Index, Log, Transaction,
    TransactionReceipt, TransactionRequest,
};
use jsonrpsee::{
    PendingSubscriptionSink, RpcModule,
    core::{RpcResult, SubscriptionResult, async_trait},
    server::{BatchRequestConfig, ServerBuilder, ServerConfig, ServerHandle},
};
use serde_json::{Value, json};
use stave_exec::{BlockEnv, CallOutcome, CallRequest};
use stave_node::{ChainView, Produced, ViewError};
use stave_primitives::block_bloom;
use stave_storage::commit;
use stave_txpool::TxPool;
use tokio::sync::broadcast;

use crate::{
    api::{EthApiServer, TxpoolApiServer, Web3ApiServer},
    convert::{
        StoredBlock, load_block, load_body, position, rpc_block, rpc_header, rpc_logs,
        rpc_receipts, rpc_tx,
    },
    error::{RpcError, revert_reason},
    filters::{FilterKind, Filters},
};

/// How often a `newPendingTransactions` subscription reads the pool's admission log.
const PENDING_POLL: Duration = Duration::from_millis(100);
/// How much longer than the EVM timeout a call's answer is awaited (see `Rpc::evm`).
const EVM_GRACE: Duration = Duration::from_secs(1);

/// Limits and addresses of the RPC server. The defaults are the safe ones operators ask of
/// geth, reth and Besu.
#[derive(Debug, Clone)]
pub struct RpcConfig {
    /// Where to listen (HTTP and WebSocket on one port); localhost unless configured.
    pub addr: SocketAddr,
    /// Most calls in one batch.
    pub max_batch: u32,
    /// Largest request body, in bytes.
    pub max_request_bytes: u32,
    /// Largest response body, in bytes.
    pub max_response_bytes: u32,
    /// Most open connections.
    pub max_connections: u32,
    /// Most gas an `eth_call` or `eth_estimateGas` may use.
    pub gas_cap: u64,
    /// Longest an `eth_call` or `eth_estimateGas` may run.
    pub evm_timeout: Duration,
    /// Most blocks one `eth_getLogs` may scan.
    pub max_log_blocks: u64,
    /// Most logs one `eth_getLogs` may return.
    pub max_logs: usize,
    /// The priority fee suggested to wallets, in wei.
    pub suggested_tip: u128,
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8545)),
            max_batch: 1_000,
            max_request_bytes: 25 * 1024 * 1024,
            max_response_bytes: 100 * 1024 * 1024,
            max_connections: 500,
            gas_cap: 50_000_000,
            evm_timeout: Duration::from_secs(5),
            max_log_blocks: 10_000,
            max_logs: 10_000,
            suggested_tip: 1_000_000_000,
        }
    }
}

/// What the methods read and write: the chain, the pool, and the stream of new blocks.
#[derive(Clone)]
pub struct NodeContext {
    /// State and blocks.
    pub view: Arc<ChainView<'static>>,
    /// Where submitted transactions go.
    pub pool: Arc<TxPool>,
    /// Every committed block, for subscriptions.
    pub heads: broadcast::Sender<Arc<Produced>>,
    /// Where each transaction the pool admits from a client goes next (to gossip, so
    /// peers get it); `None` on a node without peers.
    pub admitted: Option<tokio::sync::mpsc::UnboundedSender<Vec<u8>>>,
    /// Limits.
    pub config: RpcConfig,
}

/// Starts the server; it runs until the handle is stopped. Returns the bound address.
pub async fn start(ctx: NodeContext) -> Result<(SocketAddr, ServerHandle), RpcError> {
    let config = &ctx.config;
    let server_config = ServerConfig::builder()
        .max_request_body_size(config.max_request_bytes)
        .max_response_body_size(config.max_response_bytes)
        .max_connections(config.max_connections)
        .set_batch_request_config(BatchRequestConfig::Limit(config.max_batch))
        .set_id_provider(HexIdProvider)
        .build();
    let server = ServerBuilder::default()
        .set_config(server_config)
        .build(config.addr)
        .await
        .map_err(|error| {
            RpcError::Internal(format!("cannot listen on {}: {error}", config.addr))
        })?;
    let addr = server.local_addr().map_err(RpcError::internal)?;
    let rpc = Rpc(Arc::new(ctx), Arc::default());
    let mut module = RpcModule::new(());
    module
        .merge(Web3ApiServer::into_rpc(rpc.clone()))
        .map_err(RpcError::internal)?;
    module
        .merge(EthApiServer::into_rpc(rpc.clone()))
        .map_err(RpcError::internal)?;
    module
        .merge(TxpoolApiServer::into_rpc(rpc))
        .map_err(RpcError::internal)?;
    Ok((addr, server.start(module)))
}

/// Subscription ids as go-ethereum makes them (`0x` and 32 hex digits), which some
/// clients (viem) expect rather than JSON numbers.
#[derive(Debug)]
struct HexIdProvider;

impl jsonrpsee::core::traits::IdProvider for HexIdProvider {
    fn next_id(&self) -> jsonrpsee::types::SubscriptionId<'static> {
        let id: [u8; 16] = rand::random();
        jsonrpsee::types::SubscriptionId::Str(format!("0x{}", hex::encode(id)).into())
    }
}

/// The method implementations over a shared [`NodeContext`] and the server's installed
/// filters.
#[derive(Clone)]
struct Rpc(Arc<NodeContext>, Arc<Filters>);

type Outcome<T> = Result<T, RpcError>;

impl Rpc {
    fn head(&self) -> Outcome<u64> {
        Ok(self.0.view.head().map_err(RpcError::internal)?.0)
    }

    /// The block number a tag or id stands for (`pending` is the head: blocks are built
    /// at once, so there is no pending block).
    fn number_of(&self, block: Option<BlockId>) -> Outcome<u64> {
        match block.unwrap_or(BlockId::Number(BlockNumberOrTag::Latest)) {
            BlockId::Hash(hash) => self.number_by_hash(hash.block_hash)?.ok_or_else(|| {
                RpcError::InvalidParams(format!("block {} not found", hash.block_hash))
            }),
            BlockId::Number(tag) => self.tag_number(tag),
        }
    }

    fn tag_number(&self, tag: BlockNumberOrTag) -> Outcome<u64> {
        Ok(match tag {
            BlockNumberOrTag::Earliest => 0,
            BlockNumberOrTag::Number(number) => number,
            _ => self.head()?,
        })
    }

    fn with_state<R>(
        &self,
        block: Option<BlockId>,
        query: impl FnOnce(&dyn stave_exec::StateReader) -> Result<R, stave_exec::StateError>,
    ) -> Outcome<R> {
        let number = self.number_of(block)?;
        self.0
            .view
            .with_state(Some(number), |state, _| query(state))?
            .map_err(RpcError::internal)
    }

    /// False for a block stored but whose state is not in yet: it is shown (with its
    /// transactions and receipts) only once the head reaches it, so a client that saw a
    /// receipt also sees the state after it.
    fn visible(&self, number: u64) -> Outcome<bool> {
        Ok(number <= self.head()?)
    }

    fn block(&self, number: u64, full: bool) -> Outcome<Option<Block>> {
        if !self.visible(number)? {
            return Ok(None);
        }
        let store = self.0.view.store();
        let Some(block) = load_block(store, number, full)? else {
            return Ok(None);
        };
        let bloom = commit::logs_bloom(store, number)
            .map_err(RpcError::internal)?
            .unwrap_or_default();
        Ok(Some(rpc_block(&block, bloom, full)))
    }

    /// The number of the stored block with this hash.
    fn number_by_hash(&self, hash: B256) -> Outcome<Option<u64>> {
        commit::block_number(self.0.view.store(), hash).map_err(RpcError::internal)
    }

    fn tx_count(&self, number: u64) -> Outcome<Option<U64>> {
        if !self.visible(number)? {
            return Ok(None);
        }
        let block = load_block(self.0.view.store(), number, false)?;
        Ok(block.map(|block| U64::from(block.txs.len())))
    }

    /// The transaction at `index` in block `number`, with its sender and position.
    fn tx_at(&self, number: u64, index: usize) -> Outcome<Option<Transaction>> {
        if !self.visible(number)? {
            return Ok(None);
        }
        let block = load_block(self.0.view.store(), number, true)?;
        Ok(block.and_then(|block| {
            block
                .txs
                .get(index)
                .map(|(tx, sender)| rpc_tx(tx, *sender, Some(position(&block, index))))
        }))
    }

    fn receipts(&self, number: u64) -> Outcome<Option<(StoredBlock, Vec<TransactionReceipt>)>> {
        if !self.visible(number)? {
            return Ok(None);
        }
        let store = self.0.view.store();
        let Some(block) = load_block(store, number, true)? else {
            return Ok(None);
        };
        let receipts = commit::receipts(store, number)
            .map_err(RpcError::internal)?
            .unwrap_or_default();
        let rpc = rpc_receipts(&block, &receipts);
        Ok(Some((block, rpc)))
    }

    /// The blocks a log filter covers, its `latest` (or a number past the head) at the head.
    fn log_range(&self, filter: &Filter) -> Outcome<(u64, u64)> {
        Ok(match filter.block_option {
            FilterBlockOption::AtBlockHash(hash) => {
                let number = self
                    .number_by_hash(hash)?
                    .ok_or_else(|| RpcError::InvalidParams(format!("block {hash} not found")))?;
                (number, number)
            }
            FilterBlockOption::Range {
                from_block,
                to_block,
            } => {
                let head = self.head()?;
                let from = self.tag_number(from_block.unwrap_or_default())?;
                let to = self.tag_number(to_block.unwrap_or_default())?.min(head);
                (from, to)
            }
        })
    }

    /// What a block filter (`filter` `None`) or a log filter reports from block `next` on,
    /// and the block its next poll starts at. At most as many blocks per poll as one
    /// eth_getLogs scans; the next poll goes on.
    fn chain_changes(&self, filter: Option<&Filter>, next: u64) -> Outcome<(FilterChanges, u64)> {
        let to = self
            .head()?
            .min(next.saturating_add(self.0.config.max_log_blocks - 1));
        if next > to {
            return Ok((FilterChanges::Empty, next));
        }
        let changes = match filter {
            None => {
                let store = self.0.view.store();
                let hashes = (next..=to)
                    .map(|number| {
                        commit::header(store, number)
                            .map_err(RpcError::internal)?
                            .map(|header| header.hash_slow())
                            .ok_or_else(|| RpcError::Internal(format!("block {number} missing")))
                    })
                    .collect::<Outcome<Vec<_>>>()?;
                FilterChanges::Hashes(hashes)
            }
            Some(filter) => {
                // As in go-ethereum, a tag (`latest`, the default) bounds nothing here: the
                // filter reports every block since its last poll; block numbers bound it.
                let (from, last) = match filter.block_option {
                    FilterBlockOption::AtBlockHash(_) => self.log_range(filter)?,
                    FilterBlockOption::Range {
                        from_block,
                        to_block,
                    } => (
                        from_block.and_then(|tag| tag.as_number()).unwrap_or(0),
                        to_block.and_then(|tag| tag.as_number()).unwrap_or(u64::MAX),
                    ),
                };
                let (from, last) = (from.max(next), last.min(to));
                let logs = if from > last {
                    Vec::new()
                } else {
                    self.logs_between(filter, from, last)?
                };
                FilterChanges::Logs(logs)
            }
        };
        Ok((changes, to + 1))
    }

    /// The logs `filter` matches in blocks `from..=to`, within the configured limits on
    /// blocks scanned and logs returned.
    fn logs_between(&self, filter: &Filter, from: u64, to: u64) -> Outcome<Vec<Log>> {
        if from > to {
            return Ok(Vec::new());
        }
        let store = self.0.view.store();
        let limit = self.0.config.max_log_blocks;
        if to - from >= limit {
            return Err(RpcError::LimitExceeded(format!(
                "query exceeds max block range {limit}. Try with this block range [{:#x}, {:#x}].",
                from,
                from + limit - 1
            )));
        }
        let max_logs = self.0.config.max_logs;
        let mut found = Vec::new();
        for number in from..=to {
            let bloom = commit::logs_bloom(store, number)
                .map_err(RpcError::internal)?
                .unwrap_or_default();
            if !filter.matches_bloom(bloom) {
                continue;
            }
            let Some(block) = load_block(store, number, false)? else {
                continue;
            };
            let receipts = commit::receipts(store, number)
                .map_err(RpcError::internal)?
                .unwrap_or_default();
            found.extend(
                rpc_logs(&block, &receipts)
                    .into_iter()
                    .flatten()
                    .filter(|log| filter.matches(&log.inner)),
            );
            if found.len() > max_logs {
                let last = number.saturating_sub(1).max(from);
                return Err(RpcError::LimitExceeded(format!(
                    "query returned more than {max_logs} results. Try with this block range [{from:#x}, {last:#x}]."
                )));
            }
        }
        Ok(found)
    }

    /// Runs `work` on a blocking thread; the EVM stops at the deadline it is given (the
    /// EVM timeout from now). The answer is awaited a little longer than that, so a call
    /// stuck outside the EVM (a slow disk) is not waited on forever.
    async fn evm<T: Send + 'static>(
        &self,
        work: impl FnOnce(Rpc, Instant) -> Outcome<T> + Send + 'static,
    ) -> Outcome<T> {
        let rpc = self.clone();
        let timeout = self.0.config.evm_timeout;
        let deadline = Instant::now() + timeout;
        let task = tokio::task::spawn_blocking(move || work(rpc, deadline));
        match tokio::time::timeout(timeout + EVM_GRACE, task).await {
            Ok(joined) => joined.map_err(RpcError::internal)?,
            Err(_) => Err(self.timed_out()),
        }
    }

    /// The error of a call stopped at the EVM timeout, in go-ethereum's words.
    fn timed_out(&self) -> RpcError {
        RpcError::Internal(format!(
            "execution aborted (timeout = {}s)",
            self.0.config.evm_timeout.as_secs_f64()
        ))
    }

    fn call_request(&self, request: &TransactionRequest, gas: Option<u64>) -> CallRequest {
        let cap = self.0.config.gas_cap;
        CallRequest {
            from: request.from.unwrap_or_default(),
            to: match request.to {
                Some(TxKind::Call(to)) => Some(to),
                _ => None,
            },
            gas: gas.or(request.gas).unwrap_or(cap).min(cap),
            // Calls are free: a caller need not hold ETH for gas to read or estimate.
            gas_price: 0,
            value: request.value.unwrap_or_default(),
            input: request.input.input().cloned().unwrap_or_default(),
        }
    }

    fn run_call(
        &self,
        request: &CallRequest,
        number: u64,
        deadline: Instant,
    ) -> Outcome<CallOutcome> {
        let chain_id = self.0.view.spec().chain_id();
        let outcome = self
            .0
            .view
            .with_state(Some(number), |state, header| {
                stave_exec::call_until(state, BlockEnv::new(chain_id, header), request, deadline)
            })?
            .map_err(RpcError::internal)?;
        match outcome {
            CallOutcome::TimedOut => Err(self.timed_out()),
            outcome => Ok(outcome),
        }
    }
}

fn failed(outcome: CallOutcome) -> RpcError {
    match outcome {
        CallOutcome::Revert { output, .. } => RpcError::Reverted {
            reason: revert_reason(&output),
            data: output,
        },
        CallOutcome::Halt { reason, .. } => {
            RpcError::Internal(format!("execution failed: {reason}"))
        }
        CallOutcome::Invalid(reason) => RpcError::Internal(reason),
        CallOutcome::Success { .. } | CallOutcome::TimedOut => {
            RpcError::Internal(format!("unexpected outcome {outcome:?}"))
        }
    }
}

impl Web3ApiServer for Rpc {
    fn client_version(&self) -> RpcResult<String> {
        Ok(format!("stave/v{}", env!("CARGO_PKG_VERSION")))
    }

    fn net_version(&self) -> RpcResult<String> {
        Ok(self.0.view.spec().chain_id().to_string())
    }

    fn net_listening(&self) -> RpcResult<bool> {
        Ok(true)
    }
}

#[async_trait]
impl EthApiServer for Rpc {
    fn chain_id(&self) -> RpcResult<U64> {
        Ok(U64::from(self.0.view.spec().chain_id()))
    }

    fn block_number(&self) -> RpcResult<U64> {
        Ok(U64::from(self.head()?))
    }

    fn accounts(&self) -> RpcResult<Vec<Address>> {
        Ok(Vec::new())
    }

    fn syncing(&self) -> RpcResult<bool> {
        Ok(false)
    }

    fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256> {
        Ok(self.with_state(block, |state| {
            Ok(state.account(address)?.map_or(U256::ZERO, |a| a.balance))
        })?)
    }

    fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64> {
        // The pool first, then the state: the producer drops included transactions from
        // the pool only after their block's state is in, so a transaction missing from the
        // pool is then counted by the state (the other order can miss it in both).
        let pending = matches!(block, Some(BlockId::Number(BlockNumberOrTag::Pending)));
        let pooled = if pending {
            self.0.pool.pending_nonce(address)
        } else {
            None
        };
        let nonce = self.with_state(block, |state| {
            Ok(state.account(address)?.map_or(0, |a| a.nonce))
        })?;
        Ok(U64::from(pooled.map_or(nonce, |pooled| pooled.max(nonce))))
    }

    fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes> {
        Ok(
            self.with_state(block, |state| match state.account(address)? {
                Some(account) if account.code_hash != alloy_primitives::KECCAK256_EMPTY => {
                    Ok(state.code(account.code_hash)?.unwrap_or_default())
                }
                _ => Ok(Bytes::new()),
            })?,
        )
    }

    fn storage_at(&self, address: Address, slot: U256, block: Option<BlockId>) -> RpcResult<B256> {
        Ok(self.with_state(block, |state| Ok(B256::from(state.storage(address, slot)?)))?)
    }

    async fn call(&self, request: TransactionRequest, block: Option<BlockId>) -> RpcResult<Bytes> {
        let number = self.number_of(block)?;
        Ok(self
            .evm(move |rpc, deadline| {
                let call = rpc.call_request(&request, None);
                match rpc.run_call(&call, number, deadline)? {
                    CallOutcome::Success { output, .. } => Ok(output),
                    other => Err(failed(other)),
                }
            })
            .await?)
    }

    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
    ) -> RpcResult<U64> {
        let number = self.number_of(block)?;
        Ok(self
            .evm(move |rpc, deadline| {
                let mut call = rpc.call_request(&request, None);
                let cap = call.gas;
                let used = match rpc.run_call(&call, number, deadline)? {
                    CallOutcome::Success { gas_used, .. } => gas_used,
                    CallOutcome::Halt { .. } => {
                        return Err(RpcError::Internal(format!(
                            "gas required exceeds allowance ({cap})"
                        )));
                    }
                    other => return Err(failed(other)),
                };
                // Refunds and the 63/64 rule make the limit a call needs exceed what it
                // uses: search between the two.
                let (mut low, mut high) = (used.saturating_sub(1), cap);
                while low + 1 < high {
                    let mid = low + (high - low) / 2;
                    call.gas = mid;
                    match rpc.run_call(&call, number, deadline)? {
                        CallOutcome::Success { .. } => high = mid,
                        _ => low = mid,
                    }
                }
                Ok(U64::from(high))
            })
            .await?)
    }

    fn gas_price(&self) -> RpcResult<U256> {
        let base_fee = self.0.view.spec().base_fee();
        Ok(U256::from(
            u128::from(base_fee) + self.0.config.suggested_tip,
        ))
    }

    fn max_priority_fee(&self) -> RpcResult<U256> {
        Ok(U256::from(self.0.config.suggested_tip))
    }

    fn fee_history(
        &self,
        block_count: U64,
        newest: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory> {
        const MAX_BLOCKS: u64 = 1_024;
        let newest = self.tag_number(newest)?.min(self.head()?);
        let count = block_count.to::<u64>().clamp(1, MAX_BLOCKS).min(newest + 1);
        let oldest = newest + 1 - count;
        let store = self.0.view.store();
        let mut history = FeeHistory {
            oldest_block: oldest,
            ..FeeHistory::default()
        };
        let mut rewards = Vec::new();
        let mut next_base_fee = 0;
        for number in oldest..=newest {
            let header = commit::header(store, number)
                .map_err(RpcError::internal)?
                .ok_or(RpcError::View(ViewError::UnknownBlock(number)))?;
            history
                .base_fee_per_gas
                .push(u128::from(header.base_fee_per_gas));
            history
                .gas_used_ratio
                .push(header.gas_used as f64 / header.gas_limit.max(1) as f64);
            next_base_fee = header.base_fee_per_gas;
            if let Some(percentiles) = &reward_percentiles {
                let mut tips: Vec<u128> = load_body(store, number)?
                    .iter()
                    .map(|tx| {
                        tx.envelope()
                            .effective_tip_per_gas(header.base_fee_per_gas)
                            .unwrap_or_default()
                    })
                    .collect();
                tips.sort_unstable();
                rewards.push(
                    percentiles
                        .iter()
                        .map(|p| {
                            let at = ((p / 100.0) * tips.len() as f64) as usize;
                            tips.get(at.min(tips.len().saturating_sub(1)))
                                .copied()
                                .unwrap_or(0)
                        })
                        .collect(),
                );
            }
        }
        // The base fee is fixed by the genesis: the next block's is the newest one's.
        history.base_fee_per_gas.push(u128::from(next_base_fee));
        history.reward = reward_percentiles.map(|_| rewards);
        Ok(history)
    }

    fn send_raw_transaction(&self, bytes: Bytes) -> RpcResult<B256> {
        let pool = &self.0.pool;
        let result = self
            .0
            .view
            .with_state(None, |state, header| {
                pool.add(&[bytes.to_vec()], state, header.base_fee_per_gas)
                    .remove(0)
            })
            .map_err(RpcError::from)?;
        let hash = result.map_err(RpcError::from)?;
        if let Some(admitted) = &self.0.admitted {
            // A closed channel means the node is stopping; the tx stays in the pool.
            let _ = admitted.send(bytes.to_vec());
        }
        Ok(hash)
    }

    fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>> {
        if let Some(pooled) = self.0.pool.get(&hash) {
            return Ok(Some(rpc_tx(&pooled.tx.tx, pooled.tx.sender, None)));
        }
        let Some((number, index)) = self.0.view.tx_location(hash).map_err(RpcError::internal)?
        else {
            return Ok(None);
        };
        Ok(self.tx_at(number, index as usize)?)
    }

    fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>> {
        let Some((number, index)) = self.0.view.tx_location(hash).map_err(RpcError::internal)?
        else {
            return Ok(None);
        };
        Ok(self.receipts(number)?.and_then(|(_, mut receipts)| {
            (index as usize)
                .lt(&receipts.len())
                .then(|| receipts.swap_remove(index as usize))
        }))
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

    fn tx_by_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>> {
        let number = self.tag_number(number)?;
        Ok(self.tx_at(number, index.into())?)
    }

    fn tx_by_hash_and_index(&self, hash: B256, index: Index) -> RpcResult<Option<Transaction>> {
        match self.number_by_hash(hash)? {
            Some(number) => Ok(self.tx_at(number, index.into())?),
            None => Ok(None),
        }
    }

    fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>> {
        let number = self.number_of(Some(block))?;
        Ok(self.receipts(number)?.map(|(_, receipts)| receipts))
    }

    fn logs(&self, filter: Filter) -> RpcResult<Vec<Log>> {
        let (from, to) = self.log_range(&filter)?;
        Ok(self.logs_between(&filter, from, to)?)
    }

    fn new_filter(&self, filter: Filter) -> RpcResult<U256> {
        Ok(self
            .1
            .install(FilterKind::Logs(Box::new(filter)), self.head()? + 1)?)
    }

    fn new_block_filter(&self) -> RpcResult<U256> {
        Ok(self.1.install(FilterKind::Blocks, self.head()? + 1)?)
    }

    fn new_pending_transaction_filter(&self) -> RpcResult<U256> {
        Ok(self.1.install(
            FilterKind::PendingTransactions,
            self.0.pool.admission_position(),
        )?)
    }

    fn filter_changes(&self, id: U256) -> RpcResult<FilterChanges> {
        let (kind, next) = self.1.poll(id)?;
        let (changes, next) = match kind {
            FilterKind::PendingTransactions => {
                let (hashes, next) = self.0.pool.admitted_since(next);
                (FilterChanges::Hashes(hashes), next)
            }
            FilterKind::Blocks => self.chain_changes(None, next)?,
            FilterKind::Logs(filter) => self.chain_changes(Some(&filter), next)?,
        };
        self.1.advance(id, next);
        Ok(changes)
    }

    fn filter_logs(&self, id: U256) -> RpcResult<Vec<Log>> {
        match self.1.poll(id)?.0 {
            FilterKind::Logs(filter) => self.logs(*filter),
            FilterKind::Blocks | FilterKind::PendingTransactions => {
                Err(RpcError::InvalidParams(format!("filter {id:#x} is not a log filter")).into())
            }
        }
    }

    fn uninstall_filter(&self, id: U256) -> RpcResult<bool> {
        Ok(self.1.uninstall(id))
    }

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
        let mut blocks = self.0.heads.subscribe();
        let sink = pending.accept().await?;
        let filter = filter.unwrap_or_default();
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
        let mut next = self.0.pool.admission_position();
        let mut ticks = tokio::time::interval(PENDING_POLL);
        loop {
            tokio::select! {
                _ = sink.closed() => return Ok(()),
                _ = ticks.tick() => {}
            }
            let (hashes, end) = self.0.pool.admitted_since(next);
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

impl TxpoolApiServer for Rpc {
    fn status(&self) -> RpcResult<Value> {
        let status = self.0.pool.status();
        Ok(json!({
            "pending": format!("{:#x}", status.pending),
            "queued": format!("{:#x}", status.queued),
        }))
    }

    fn content(&self) -> RpcResult<Value> {
        let mut pending = serde_json::Map::new();
        let mut queued = serde_json::Map::new();
        for (sender, content) in self.0.pool.content() {
            let by_nonce = |txs: &[Arc<stave_txpool::PoolTx>]| -> Value {
                txs.iter()
                    .map(|tx| (tx.nonce.to_string(), json!(rpc_tx(&tx.tx.tx, sender, None))))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            };
            if !content.pending.is_empty() {
                pending.insert(sender.to_checksum(None), by_nonce(&content.pending));
            }
            if !content.queued.is_empty() {
                queued.insert(sender.to_checksum(None), by_nonce(&content.queued));
            }
        }
        Ok(json!({ "pending": pending, "queued": queued }))
    }
}
