//! Stave's Ethereum JSON-RPC server (jsonrpsee, HTTP and WebSocket on one port), so
//! existing wallets and SDKs (ethers, viem, web3.py, web3j) work unchanged.
//!
//! Methods live by namespace and area, each area a jsonrpsee trait with its
//! implementation in one file: [`eth`] (state, blocks, transactions, call and
//! `eth_simulateV1`, fees, filters, subscriptions), [`net`] (`web3_*`, `net_*` and the
//! node's own `eth_*`), [`debug`] and [`trace`] (transaction traces, made by
//! revm-inspectors), [`dev`] (a dev node's signing and mining, as Anvil's), [`txpool`] and
//! [`stave`] (the governance contract's admissions and permissions as nodes read them).
//! They read through [`stave_node::ChainView`] (state at the head or at any of the last
//! 128 blocks) and [`stave_storage::read`], and submit to [`stave_txpool::TxPool`].
//! Responses use `alloy-rpc-types-eth`'s types ([`convert`]); errors carry go-ethereum's
//! codes and messages ([`error`]). Limits ([`RpcConfig`]): localhost only unless
//! configured, batches of at most 1,000 calls and 25 MB, a 50M gas cap and a 5 s timeout
//! on calls, `eth_getLogs` bounded in blocks and results and served from the per-block
//! bloom index, filters bounded in size and number, answers bounded by the response cap
//! as they are built; installed filters for clients that poll ([`eth::filters`]).
//! The server runs on a tokio runtime of its own, and heavy methods (anything that reads
//! block bodies, scans logs or runs the EVM) on a bounded pool of worker threads that
//! answers "busy" when full, so RPC load stays off the threads of consensus, the network
//! and block import.

mod config;
mod connections;
mod console;
pub mod convert;
pub mod cors;
pub mod debug;
pub mod dev;
pub mod error;
pub mod eth;
mod limits;
mod metered;
pub mod net;
mod rpc;
mod server;
pub mod stave;
pub mod trace;
pub mod txpool;
mod workers;

pub use config::RpcConfig;
pub use console::{CONSOLE_METHODS, ConsoleRpc};
pub use error::RpcError;
pub use server::{NodeContext, PeerCount, RpcServer, SyncProgress, methods, start};
