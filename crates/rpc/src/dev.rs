//! The dev chain's methods (`stave node --dev` only), as Anvil and Hardhat's node answer
//! them: the node's funded accounts sign (`eth_sendTransaction`, `eth_signTransaction`,
//! `eth_sign`, `personal_sign`, `eth_signTypedData_v4`), and blocks come when asked for (`evm_mine`,
//! `anvil_mine`/`hardhat_mine`), per transaction (`evm_setAutomine`) and at the times
//! asked for (`evm_increaseTime`, `evm_setNextBlockTimestamp`), and accounts change when
//! told to (`anvil_setBalance`, `setNonce`, `setCode`, `setStorageAt`, each committed with
//! a block made at once); the chain goes back to a snapshot (`evm_snapshot`,
//! `evm_revert`), and accounts whose keys the node lacks send when impersonated
//! (`anvil_impersonateAccount`). A production node serves none of them.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use alloy_consensus::TypedTransaction;
use alloy_dyn_abi::eip712::TypedData;
use alloy_primitives::{
    Address, B256, Bytes, Signature, TxKind, U64, U256, eip191_hash_message, keccak256,
};
use alloy_rpc_types_eth::{
    TransactionRequest,
    state::{AccountOverride, StateOverride},
};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use serde::Deserialize;
use stave_primitives::{GasFee, TxFields};
use stave_sdk::LocalSigner;

use crate::{
    error::RpcError,
    eth::{call::EthCallApiServer as _, transactions::EthTransactionsApiServer as _},
    rpc::{Outcome, Rpc},
};

/// A dev node's block making, as its JSON-RPC steers it.
pub trait Mining: Send + Sync {
    /// Makes `blocks` blocks now, the first stamped `first` (the block clock's time if
    /// none), each next one `interval` seconds later; returns once they are committed, or
    /// why they could not be made.
    fn mine(&self, blocks: u64, first: Option<u64>, interval: u64) -> Result<(), String>;
    /// Makes a block for each transaction as it arrives (`true`, Anvil's default) or one
    /// every block time (`false`, Stave's).
    fn set_automine(&self, on: bool);
    /// Whether blocks are made per transaction.
    fn automine(&self) -> bool;
    /// Moves the clock blocks are stamped with `seconds` forward; returns how far ahead
    /// of the wall clock it now runs, in seconds.
    fn increase_time(&self, seconds: u64) -> u64;
    /// Stamps the next block `timestamp` (no earlier than its parent's).
    fn set_next_timestamp(&self, timestamp: u64);
    /// Makes `edits` to the state and a block that commits them (with whatever the pool
    /// holds); returns once it is committed.
    fn edit(&self, edits: StateOverride) -> Result<(), String>;
    /// Keeps the head's state to come back to; returns the snapshot's id.
    fn snapshot(&self) -> Result<u64, String>;
    /// Takes the chain back to snapshot `id` (dropping it and every later snapshot, and
    /// the pool's transactions); false if there is no such snapshot.
    fn revert(&self, id: u64) -> Result<bool, String>;
}

/// What a dev node gives its JSON-RPC besides the chain: its funded accounts' keys, and
/// its block making.
#[derive(Clone)]
pub struct DevChain {
    /// The accounts `eth_accounts` lists and the signing methods sign with.
    pub signers: Vec<LocalSigner>,
    /// The producer's controls.
    pub mining: Arc<dyn Mining>,
    /// The accounts `eth_sendTransaction` sends for without their keys.
    pub impersonation: Arc<Impersonation>,
}

/// The accounts a dev node sends transactions for without their keys
/// (`anvil_impersonateAccount`, or all of them with `anvil_autoImpersonateAccount`).
#[derive(Debug, Default)]
pub struct Impersonation {
    accounts: parking_lot::Mutex<HashSet<Address>>,
    everyone: AtomicBool,
}

impl Impersonation {
    /// Whether `address`'s transactions are sent without its key.
    pub fn covers(&self, address: Address) -> bool {
        self.everyone.load(Ordering::Relaxed) || self.accounts.lock().contains(&address)
    }
}

