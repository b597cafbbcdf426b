//! What the node is rather than what its chain holds: `web3_*`, `net_*`, and the `eth_*`
//! methods that describe the node (its chain id, whether it syncs, whose keys it holds).

use std::sync::atomic::Ordering;

use alloy_primitives::{Address, B256, Bytes, U64, U256, keccak256};
use alloy_rpc_types_eth::{SyncInfo, SyncStatus};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};

use crate::rpc::Rpc;

/// Blocks a node may trail the highest block it knows of and still answer `eth_syncing`
/// with `false`: a validator's head trails the finalized tip by a block or two while it
/// commits, a follower's its source's while a block travels.
pub const SYNCING_GAP: u64 = 4;

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
    /// `false` at the chain's tip; while more than [`SYNCING_GAP`] blocks behind the
    /// highest block the node knows of, the start, current and highest block.
    #[method(name = "eth_syncing")]
    fn syncing(&self) -> RpcResult<SyncStatus>;
    /// Accounts the node signs for: a dev node's funded accounts, else none.
    #[method(name = "eth_accounts")]
    fn accounts(&self) -> RpcResult<Vec<Address>>;
    /// How many peers the node is connected to (none without a network).
    #[method(name = "net_peerCount")]
    fn peer_count(&self) -> RpcResult<U64>;
    /// Keccak-256 of the bytes given.
    #[method(name = "web3_sha3")]
    fn sha3(&self, data: Bytes) -> RpcResult<B256>;
    /// The address the head block credits its fees to (the proposer).
    #[method(name = "eth_coinbase")]
    fn coinbase(&self) -> RpcResult<Address>;
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

    fn syncing(&self) -> RpcResult<SyncStatus> {
        let Some(sync) = &self.ctx.sync else {
            return Ok(SyncStatus::None);
        };
        let current = self.head()?;
        let highest = sync.highest_block.load(Ordering::Acquire);
        if highest <= current + SYNCING_GAP {
            return Ok(SyncStatus::None);
        }
        Ok(SyncStatus::Info(Box::new(SyncInfo {
            starting_block: U256::from(sync.starting_block.min(current)),
            current_block: U256::from(current),
            highest_block: U256::from(highest),
            ..SyncInfo::default()
        })))
    }

    fn accounts(&self) -> RpcResult<Vec<Address>> {
        Ok(self
            .ctx
            .dev
            .iter()
            .flat_map(|dev| &dev.signers)
            .map(|signer| signer.address())
            .collect())
    }

    fn peer_count(&self) -> RpcResult<U64> {
        let peers = self.ctx.peer_count.as_ref().map_or(0, |count| count());
        Ok(U64::from(peers))
    }

    fn sha3(&self, data: Bytes) -> RpcResult<B256> {
        Ok(keccak256(data))
    }

    fn coinbase(&self) -> RpcResult<Address> {
        let proposer = self
            .ctx
            .view
            .with_state(None, |_, header| header.proposer)
            .map_err(crate::RpcError::from)?;
        Ok(proposer)
    }
}
