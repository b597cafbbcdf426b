//! The verify stage: sender recovery on all cores through the lock-free check queue, and
//! the sender cache that lets a transaction verified at txpool admission skip recovery
//! at block import.
//!
//! [`Verifier`] takes a block's transactions (or its offset-indexed list, decoding and
//! queueing each transaction as soon as it is decoded) and returns [`RecoveredTx`]s in
//! block order, or the lowest-index invalid transaction. [`verify_serial`] is the
//! one-thread reference it must match. [`SenderCache`] maps the hash of a transaction's
//! exact bytes to its sender.
//!
//! ```
//! use stave_primitives::{U256, dev::dev_account};
//! use stave_sdk::{LocalSigner, TxBuilder};
//! use stave_verify::Verifier;
//!
//! let signer = LocalSigner::from_secret(&dev_account(0).secret)?;
//! let tx = signer.sign_tx(TxBuilder::new(1337, 7).transfer(0, dev_account(1).address, U256::ZERO));
//! let mut verifier = Verifier::new(1337, 2, None);
//! let recovered = verifier.verify(vec![tx]).expect("valid");
//! assert_eq!(recovered[0].sender, signer.address());
//! # Ok::<(), stave_sdk::SdkError>(())
//! ```
//!
//! [`RecoveredTx`]: stave_primitives::RecoveredTx

mod cache;
mod error;
mod recover;

pub use cache::{CacheStats, DEFAULT_SENDER_CACHE_CAPACITY, SenderCache};
pub use error::VerifyError;
pub use recover::{Verifier, verify_serial};