/// The signature an impersonated account's transactions carry. No key made it; `r` is
/// derived from the sender, so two senders' otherwise equal transactions differ in hash,
/// and its first byte is zero, so it is below the curve order, as `s` = 1 is below half
/// of it: the stateless checks pass. Nothing recovers it: the pool takes the sender as
/// given ([`stave_txpool::TxPool::add_impersonated`]).
fn placeholder_signature(sender: Address) -> Signature {
    let mut r = keccak256(sender).0;
    r[0] = 0;
    Signature::new(U256::from_be_bytes(r), U256::from(1), false)
}

impl std::fmt::Debug for DevChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevChain")
            .field("accounts", &self.signers.len())
            .finish_non_exhaustive()
    }
}

/// `evm_mine`'s parameter: a timestamp (Hardhat, Ganache), or a timestamp and a count.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MineParams {
    /// The block's timestamp.
    Timestamp(U64),
    /// Ganache's form.
    Options {
        /// The first block's timestamp.
        timestamp: Option<U64>,
        /// How many blocks.
        blocks: Option<U64>,
    },
}

/// The dev chain's methods.
#[rpc(server)]
pub trait DevApi {
    /// Signs a transaction with the node's account `from`, filling in what it lacks
    /// (nonce, gas, fees, chain id), and submits it.
    #[method(name = "eth_sendTransaction")]
    async fn send_transaction(&self, request: TransactionRequest) -> RpcResult<B256>;
    /// Signs a transaction as `eth_sendTransaction` does; returns its signed bytes.
    #[method(name = "eth_signTransaction")]
    async fn sign_transaction(&self, request: TransactionRequest) -> RpcResult<Bytes>;
    /// Signs `data` as an EIP-191 personal message with the node's account `address`.
    #[method(name = "eth_sign")]
    fn sign(&self, address: Address, data: Bytes) -> RpcResult<Bytes>;
    /// `eth_sign` with its parameters the other way round.
    #[method(name = "personal_sign")]
    fn personal_sign(&self, data: Bytes, address: Address) -> RpcResult<Bytes>;
    /// Signs EIP-712 typed data (an object, or the JSON text of one, as wallets send it)
    /// with the node's account `address`.
    #[method(name = "eth_signTypedData_v4")]
    fn sign_typed_data(&self, address: Address, data: serde_json::Value) -> RpcResult<Bytes>;
    /// Makes a block now (or as many, from the timestamp, as the parameter says).
    #[method(name = "evm_mine")]
    async fn evm_mine(&self, params: Option<MineParams>) -> RpcResult<String>;
    /// Makes `blocks` blocks (one by default), `interval` seconds apart.
    #[method(name = "anvil_mine", aliases = ["hardhat_mine"])]
    async fn anvil_mine(&self, blocks: Option<U256>, interval: Option<U256>) -> RpcResult<()>;
    /// Turns automine on or off.
    #[method(name = "evm_setAutomine", aliases = ["anvil_setAutomine"])]
    fn set_automine(&self, on: bool) -> RpcResult<bool>;
    /// Whether automine is on.
    #[method(name = "anvil_getAutomine", aliases = ["hardhat_getAutomine"])]
    fn automine(&self) -> RpcResult<bool>;
    /// Moves the block clock forward; returns its total lead, in seconds.
    #[method(name = "evm_increaseTime", aliases = ["anvil_increaseTime"])]
    fn increase_time(&self, seconds: U256) -> RpcResult<U256>;
    /// Stamps the next block with this time.
    #[method(name = "evm_setNextBlockTimestamp", aliases = ["anvil_setNextBlockTimestamp"])]
    fn set_next_timestamp(&self, timestamp: U256) -> RpcResult<()>;
    /// Sets an account's balance (committed with a block made at once).
    #[method(name = "anvil_setBalance", aliases = ["hardhat_setBalance"])]
    async fn set_balance(&self, address: Address, balance: U256) -> RpcResult<()>;
    /// Sets an account's nonce.
    #[method(name = "anvil_setNonce", aliases = ["hardhat_setNonce"])]
    async fn set_nonce(&self, address: Address, nonce: U256) -> RpcResult<()>;
    /// Sets an account's code.
    #[method(name = "anvil_setCode", aliases = ["hardhat_setCode"])]
    async fn set_code(&self, address: Address, code: Bytes) -> RpcResult<()>;
    /// Sets one storage slot of an account.
    #[method(name = "anvil_setStorageAt", aliases = ["hardhat_setStorageAt"])]
    async fn set_storage_at(&self, address: Address, slot: U256, value: B256) -> RpcResult<bool>;
    /// Keeps the head's state to come back to; returns the snapshot's id.
    #[method(name = "evm_snapshot", aliases = ["anvil_snapshot"])]
    async fn snapshot(&self) -> RpcResult<U256>;
    /// Takes the chain back to a snapshot, dropping it and every later one; false if
    /// there is no such snapshot.
    #[method(name = "evm_revert", aliases = ["anvil_revert"])]
    async fn revert(&self, id: U256) -> RpcResult<bool>;
    /// Lets `eth_sendTransaction` send for `address` without its key.
    #[method(name = "anvil_impersonateAccount", aliases = ["hardhat_impersonateAccount"])]
    fn impersonate(&self, address: Address) -> RpcResult<()>;
    /// Ends `anvil_impersonateAccount` for `address`.
    #[method(
        name = "anvil_stopImpersonatingAccount",
        aliases = ["hardhat_stopImpersonatingAccount"]
    )]
    fn stop_impersonating(&self, address: Address) -> RpcResult<()>;
    /// Impersonates every account (`true`) or only those named (`false`).
    #[method(name = "anvil_autoImpersonateAccount")]
    fn auto_impersonate(&self, on: bool) -> RpcResult<()>;
}

