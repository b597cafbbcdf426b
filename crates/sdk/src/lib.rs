//! Stave's client SDK: sign transactions at the speed of the curve and build workloads.
//!
//! [`LocalSigner`] signs with RFC 6979 ECDSA and gets the recovery id directly;
//! [`TxBuilder`] makes ETH transfers, ERC-20 calls and deploys; [`signed_workload`]
//! signs whole benchmark workloads on all cores.
//!
//! ```
//! use stave_primitives::{U256, dev::dev_account, decode_and_validate};
//! use stave_sdk::{LocalSigner, TxBuilder};
//!
//! let signer = LocalSigner::from_secret(&dev_account(0).secret)?;
//! let tx = TxBuilder::new(1337, 1_000_000_000).transfer(0, dev_account(1).address, U256::from(1));
//! let signed = signer.sign_tx(tx)?;
//! let checked = decode_and_validate(&signed.encoded(), Some(1337)).expect("valid");
//! assert_eq!(checked.sender, signer.address());
//! # Ok::<(), stave_sdk::SdkError>(())
//! ```

mod builder;
pub mod contracts;
mod error;
mod signer;
mod workload;

pub use builder::{
    ERC20_TRANSFER_GAS, ERC20_TRANSFER_SELECTOR, TRANSFER_GAS, TxBuilder, erc20_transfer_calldata,
};
pub use error::SdkError;
pub use signer::LocalSigner;
pub use workload::{WorkloadKind, signed_workload, workload_genesis};
