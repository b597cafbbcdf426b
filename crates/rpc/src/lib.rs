//! Stave's Ethereum JSON-RPC server (jsonrpsee, HTTP and WebSocket on one port), so
//! existing wallets and SDKs (ethers, viem, web3.py, web3j) work unchanged.
//!
//! Methods ([`api`]) read through [`stave_node::ChainView`] (state at the head or at any
//! of the last 128 blocks) and submit to [`stave_txpool::TxPool`]. Responses use
//! `alloy-rpc-types-eth`'s types ([`convert`]); errors carry go-ethereum's codes and
//! messages ([`error`]). Limits ([`RpcConfig`]): localhost only unless configured,
//! batches of at most 1,000 calls and 25 MB, a 50M gas cap and a 5 s timeout on calls,
//! `eth_getLogs` bounded in blocks and results and served from the per-block bloom index;
//! installed filters for clients that poll (`filters`).

pub mod api;
pub mod convert;
pub mod error;
mod filters;
mod server;

pub use error::RpcError;
pub use server::{NodeContext, RpcConfig, start};