impl Rpc {
    /// The dev chain, or the error a production node answers its methods with.
    fn dev(&self) -> Outcome<&DevChain> {
        self.ctx.dev.as_ref().ok_or_else(|| {
            RpcError::InvalidParams(
                "only a dev node (stave node --dev) signs or mines on request".into(),
            )
        })
    }

    /// The node's signer of `address`.
    fn signer_of(&self, address: Address) -> Outcome<&LocalSigner> {
        self.dev()?
            .signers
            .iter()
            .find(|signer| signer.address() == address)
            .ok_or_else(|| {
                RpcError::InvalidParams(format!(
                    "{address} is not an account of this node (see eth_accounts)"
                ))
            })
    }

    /// `request` complete and signed by the node's account `from`, in its EIP-2718 form.
    async fn signed(&self, request: TransactionRequest) -> Outcome<Bytes> {
        let from = sender(&request)?;
        let signer = self.signer_of(from)?;
        let tx = self.completed(from, request).await?;
        Ok(Bytes::from(signer.sign_raw(&tx).bytes))
    }

    /// `request` sent by `from`, completed with what it lacks: the pending nonce, an
    /// estimated gas limit, fees, the chain id.
    async fn completed(
        &self,
        from: Address,
        request: TransactionRequest,
    ) -> Outcome<TypedTransaction> {
        let nonce = match request.nonce {
            Some(nonce) => nonce,
            None => {
                let pending = alloy_eips::BlockId::Number(alloy_eips::BlockNumberOrTag::Pending);
                crate::eth::state::EthStateApiServer::transaction_count(self, from, Some(pending))
                    .map_err(|error| RpcError::Internal(error.message().to_owned()))?
                    .to()
            }
        };
        let gas = match request.gas {
            Some(gas) => gas,
            None => self
                .estimate_gas(request.clone(), None, None)
                .await
                .map_err(|error| RpcError::Internal(error.message().to_owned()))?
                .to(),
        };
        let fee = match request.gas_price {
            Some(gas_price) => GasFee::Legacy { gas_price },
            None => {
                let tip = request
                    .max_priority_fee_per_gas
                    .unwrap_or(self.ctx.config.suggested_tip);
                let base_fee = u128::from(
                    self.ctx
                        .view
                        .with_state(None, |_, header| header.base_fee_per_gas)?,
                );
                GasFee::Dynamic {
                    max_fee: request.max_fee_per_gas.unwrap_or(2 * base_fee + tip),
                    priority_fee: tip,
                }
            }
        };
        let tx = TxFields {
            chain_id: request.chain_id.unwrap_or(self.ctx.view.spec().chain_id()),
            nonce,
            gas_limit: gas,
            to: request.to.unwrap_or(TxKind::Create),
            value: request.value.unwrap_or_default(),
            input: request.input.input().cloned().unwrap_or_default(),
            access_list: request.access_list.unwrap_or_default(),
            fee,
        }
        .typed();
        Ok(tx)
    }

