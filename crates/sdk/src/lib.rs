//! Stave's client SDK: sign transactions at the speed of the curve and build workloads.
//!
//! [`LocalSigner`] signs with RFC 6979 ECDSA (libsecp256k1) and gets the recovery id
//! directly; [`TxBuilder`] makes ETH transfers, ERC-20 calls and deploys as legacy
//! (EIP-155), EIP-2930 or EIP-1559 transactions; [`sign_batch`] builds and signs on all
//! cores; [`signed_workload`] makes whole benchmark workloads. [`RpcClient`] talks to a
//! node over HTTP (keep-alive, batch requests) and [`NonceManager`] tracks each sender's
//! nonces locally, resyncing from the node on a nonce refusal or a gap.
//!
//! ```
//! use stave_primitives::{U256, dev::dev_account, decode_and_validate};
//! use stave_sdk::{LocalSigner, TxBuilder};
//!
//! let signer = LocalSigner::from_secret(&dev_account(0).secret)?;
//! let tx = TxBuilder::legacy(1337, 1_000_000_000).transfer(0, dev_account(1).address, U256::from(1));
//! let raw = signer.sign_raw(&tx);
//! let checked = decode_and_validate(&raw.bytes, Some(1337)).expect("valid");
//! assert_eq!(checked.sender, signer.address());
//! # Ok::<(), stave_sdk::SdkError>(())
//! ```

mod builder;
pub mod contracts;
mod error;
mod nonce;
mod rpc;
mod signer;
mod workload;

pub use builder::{
    ERC20_TRANSFER_GAS, ERC20_TRANSFER_SELECTOR, TRANSFER_GAS, TxBuilder, TxFormat,
    erc20_transfer_calldata,
};
pub use error::SdkError;
pub use nonce::{NonceAction, NonceManager};
pub use rpc::{MAX_MESSAGE_SIZE, REQUEST_TIMEOUT, RpcClient, SERVER_BUSY};
pub use signer::{LocalSigner, RawTx};
pub use workload::{
    DEPLOY_GAS, GasLimits, Targets, Workload, sign_batch, signed_workload, signed_workload_range,
    workload_genesis,
};
