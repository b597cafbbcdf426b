//! The JSON-RPC the node's web console calls: a few read methods of the node's own, served
//! in process (the console's page is on the metrics address, so it needs neither the
//! JSON-RPC port nor CORS). Read-only by construction: any other method is refused, and
//! the methods run without a dev chain's signing or mining.

use jsonrpsee::RpcModule;
use serde::Deserialize;

use crate::{NodeContext, RpcError, server::methods};

/// The methods the console may call.
pub const CONSOLE_METHODS: [&str; 13] = [
    "eth_chainId",
    "eth_blockNumber",
    "eth_syncing",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getTransactionByHash",
    "eth_getTransactionReceipt",
    "eth_getBalance",
    "eth_getTransactionCount",
    "eth_getCode",
    "debug_traceTransaction",
    "txpool_status",
    "stave_admitted",
];

/// The console's JSON-RPC: [`CONSOLE_METHODS`] over the node's context.
pub struct ConsoleRpc {
    module: RpcModule<()>,
}

impl std::fmt::Debug for ConsoleRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleRpc").finish_non_exhaustive()
    }
}

/// What the console's request must name.
#[derive(Deserialize)]
struct Named {
    method: String,
}

impl ConsoleRpc {
    /// The console's methods over `ctx` (its dev chain, if any, left out: the console
    /// neither signs nor mines), on one heavy-method worker of their own.
    pub fn new(mut ctx: NodeContext) -> Result<Self, RpcError> {
        ctx.dev = None;
        ctx.admitted = None;
        ctx.config.worker_threads = 1;
        Ok(Self {
            module: methods(ctx)?,
        })
    }

    /// The JSON-RPC answer to `request`, one call (no batch): an error object for a
    /// method the console may not call, or for bytes that are not a request.
    pub async fn call(&self, request: &str) -> String {
        let refused = |code: i32, message: &str| {
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": { "code": code, "message": message },
            })
            .to_string()
        };
        let Ok(named) = serde_json::from_str::<Named>(request) else {
            return refused(-32600, "the console takes one JSON-RPC call a request");
        };
        if !CONSOLE_METHODS.contains(&named.method.as_str()) {
            return refused(-32601, "the console reads only: method not allowed");
        }
        match self.module.raw_json_request(request, 1).await {
            Ok((answer, _)) => answer.get().to_owned(),
            Err(_) => refused(-32700, "not a JSON-RPC request"),
        }
    }
}
