//! Batch signing on all cores, and signed workloads for benches and tests made from the
//! deterministic dev accounts.

use alloy_consensus::TypedTransaction;
use alloy_genesis::GenesisAccount;
use alloy_primitives::{Address, B256, U256};
use rayon::prelude::*;
use stave_primitives::{ChainSpec, SignedTx, dev::dev_account};

use serde::Serialize;

use crate::{
    builder::{ERC20_TRANSFER_GAS, TRANSFER_GAS, TxBuilder},
    contracts::{stave_token_balance_slot, stave_token_initcode, stave_token_runtime},
    error::SdkError,
    signer::{LocalSigner, RawTx},
};

/// Builds and signs `count` transactions, `build(i)` for `i` in `0..count`, in parallel on
/// the current rayon pool (all cores, unless called inside a [`rayon::ThreadPool::install`]).
/// Each transaction is built on the thread that signs it; the output is in `i` order.
pub fn sign_batch(
    signer: &LocalSigner,
    count: usize,
    build: impl Fn(usize) -> TypedTransaction + Sync,
) -> Vec<RawTx> {
    (0..count)
        .into_par_iter()
        .map(|i| signer.sign_raw(&build(i)))
        .collect()
}

/// What a workload's transactions do: the one list of workloads the benches, `stave load`
/// and the tests share. With the `clap` feature it is a command-line value enum; its
/// value names are the lowercase variant names, as in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// ETH transfers, each to a fresh address: no two txs touch the same account.
    Transfer,
    /// ERC-20 `transfer` calls on one token contract, each to a fresh address.
    Erc20,
    /// ETH transfers that all pay one hot account: every tx conflicts with every other.
    Conflict,
    /// All of the above plus contract deploys and reverting calls, in turn: tx `i` is a
    /// transfer, an ERC-20 transfer, a payment to the hot account, a deploy of the repo's
    /// ERC-20, or an ERC-20 transfer of more than the sender holds (it reverts), by `i % 5`.
    Mixed,
}

/// The fixed addresses a workload's transactions name besides their senders and fresh
/// recipients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// The token contract of the `erc20` and `mixed` workloads.
    pub token: Address,
    /// The account the `conflict` workload (and every fifth `mixed` tx) pays.
    pub hot: Address,
}

impl Default for Targets {
    /// The addresses the benches use: a token the genesis holds ([`Workload::genesis`])
    /// and a hot account no sender is.
    fn default() -> Self {
        Targets {
            token: Address::repeat_byte(0xe2),
            hot: Address::repeat_byte(0x40),
        }
    }
}

/// Gas limit of the mixed workload's deploys (the repo's ERC-20 needs ~394,000).
pub const DEPLOY_GAS: u64 = 500_000;

/// The gas limit each shape of a workload's transactions is sent with. The defaults fit
/// Stave's chains (the benches sign with them); another node's gas schedule may differ,
/// so `stave load` estimates them on the node it drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GasLimits {
    /// An ETH transfer to a fresh address (or to the hot account).
    pub transfer: u64,
    /// A token `transfer` to a fresh address.
    pub erc20_transfer: u64,
    /// A deploy of the repo's ERC-20.
    pub deploy: u64,
}

impl Default for GasLimits {
    fn default() -> Self {
        Self {
            transfer: TRANSFER_GAS,
            erc20_transfer: ERC20_TRANSFER_GAS,
            deploy: DEPLOY_GAS,
        }
    }
}

impl Workload {
    /// Every workload, in declaration order.
    pub const ALL: [Workload; 4] = [
        Workload::Transfer,
        Workload::Erc20,
        Workload::Conflict,
        Workload::Mixed,
    ];

