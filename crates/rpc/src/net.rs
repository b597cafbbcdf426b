//! What the node is rather than what its chain holds: `web3_*`, `net_*`, and the `eth_*`
//! methods that describe the node (its chain id, whether it syncs, whose keys it holds).

use alloy_primitives::{Address, U64};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};

use crate::rpc::Rpc;

/// `web3_*`, `net_*` and the node's own `eth_*` methods.
#[rpc(server)]
pub trait NetApi {
    /// The node's name and version.
    #[method(name = "web3_clientVersion")]
    fn client_version(&self) -> RpcResult<String>;
    /// The chain id, in decimal (the network id).
    #[method(name = "net_version")]
    fn net_version(&self) -> RpcResult<String>;
    /// Whether the node accepts peers (a dev node has none; always true).
    #[method(name = "net_listening")]
    fn net_listening(&self) -> RpcResult<bool>;
    /// EIP-695 chain id.
    #[method(name = "eth_chainId")]
    fn chain_id(&self) -> RpcResult<U64>;
    /// Not syncing: a dev node is always at its own head.
    #[method(name = "eth_syncing")]
    fn syncing(&self) -> RpcResult<bool>;
    /// Accounts the node signs for: none.
    #[method(name = "eth_accounts")]
    fn accounts(&self) -> RpcResult<Vec<Address>>;
}

impl NetApiServer for Rpc {
    fn client_version(&self) -> RpcResult<String> {
        Ok(format!("stave/v{}", env!("CARGO_PKG_VERSION")))
    }

    fn net_version(&self) -> RpcResult<String> {
        Ok(self.ctx.view.spec().chain_id().to_string())
    }

    fn net_listening(&self) -> RpcResult<bool> {
        Ok(true)
    }

    fn chain_id(&self) -> RpcResult<U64> {
        Ok(U64::from(self.ctx.view.spec().chain_id()))
    }

    fn syncing(&self) -> RpcResult<bool> {
        Ok(false)
    }

    fn accounts(&self) -> RpcResult<Vec<Address>> {
        Ok(Vec::new())
    }
}
