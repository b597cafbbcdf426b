//! Account state at a block: balances, nonces, code and storage.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{Address, B256, Bytes, U64, U256};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};

use crate::rpc::Rpc;

/// `eth_*` methods that read an account's state at a block.
#[rpc(server)]
pub trait EthStateApi {
    /// Balance at a block.
    #[method(name = "eth_getBalance")]
    fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256>;
    /// Nonce at a block; `pending` counts the txpool.
    #[method(name = "eth_getTransactionCount")]
    fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64>;
    /// Code at a block.
    #[method(name = "eth_getCode")]
    fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes>;
    /// A storage slot at a block.
    #[method(name = "eth_getStorageAt")]
    fn storage_at(&self, address: Address, slot: U256, block: Option<BlockId>) -> RpcResult<B256>;
}

impl EthStateApiServer for Rpc {
    fn balance(&self, address: Address, block: Option<BlockId>) -> RpcResult<U256> {
        Ok(self.with_state(block, |state| {
            Ok(state.account(address)?.map_or(U256::ZERO, |a| a.balance))
        })?)
    }

    fn transaction_count(&self, address: Address, block: Option<BlockId>) -> RpcResult<U64> {
        // The pool first, then the state: the producer drops included transactions from
        // the pool only after their block's state is in, so a transaction missing from the
        // pool is then counted by the state (the other order can miss it in both).
        let pending = matches!(block, Some(BlockId::Number(BlockNumberOrTag::Pending)));
        let pooled = if pending {
            self.ctx.pool.pending_nonce(address)
        } else {
            None
        };
        let nonce = self.with_state(block, |state| {
            Ok(state.account(address)?.map_or(0, |a| a.nonce))
        })?;
        Ok(U64::from(pooled.map_or(nonce, |pooled| pooled.max(nonce))))
    }

    fn code(&self, address: Address, block: Option<BlockId>) -> RpcResult<Bytes> {
        Ok(
            self.with_state(block, |state| match state.account(address)? {
                Some(account) if account.code_hash != alloy_primitives::KECCAK256_EMPTY => {
                    Ok(state.code(account.code_hash)?.unwrap_or_default())
                }
                _ => Ok(Bytes::new()),
            })?,
        )
    }

    fn storage_at(&self, address: Address, slot: U256, block: Option<BlockId>) -> RpcResult<B256> {
        Ok(self.with_state(block, |state| Ok(B256::from(state.storage(address, slot)?)))?)
    }
}
