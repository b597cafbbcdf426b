//! [`RpcConfig`]: where the server listens and every limit it keeps, each one a key of the
//! node's `[rpc]` TOML section.

use std::{net::SocketAddr, time::Duration};

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
    /// Largest response body, in bytes. Methods whose answer grows with the chain (logs,
    /// block receipts, the pool's content) refuse before they build more than this.
    pub max_response_bytes: u32,
    /// Most open connections.
    pub max_connections: u32,
    /// Most open connections from one IP address.
    pub max_connections_per_ip: u32,
    /// A connection with no request in flight for this long is closed (HTTP keep-alive),
    /// as is a WebSocket that answers no ping for this long.
    pub idle_timeout: Duration,
    /// How often a WebSocket is pinged.
    pub ws_ping_interval: Duration,
    /// Most subscriptions one WebSocket connection holds.
    pub max_subscriptions_per_connection: u32,
    /// Most gas an `eth_call` or `eth_estimateGas` may use (and all the calls of an
    /// `eth_simulateV1` together).
    pub gas_cap: u64,
    /// Longest an `eth_call`, `eth_estimateGas` or `eth_simulateV1` may run, its wait for
    /// a worker included.
    pub evm_timeout: Duration,
    /// Most blocks one `eth_getLogs` may scan.
    pub max_log_blocks: u64,
    /// Most logs one `eth_getLogs` may return.
    pub max_logs: usize,
    /// Most filters installed at once (`eth_new*Filter`).
    pub max_filters: usize,
    /// Most addresses in one log filter or query (go-ethereum's limit).
    pub max_filter_addresses: usize,
    /// Most alternatives in one topic position of a log filter or query (go-ethereum's
    /// limit).
    pub max_filter_topics: usize,
    /// Most blocks one `eth_feeHistory` covers; a larger count is cut to this, as
    /// go-ethereum does.
    pub fee_history_max_blocks: u64,
    /// Most reward percentiles one `eth_feeHistory` takes (go-ethereum's limit).
    pub fee_history_max_percentiles: usize,
    /// Most blocks one `eth_simulateV1` simulates, counted from the block it builds on
    /// (the empty blocks filling a gap in the numbers included; go-ethereum's limit).
    pub simulate_max_blocks: u64,
    /// Most calls one `eth_simulateV1` runs, in all its blocks together (go-ethereum's
    /// limit). Their gas together is bounded by `gas_cap`, their time by `evm_timeout`.
    pub simulate_max_calls: usize,
    /// Threads of the server's own tokio runtime (connections, parsing, light methods).
    pub runtime_threads: usize,
    /// Threads that run heavy methods (log scans, receipts, blocks, fee history, calls).
    pub worker_threads: usize,
    /// Most heavy requests waiting for a worker; one more is answered "busy".
    pub worker_queue: usize,
    /// The nice value (0–19) of every RPC thread, runtime and workers: how much lower
    /// their OS scheduling priority is than the node's other threads, so that when RPC
    /// work and consensus compete for the cores, voting and importing win.
    pub nice: u8,
    /// The priority fee suggested to wallets, in wei.
    pub suggested_tip: u128,
    /// Origins a web page may call the node from (CORS): `*` for any, or exact origins
    /// such as `http://localhost:3000`. None (the default but on `--dev`): no CORS headers,
    /// so browsers refuse cross-origin calls.
    pub cors_origins: Vec<String>,
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8545)),
            max_batch: 1_000,
            max_request_bytes: 25 * 1024 * 1024,
            max_response_bytes: 100 * 1024 * 1024,
            max_connections: 500,
            max_connections_per_ip: 100,
            idle_timeout: Duration::from_secs(60),
            ws_ping_interval: Duration::from_secs(30),
            max_subscriptions_per_connection: 1_024,
            gas_cap: 50_000_000,
            evm_timeout: Duration::from_secs(5),
            max_log_blocks: 10_000,
            max_logs: 10_000,
            max_filters: 10_000,
            max_filter_addresses: 1_000,
            max_filter_topics: 1_000,
            fee_history_max_blocks: 1_024,
            fee_history_max_percentiles: 100,
            simulate_max_blocks: 256,
            simulate_max_calls: 10_000,
            runtime_threads: 2,
            worker_threads: 4,
            worker_queue: 64,
            nice: 10,
            suggested_tip: 1_000_000_000,
            cors_origins: Vec::new(),
        }
    }
}