    /// Sends `request` for the impersonated account `from`, with a placeholder signature.
    async fn send_impersonated(&self, from: Address, request: TransactionRequest) -> Outcome<B256> {
        let tx = self.completed(from, request).await?;
        let signature = placeholder_signature(from);
        let hash = tx.tx_hash(&signature);
        let tx = stave_primitives::SignedTx::from_envelope(
            alloy_consensus::Signed::new_unchecked(tx, signature, hash).into(),
        );
        let pool = &self.ctx.pool;
        self.ctx
            .view
            .with_state(None, |state, header| {
                pool.add_impersonated(tx, from, state, header.base_fee_per_gas)
            })?
            .map_err(RpcError::from)
    }

    /// `data` signed by the node's account `address` as an EIP-191 personal message:
    /// `r ‖ s ‖ v` with `v` 27 or 28.
    fn sign_message(&self, address: Address, data: &[u8]) -> Outcome<Bytes> {
        let signature = self
            .signer_of(address)?
            .sign_hash(&eip191_hash_message(data));
        Ok(Bytes::from(signature.as_bytes().to_vec()))
    }

    /// Makes `blocks` blocks from `first` on, `interval` seconds apart, off the server's
    /// threads.
    async fn mine(&self, blocks: u64, first: Option<u64>, interval: u64) -> Outcome<()> {
        let mining = self.dev()?.mining.clone();
        tokio::task::spawn_blocking(move || mining.mine(blocks, first, interval))
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::Internal)
    }
}

impl Rpc {
    /// Makes `change` to `address` and a block that commits it, off the server's threads.
    async fn edit(&self, address: Address, change: AccountOverride) -> Outcome<()> {
        let mining = self.dev()?.mining.clone();
        let mut edits = StateOverride::default();
        edits.insert(address, change);
        tokio::task::spawn_blocking(move || mining.edit(edits))
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::Internal)
    }
}

/// The `from` of a transaction request, which the dev methods need.
fn sender(request: &TransactionRequest) -> Outcome<Address> {
    request
        .from
        .ok_or_else(|| RpcError::InvalidParams("'from' is required".into()))
}

/// Most blocks one request may make: a typo must not stop the node for minutes.
const MAX_MINED: u64 = 10_000;

/// `blocks` if within [`MAX_MINED`].
fn mined(blocks: u64) -> Outcome<u64> {
    match blocks {
        1..=MAX_MINED => Ok(blocks),
        _ => Err(RpcError::InvalidParams(format!(
            "blocks must be 1 to {MAX_MINED}, not {blocks}"
        ))),
    }
}

#[async_trait]
impl DevApiServer for Rpc {
    async fn send_transaction(&self, request: TransactionRequest) -> RpcResult<B256> {
        let from = sender(&request)?;
        if self.signer_of(from).is_err() && self.dev()?.impersonation.covers(from) {
            return Ok(self.send_impersonated(from, request).await?);
        }
        let raw = self.signed(request).await?;
        self.send_raw_transaction(raw)
    }

    async fn sign_transaction(&self, request: TransactionRequest) -> RpcResult<Bytes> {
        Ok(self.signed(request).await?)
    }

    fn sign(&self, address: Address, data: Bytes) -> RpcResult<Bytes> {
        Ok(self.sign_message(address, &data)?)
    }

    fn personal_sign(&self, data: Bytes, address: Address) -> RpcResult<Bytes> {
        Ok(self.sign_message(address, &data)?)
    }

