//! The `eth_*` namespace, one file per area. Each area is a jsonrpsee trait implemented on
//! the server's handle (`Rpc`) in the same file, and [`crate::start`] serves them all on one
//! port: a new method goes into the trait of its area.

pub mod blocks;
pub mod call;
pub mod fees;
pub mod filters;
mod simulate;
pub mod state;
pub mod subscriptions;
pub mod transactions;
