//! The server: what its methods read ([`NodeContext`]), [`methods`], every namespace's
//! methods in one module, and [`start`], which serves them on one port over HTTP and
//! WebSocket on a tokio runtime of the server's own ([`RpcServer`]), so RPC load cannot
//! starve the node's runtime that carries consensus and network traffic.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use jsonrpsee::{
    Methods, RpcModule,
    server::{BatchRequestConfig, PingConfig, ServerConfig, ServerHandle, stop_channel},
};
use stave_node::{ChainView, Produced};
use stave_txpool::TxPool;
use tokio::{sync::broadcast, task::JoinHandle};

use crate::{
    config::RpcConfig,
    connections::accept_loop,
    debug::DebugApiServer,
    dev::{DevApiServer, DevChain},
    error::RpcError,
    eth::{
        blocks::EthBlocksApiServer, call::EthCallApiServer, fees::EthFeesApiServer,
        filters::EthFiltersApiServer, state::EthStateApiServer, subscriptions::EthPubSubApiServer,
        transactions::EthTransactionsApiServer,
    },
    net::NetApiServer,
    rpc::Rpc,
    stave::StaveApiServer,
    trace::TraceApiServer,
    txpool::TxpoolApiServer,
};

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
    /// How far the chain has to go, on a node that takes its blocks from others
    /// (`eth_syncing`); `None` on a node that makes its own.
    pub sync: Option<SyncProgress>,
    /// How many peers the node is connected to now (`net_peerCount`); `None` on a node
    /// without a network.
    pub peer_count: Option<PeerCount>,
    /// A dev node's accounts and block making (the `evm_*`, `anvil_*` and signing
    /// methods); `None` on any other node, which does not serve those methods.
    pub dev: Option<DevChain>,
}

/// Counts the node's connected peers.
pub type PeerCount = Arc<dyn Fn() -> usize + Send + Sync>;

/// What `eth_syncing` reports on a node that takes its blocks from others.
#[derive(Clone, Debug)]
pub struct SyncProgress {
    /// The head when the node started.
    pub starting_block: u64,
    /// The highest block this node knows to exist: the finalized tip consensus reported
    /// on a validator, the highest block its block source sent on a follower.
    pub highest_block: Arc<std::sync::atomic::AtomicU64>,
}

/// How long a stopping server waits for its connections to close.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A running server: its address, and the runtime it runs on.
pub struct RpcServer {
    addr: SocketAddr,
    handle: ServerHandle,
    /// The task that accepts and serves connections, until taken.
    serving: Option<JoinHandle<()>>,
    /// `None` once stopped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl RpcServer {
    /// Where it listens, with the port bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The task that accepts and serves connections, for a supervisor to watch (once: it
    /// is taken). It ends only when the server is stopped, or if it panics; its end
    /// otherwise means no client is served any more.
    pub fn take_task(&mut self) -> Option<JoinHandle<()>> {
        self.serving.take()
    }

    /// Stops accepting, lets open connections finish (for at most [`STOP_GRACE`]), and
    /// shuts its runtime down. Call it outside any async runtime.
    pub fn stop(mut self) {
        let _ = self.handle.stop();
        if let Some(runtime) = self.runtime.take() {
            let handle = self.handle.clone();
            runtime.block_on(async move {
                let _ = tokio::time::timeout(STOP_GRACE, handle.stopped()).await;
            });
            runtime.shutdown_timeout(STOP_GRACE);
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        let _ = self.handle.stop();
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime blocks, which an async caller must not do.
            runtime.shutdown_background();
        }
    }
}

/// Every namespace's methods over `ctx`, in one module (what [`start`] serves, and what a
/// test or fuzzer calls without a socket).
pub fn methods(ctx: NodeContext) -> Result<RpcModule<()>, RpcError> {
    let rpc = Rpc::new(ctx)?;
    // One module per namespace file; a method name served twice is an error here.
    let dev = rpc
        .ctx
        .dev
        .is_some()
        .then(|| DevApiServer::into_rpc(rpc.clone()));
    let namespaces: [Methods; 12] = [
        NetApiServer::into_rpc(rpc.clone()).into(),
        EthStateApiServer::into_rpc(rpc.clone()).into(),
        EthBlocksApiServer::into_rpc(rpc.clone()).into(),
        EthTransactionsApiServer::into_rpc(rpc.clone()).into(),
        EthCallApiServer::into_rpc(rpc.clone()).into(),
        EthFeesApiServer::into_rpc(rpc.clone()).into(),
        EthFiltersApiServer::into_rpc(rpc.clone()).into(),
        EthPubSubApiServer::into_rpc(rpc.clone()).into(),
        TxpoolApiServer::into_rpc(rpc.clone()).into(),
        DebugApiServer::into_rpc(rpc.clone()).into(),
        TraceApiServer::into_rpc(rpc.clone()).into(),
        StaveApiServer::into_rpc(rpc).into(),
    ];
    let mut module = RpcModule::new(());
    for methods in namespaces.into_iter().chain(dev.map(Methods::from)) {
        module.merge(methods).map_err(RpcError::internal)?;
    }
    Ok(module)
}

/// Starts the server on a runtime of its own; it runs until stopped or dropped.
pub async fn start(ctx: NodeContext) -> Result<RpcServer, RpcError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ctx.config.runtime_threads)
        .thread_name("rpc")
        .on_thread_start({
            let nice = ctx.config.nice;
            move || crate::workers::lower_priority(nice)
        })
        .enable_all()
        .build()
        .map_err(|error| RpcError::Internal(format!("cannot start the RPC runtime: {error}")))?;
    let served = runtime.spawn(serve(ctx)).await;
    let (addr, handle, serving) = match served.map_err(RpcError::internal).and_then(|bound| bound) {
        Ok(bound) => bound,
        Err(error) => {
            // Dropping a runtime blocks, which this async caller must not do.
            runtime.shutdown_background();
            return Err(error);
        }
    };
    Ok(RpcServer {
        addr,
        handle,
        serving: Some(serving),
        runtime: Some(runtime),
    })
}

/// Binds and serves, on the runtime this runs on; returns the serving task too.
async fn serve(ctx: NodeContext) -> Result<(SocketAddr, ServerHandle, JoinHandle<()>), RpcError> {
    let config = ctx.config.clone();
    let server_config = ServerConfig::builder()
        .max_request_body_size(config.max_request_bytes)
        .max_response_body_size(config.max_response_bytes)
        .max_connections(config.max_connections)
        .max_subscriptions_per_connection(config.max_subscriptions_per_connection)
        .enable_ws_ping(
            PingConfig::new()
                .ping_interval(config.ws_ping_interval)
                .inactive_limit(config.idle_timeout),
        )
        .set_batch_request_config(BatchRequestConfig::Limit(config.max_batch))
        .set_id_provider(HexIdProvider)
        .build();
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|error| {
            RpcError::Internal(format!("cannot listen on {}: {error}", config.addr))
        })?;
    let addr = listener.local_addr().map_err(RpcError::internal)?;
    let (stop, handle) = stop_channel();
    let module = methods(ctx)?;
    let names = Arc::new(module.method_names().collect());
    let serving = tokio::spawn(accept_loop(
        listener,
        server_config,
        (module.into(), names),
        stop,
        config,
    ));
    Ok((addr, handle, serving))
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
