//! `stave_*`: what the consortium's governance contract (docs/governance.md) decides, read
//! as every node reads it: who is admitted, and whether a transaction would be refused.

use alloy_eips::BlockId;
use alloy_primitives::Address;
use jsonrpsee::{core::RpcResult, proc_macros::rpc};
use stave_governance::{Admitted, Checker, admitted};

use crate::rpc::Rpc;

/// `stave_*` methods.
#[rpc(server)]
pub trait StaveApi {
    /// The governance contract's validators and admitted nodes at a block (`null` on a
    /// chain without the contract). A change to the validators counts from the consensus
    /// epoch after the one it was made in.
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
        Ok(self.with_state(block, admitted)?)
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
