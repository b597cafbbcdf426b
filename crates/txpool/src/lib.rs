//! Stave's transaction pool: where transactions wait for a block.
//!
//! Admission ([`TxPool::add`]) recovers signatures on all cores and records each sender in
//! the [`stave_verify::SenderCache`], so the verify stage skips them when their block
//! arrives. It then checks chain id, nonce, balance, fee cap, gas and size against
//! committed state and queues each transaction under its sender in nonce order; a
//! transaction with a taken nonce replaces the old one only if it pays 10% more. A sender's
//! transactions are pending (selectable) while they are consecutive from its account nonce
//! and its balance covers them together, as in go-ethereum; the rest are queued. Memory is
//! bounded (pool, per sender, nonce gap); a full pool evicts through price indexes, queued
//! transactions first, and a queued newcomer never evicts a pending one. Nothing leaves
//! silently: a refusal returns a [`PoolError`], a drop is logged and counted with its
//! [`DropReason`] ([`TxPool::dropped`]). Block selection ([`TxPool::select`]) takes the
//! highest tip first, earlier arrival on ties.

mod book;
mod error;
mod pool;

pub use error::{DropReason, PoolError};
pub use pool::{PoolConfig, PoolStatus, PoolTx, SenderContent, TxPool};
