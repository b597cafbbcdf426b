//! `stave_*`: what the consortium's governance contract (docs/governance.md) decides, read
//! as every node reads it: who is admitted, and whether a transaction would be refused.

use alloy_eips::BlockId;
use alloy_primitives::{Address, B256};
use jsonrpsee::{core::RpcResult, proc_macros::rpc};
use serde::Serialize;
use stave_governance::{Checker, admitted};

use crate::rpc::Rpc;

/// Who the contract admits at a block.
#[derive(Debug, Clone, Serialize)]
pub struct Admitted {
    /// The validators' ed25519 consensus keys in the contract at the block (a change
    /// counts from the consensus epoch after the one it was made in).
    validators: Vec<B256>,
    /// The admitted non-validator nodes' ids.
    nodes: Vec<B256>,
}

/// `stave_*` methods.
#[rpc(server)]
pub trait StaveApi {
    /// The governance contract's validators and admitted nodes at a block (`null` on a
    /// chain without the contract).
    #[method(name = "stave_admitted")]
    fn admitted(&self, block: Option<BlockId>) -> RpcResult<Option<Admitted>>;
    /// The rule the permissions at a block refuse a transaction from `from` to `to`
    /// (`null`: a contract creation) by, as the txpool words it; `null` if none does.
    #[method(name = "stave_checkPermission")]
    fn check_permission(
        &self,
        from: Address,
        to: Option<Address>,
        block: Option<BlockId>,
    ) -> RpcResult<Option<String>>;
}

impl StaveApiServer for Rpc {
    fn admitted(&self, block: Option<BlockId>) -> RpcResult<Option<Admitted>> {
        Ok(self.with_state(block, |state| {
            Ok(admitted(state)?.map(|admitted| Admitted {
                validators: admitted.validators,
                nodes: admitted.nodes,
            }))
        })?)
    }

    fn check_permission(
        &self,
        from: Address,
        to: Option<Address>,
        block: Option<BlockId>,
    ) -> RpcResult<Option<String>> {
        Ok(self.with_state(block, |state| {
            let refusal = Checker::new(state)?.check(from, to)?;
            Ok(refusal.map(|refusal| refusal.to_string()))
        })?)
    }
}
