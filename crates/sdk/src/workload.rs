//! Signed workloads for benches and tests, made from the deterministic dev accounts and
//! signed on all cores.

use alloy_primitives::{Address, U256};
use rayon::prelude::*;
use stave_primitives::{SignedTx, dev::dev_account};

use crate::{builder::TxBuilder, error::SdkError, signer::LocalSigner};

/// What a workload's transactions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// ETH transfers between distinct accounts: no two txs touch the same account.
    Transfer,
    /// ERC-20 `transfer` calls on one token contract, to distinct recipients.
    Erc20 {
        /// The token contract.
        token: Address,
    },
}

/// `count` signed transactions: tx i is sent by dev account i with nonce 0, to an address
/// derived from i that no sender uses. Signed in parallel.
pub fn signed_workload(
    kind: WorkloadKind,
    builder: &TxBuilder,
    count: usize,
) -> Result<Vec<SignedTx>, SdkError> {
    (0..count as u64)
        .into_par_iter()
        .map(|i| {
            let account = dev_account(i);
            let signer = LocalSigner::from_secret(&account.secret)?;
            let recipient = recipient(i);
            let tx = match kind {
                WorkloadKind::Transfer => builder.transfer(0, recipient, U256::from(1)),
                WorkloadKind::Erc20 { token } => {
                    builder.erc20_transfer(0, token, recipient, U256::from(1))
                }
            };
            signer.sign_tx(tx)
        })
        .collect()
}

/// A recipient address for tx `i`, disjoint from every dev sender.
fn recipient(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[0] = 0x5a;
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(bytes)
}
