//! The server: its limits ([`RpcConfig`]), what its methods read ([`NodeContext`]), and
//! [`start`], which serves every namespace's methods on one port over HTTP and
//! WebSocket.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use jsonrpsee::{
    Methods, RpcModule,
    server::{BatchRequestConfig, ServerBuilder, ServerConfig, ServerHandle},
};
use stave_node::{ChainView, Produced};
use stave_txpool::TxPool;
use tokio::sync::broadcast;

use crate::{
    error::RpcError,
    eth::{
        blocks::EthBlocksApiServer, call::EthCallApiServer, fees::EthFeesApiServer,
        filters::EthFiltersApiServer, state::EthStateApiServer, subscriptions::EthPubSubApiServer,
        transactions::EthTransactionsApiServer,
    },
    net::NetApiServer,
    rpc::Rpc,
    txpool::TxpoolApiServer,
};

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
    let rpc = Rpc::new(ctx);
    // One module per namespace file; a method name served twice is an error here.
    let namespaces: [Methods; 9] = [
        NetApiServer::into_rpc(rpc.clone()).into(),
        EthStateApiServer::into_rpc(rpc.clone()).into(),
        EthBlocksApiServer::into_rpc(rpc.clone()).into(),
        EthTransactionsApiServer::into_rpc(rpc.clone()).into(),
        EthCallApiServer::into_rpc(rpc.clone()).into(),
        EthFeesApiServer::into_rpc(rpc.clone()).into(),
        EthFiltersApiServer::into_rpc(rpc.clone()).into(),
        EthPubSubApiServer::into_rpc(rpc.clone()).into(),
        TxpoolApiServer::into_rpc(rpc).into(),
    ];
    let mut module = RpcModule::new(());
    for methods in namespaces {
        module.merge(methods).map_err(RpcError::internal)?;
    }
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