    fn sign_typed_data(&self, address: Address, data: serde_json::Value) -> RpcResult<Bytes> {
        let data = match data {
            serde_json::Value::String(text) => serde_json::from_str(&text),
            object => serde_json::from_value(object),
        };
        let typed: TypedData = data
            .map_err(|error| RpcError::InvalidParams(format!("not EIP-712 typed data: {error}")))?;
        let hash = typed.eip712_signing_hash().map_err(|error| {
            RpcError::InvalidParams(format!("typed data does not hash: {error}"))
        })?;
        let signature = self.signer_of(address)?.sign_hash(&hash);
        Ok(Bytes::from(signature.as_bytes().to_vec()))
    }

    async fn evm_mine(&self, params: Option<MineParams>) -> RpcResult<String> {
        let (timestamp, blocks) = match params {
            None => (None, 1),
            Some(MineParams::Timestamp(timestamp)) => (Some(timestamp.to()), 1),
            Some(MineParams::Options { timestamp, blocks }) => {
                (timestamp.map(|t| t.to()), blocks.map_or(1, |b| b.to()))
            }
        };
        self.mine(mined(blocks)?, timestamp, 1).await?;
        Ok("0x0".into())
    }

    async fn anvil_mine(&self, blocks: Option<U256>, interval: Option<U256>) -> RpcResult<()> {
        let blocks = mined(blocks.map_or(1, |b| b.saturating_to()))?;
        let interval = interval.map_or(1, |i| i.saturating_to());
        Ok(self.mine(blocks, None, interval).await?)
    }

    fn set_automine(&self, on: bool) -> RpcResult<bool> {
        self.dev()?.mining.set_automine(on);
        Ok(true)
    }

    fn automine(&self) -> RpcResult<bool> {
        Ok(self.dev()?.mining.automine())
    }

    fn increase_time(&self, seconds: U256) -> RpcResult<U256> {
        Ok(U256::from(
            self.dev()?.mining.increase_time(seconds.saturating_to()),
        ))
    }

    fn set_next_timestamp(&self, timestamp: U256) -> RpcResult<()> {
        self.dev()?
            .mining
            .set_next_timestamp(timestamp.saturating_to());
        Ok(())
    }

    async fn set_balance(&self, address: Address, balance: U256) -> RpcResult<()> {
        let change = AccountOverride {
            balance: Some(balance),
            ..AccountOverride::default()
        };
        Ok(self.edit(address, change).await?)
    }

    async fn set_nonce(&self, address: Address, nonce: U256) -> RpcResult<()> {
        let nonce = u64::try_from(nonce)
            .map_err(|_| RpcError::InvalidParams(format!("nonce {nonce} is over 2^64 - 1")))?;
        let change = AccountOverride {
            nonce: Some(nonce),
            ..AccountOverride::default()
        };
        Ok(self.edit(address, change).await?)
    }

    async fn set_code(&self, address: Address, code: Bytes) -> RpcResult<()> {
        let change = AccountOverride {
            code: Some(code),
            ..AccountOverride::default()
        };
        Ok(self.edit(address, change).await?)
    }

    async fn set_storage_at(&self, address: Address, slot: U256, value: B256) -> RpcResult<bool> {
        let change = AccountOverride {
            state_diff: Some([(B256::from(slot), value)].into_iter().collect()),
            ..AccountOverride::default()
        };
        self.edit(address, change).await?;
        Ok(true)
    }

    async fn snapshot(&self) -> RpcResult<U256> {
        let mining = self.dev()?.mining.clone();
        let id = tokio::task::spawn_blocking(move || mining.snapshot())
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::Internal)?;
        Ok(U256::from(id))
    }

    async fn revert(&self, id: U256) -> RpcResult<bool> {
        let mining = self.dev()?.mining.clone();
        let Ok(id) = u64::try_from(id) else {
            return Ok(false);
        };
        Ok(tokio::task::spawn_blocking(move || mining.revert(id))
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::Internal)?)
    }

    fn impersonate(&self, address: Address) -> RpcResult<()> {
        self.dev()?.impersonation.accounts.lock().insert(address);
        Ok(())
    }

    fn stop_impersonating(&self, address: Address) -> RpcResult<()> {
        self.dev()?.impersonation.accounts.lock().remove(&address);
        Ok(())
    }

    fn auto_impersonate(&self, on: bool) -> RpcResult<()> {
        self.dev()?
            .impersonation
            .everyone
            .store(on, Ordering::Relaxed);
        Ok(())
    }
}