    /// The workload's name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Transfer => "transfer",
            Workload::Erc20 => "erc20",
            Workload::Conflict => "conflict",
            Workload::Mixed => "mixed",
        }
    }

    /// Whether its transactions call the token contract (which must then exist).
    pub fn uses_token(self) -> bool {
        matches!(self, Workload::Erc20 | Workload::Mixed)
    }

    /// How many of its first `txs` transactions revert by design (mixed: every fifth).
    pub fn reverts(self, txs: usize) -> usize {
        match self {
            Workload::Mixed => txs / 5,
            _ => 0,
        }
    }

    /// The most gas any of its transactions may use under `gas`: what a sender is funded
    /// for.
    pub fn max_gas(self, gas: &GasLimits) -> u64 {
        match self {
            Workload::Transfer | Workload::Conflict => gas.transfer,
            Workload::Erc20 => gas.erc20_transfer,
            Workload::Mixed => gas.transfer.max(gas.erc20_transfer).max(gas.deploy),
        }
    }

    /// The most wei any of its transactions sends.
    pub fn max_value(self) -> U256 {
        match self {
            Workload::Erc20 => U256::ZERO,
            Workload::Transfer | Workload::Conflict | Workload::Mixed => U256::from(1),
        }
    }

    /// Transaction `index` of this workload, with `nonce` and the gas limits `gas`;
    /// recipients are addresses derived from `index` that no sender uses.
    pub fn tx(
        self,
        builder: &TxBuilder,
        targets: &Targets,
        gas: &GasLimits,
        index: u64,
        nonce: u64,
    ) -> TypedTransaction {
        let one = U256::from(1);
        let Targets { token, hot } = *targets;
        let pay = |to: Address| builder.transfer_with_gas(nonce, gas.transfer, to, one);
        let send_tokens = |amount: U256| {
            builder.erc20_transfer_with_gas(
                nonce,
                gas.erc20_transfer,
                token,
                recipient(index),
                amount,
            )
        };
        match self {
            Workload::Transfer => pay(recipient(index)),
            Workload::Erc20 => send_tokens(one),
            Workload::Conflict => pay(hot),
            Workload::Mixed => match index % 5 {
                0 => pay(recipient(index)),
                1 => send_tokens(one),
                2 => pay(hot),
                3 => builder.deploy(nonce, gas.deploy, stave_token_initcode(U256::from(1_000))),
                _ => send_tokens(U256::MAX),
            },
        }
    }

    /// A genesis for [`signed_workload`] of this workload: see [`workload_genesis`]; the
    /// token is deployed at `targets.token` when the workload uses one.
    pub fn genesis(self, chain_id: u64, accounts: u64, targets: &Targets) -> ChainSpec {
        workload_genesis(
            chain_id,
            accounts,
            self.uses_token().then_some(targets.token),
        )
    }
}

/// `count` signed transactions of `workload` with the default [`Targets`]: tx i is sent by
/// dev account i with nonce 0, to an address derived from i that no sender uses. Signed
/// in parallel.
pub fn signed_workload(
    workload: Workload,
    builder: &TxBuilder,
    count: usize,
) -> Result<Vec<SignedTx>, SdkError> {
    signed_workload_range(workload, &Targets::default(), builder, 0..count as u64)
}

/// Transactions `range` of [`signed_workload`] naming `targets`, so a caller can sign a
/// large workload in pieces (and show progress between them).
pub fn signed_workload_range(
    workload: Workload,
    targets: &Targets,
    builder: &TxBuilder,
    range: std::ops::Range<u64>,
) -> Result<Vec<SignedTx>, SdkError> {
    range
        .into_par_iter()
        .map(|i| {
            let account = dev_account(i);
            let signer = LocalSigner::from_secret(&account.secret)?;
            Ok(signer.sign_tx(workload.tx(builder, targets, &GasLimits::default(), i, 0)))
        })
        .collect()
}

/// A genesis for [`signed_workload`]: dev accounts `0..accounts` funded with ETH (see
/// [`ChainSpec::dev`]) and, when `token` is given, the repo's ERC-20 at that address with
/// 1,000 tokens (18 decimals) for each of them.
pub fn workload_genesis(chain_id: u64, accounts: u64, token: Option<Address>) -> ChainSpec {
    let spec = ChainSpec::dev(chain_id, accounts);
    let Some(token) = token else { return spec };
    let funded = B256::from(U256::from(1_000u64) * U256::from(10u64).pow(U256::from(18)));
    let storage = (0..accounts)
        .into_par_iter()
        .map(|i| (stave_token_balance_slot(dev_account(i).address), funded))
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let token_account = GenesisAccount::default()
        .with_code(Some(stave_token_runtime()))
        .with_storage(Some(storage));
    // Only the alloc changed, and the dev spec it came from was valid.
    spec.with_account(token, token_account)
        .expect("a dev genesis plus a contract is valid")
}

/// A recipient address for tx `i`, disjoint from every dev sender.
fn recipient(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[0] = 0x5a;
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_names_are_the_json_names() {
        for workload in Workload::ALL {
            let json = serde_json::to_value(workload).expect("serializes");
            assert_eq!(json, workload.name());
        }
        assert_eq!(Workload::Mixed.reverts(10), 2);
        assert_eq!(Workload::Mixed.reverts(9), 1);
    }

    #[test]
    fn batch_keeps_order_and_equals_serial_signing() {
        let signer = LocalSigner::from_secret(&dev_account(0).secret).expect("dev key");
        let builder = TxBuilder::legacy(1337, 1);
        let to = dev_account(1).address;
        let batch = sign_batch(&signer, 64, |nonce| {
            builder.transfer(nonce as u64, to, U256::from(1))
        });
        assert_eq!(batch.len(), 64);
        for (nonce, raw) in batch.iter().enumerate() {
            assert_eq!(
                *raw,
                signer.sign_raw(&builder.transfer(nonce as u64, to, U256::from(1)))
            );
        }
    }
}
