//! The JSON-RPC methods Stave serves, as jsonrpsee traits.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, B256, Bytes, U64, U256};
use alloy_rpc_types_eth::{
    Block, FeeHistory, Filter, FilterChanges, Index, Log, Transaction, TransactionReceipt,
    TransactionRequest,
};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};
use serde_json::Value;

/// `web3_*` and `net_*`.
#[rpc(server)]
pub trait Web3Api {
    /// The node's name and version.
    #[method(name = "web3_clientVersion")]
    fn client_version(&self) -> RpcResult<String>;
    /// The chain id, in decimal (the network id).
    #[method(name = "net_version")]
    fn net_version(&self) -> RpcResult<String>;
    /// Whether the node accepts peers (a dev node has none; always true).
    #[method(name = "net_listening")]
    fn net_listening(&self) -> RpcResult<bool>;
}

/// `eth_*`: chain, state, transactions, logs and subscriptions.
#[rpc(server)]
pub trait EthApi {
    /// EIP-695 chain id.
    #[method(name = "eth_chainId")]
    fn chain_id(&self) -> RpcResult<U64>;
    /// The head's number.
    #[method(name = "eth_blockNumber")]
    fn block_number(&self) -> RpcResult<U64>;
    /// Accounts the node signs for: none.
    #[method(name = "eth_accounts")]
    fn accounts(&self) -> RpcResult<Vec<Address>>;
    /// Not syncing: a dev node is always at its own head.
    #[method(name = "eth_syncing")]
    fn syncing(&self) -> RpcResult<bool>;
    /// Balance at a block.
    #[method(name = "eth_getBalance")]
    fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256>;
    /// Nonce at a block; `pending` counts the txpool.
    #[method(name = "eth_getTransactionCount")]
    fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64>;
    /// Code at a block.
    #[method(name = "eth_getCode")]
    fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes>;
    /// A storage slot at a block.
    #[method(name = "eth_getStorageAt")]
    fn storage_at(&self, address: Address, slot: U256, block: Option<BlockId>) -> RpcResult<B256>;
    /// Runs a call without a transaction.
    #[method(name = "eth_call")]
    async fn call(&self, request: TransactionRequest, block: Option<BlockId>) -> RpcResult<Bytes>;
    /// The gas a transaction needs.
    #[method(name = "eth_estimateGas")]
    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
    ) -> RpcResult<U64>;
    /// A legacy gas price: base fee plus the suggested tip.
    #[method(name = "eth_gasPrice")]
    fn gas_price(&self) -> RpcResult<U256>;
    /// The suggested priority fee.
    #[method(name = "eth_maxPriorityFeePerGas")]
    fn max_priority_fee(&self) -> RpcResult<U256>;
    /// Base fees, gas used ratios and tip percentiles of recent blocks.
    #[method(name = "eth_feeHistory")]
    fn fee_history(
        &self,
        block_count: U64,
        newest: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory>;
    /// Submits a signed transaction to the txpool.
    #[method(name = "eth_sendRawTransaction")]
    fn send_raw_transaction(&self, bytes: Bytes) -> RpcResult<B256>;
    /// A transaction, pending or included.
    #[method(name = "eth_getTransactionByHash")]
    fn transaction_by_hash(&self, hash: B256) -> RpcResult<Option<Transaction>>;
    /// An included transaction's receipt.
    #[method(name = "eth_getTransactionReceipt")]
    fn transaction_receipt(&self, hash: B256) -> RpcResult<Option<TransactionReceipt>>;
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
    /// The transaction at a position in a block by number or tag.
    #[method(name = "eth_getTransactionByBlockNumberAndIndex")]
    fn tx_by_number_and_index(
        &self,
        number: BlockNumberOrTag,
        index: Index,
    ) -> RpcResult<Option<Transaction>>;
    /// The transaction at a position in a block by hash.
    #[method(name = "eth_getTransactionByBlockHashAndIndex")]
    fn tx_by_hash_and_index(&self, hash: B256, index: Index) -> RpcResult<Option<Transaction>>;
    /// Every receipt of a block.
    #[method(name = "eth_getBlockReceipts")]
    fn block_receipts(&self, block: BlockId) -> RpcResult<Option<Vec<TransactionReceipt>>>;
    /// Logs matching a filter, from the bloom index.
    #[method(name = "eth_getLogs")]
    fn logs(&self, filter: Filter) -> RpcResult<Vec<Log>>;
    /// Installs a log filter for `eth_getFilterChanges`: logs of blocks from the next on.
    #[method(name = "eth_newFilter")]
    fn new_filter(&self, filter: Filter) -> RpcResult<U256>;
    /// Installs a filter for `eth_getFilterChanges`: hashes of blocks from the next on.
    #[method(name = "eth_newBlockFilter")]
    fn new_block_filter(&self) -> RpcResult<U256>;
    /// Installs a filter for `eth_getFilterChanges`: hashes of transactions the pool admits
    /// from now on.
    #[method(name = "eth_newPendingTransactionFilter")]
    fn new_pending_transaction_filter(&self) -> RpcResult<U256>;
    /// What an installed filter matched since its last poll.
    #[method(name = "eth_getFilterChanges")]
    fn filter_changes(&self, id: U256) -> RpcResult<FilterChanges>;
    /// Every log an installed log filter matches, as `eth_getLogs` with its filter.
    #[method(name = "eth_getFilterLogs")]
    fn filter_logs(&self, id: U256) -> RpcResult<Vec<Log>>;
    /// Removes an installed filter; false if there was none.
    #[method(name = "eth_uninstallFilter")]
    fn uninstall_filter(&self, id: U256) -> RpcResult<bool>;
    /// `newHeads` or `logs` notifications.
    #[subscription(name = "eth_subscribe" => "eth_subscription", unsubscribe = "eth_unsubscribe", item = Value)]
    async fn subscribe(
        &self,
        kind: String,
        filter: Option<Filter>,
    ) -> jsonrpsee::core::SubscriptionResult;
}

/// `txpool_*`: what waits for a block.
#[rpc(server)]
pub trait TxpoolApi {
    /// Pending and queued counts.
    #[method(name = "txpool_status")]
    fn status(&self) -> RpcResult<Value>;
    /// Every pooled transaction by sender and nonce.
    #[method(name = "txpool_content")]
    fn content(&self) -> RpcResult<Value>;
}
