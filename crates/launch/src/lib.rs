//! Starts a Stave node in this process and stops it: the wiring of storage, chain, txpool,
//! JSON-RPC, metrics, P2P and consensus that `stave node` runs, as a library tests can
//! call too (reth's node builder is the model).
//!
//! One way in: a [`NodeConfig`] (built in code from [`NodeConfig::dev`], or read from the
//! TOML file `stave node --config` takes with [`NodeConfig::from_toml_file`]) goes to
//! [`RunningNode::start`], which returns once JSON-RPC is bound and the node makes blocks.
//! The [`RunningNode`] says where it listens ([`RunningNode::rpc_addr`],
//! [`RunningNode::p2p_addr`]) and where its chain stands ([`RunningNode::head`]);
//! [`RunningNode::stop`] stops it cleanly (the state layers written to disk, as on
//! SIGTERM), and [`RunningNode::wait`] blocks until a signal or until block making ends,
//! which is how the binary runs it.
//!
//! ```no_run
//! use stave_launch::{NodeConfig, RunningNode};
//!
//! let node = RunningNode::start(NodeConfig::dev()?.in_process())?;
//! println!("JSON-RPC on http://{:?}", node.rpc_addr());
//! let stopped = node.stop()?;
//! println!("stopped at block {}", stopped.head);
//! # Ok::<(), stave_launch::LaunchError>(())
//! ```
//!
//! Several nodes can run in one process, on ports the OS picks
//! ([`NodeConfig::in_process`]), each with its own runtime and data dir. What is global to
//! a process: the metrics recorder (only the first node that asks serves metrics), each
//! node's LMDB store (leaked, and never opened twice: a restart of the same data dir
//! takes a new process), and a validator's consensus engine thread (it cannot be stopped;
//! stopping the node cuts it off from the network).
//!
//! [`testnet`] writes a multi-validator chain's genesis, keys, certificates and configs,
//! and runs it as one `stave node` process per validator; [`files`] writes key and
//! certificate files; [`process`] tunes a node's process at its start; [`stream`]
//! imports and exports a data dir's blocks as a block stream.

mod allow_list;
mod config;
mod error;
pub mod files;
mod follower;
mod full_node;
mod metrics;
mod node;
mod p2p;
pub mod process;
mod producer;
pub mod stream;
mod supervisor;
pub mod testnet;
mod validator;

pub use config::{
    ConsensusConfig, DEFAULT_BLOCK_TIME, DEFAULT_BLOCK_TXS, DEFAULT_LEADER_TIMEOUT,
    DEFAULT_METRICS_ADDR, MAX_BLOCK_TIME, MAX_LEADER_TIMEOUT, MIN_MAP_SIZE, NodeConfig, Overrides,
    P2pConfig, P2pLimits, Role, read_genesis,
};
pub use error::LaunchError;
pub use node::{Exit, RunningNode, Stopped};
/// Which past blocks' state a node serves (`NodeConfig::history`).
pub use stave_state::History;
