//! Message calls that change nothing: `eth_call` and `eth_estimateGas`.
//!
//! A call runs like a transaction from `from` on top of a block's state, without a
//! signature or nonce check and at a gas price of zero unless one is given; its state
//! changes are thrown away.

use alloy_primitives::{Address, Bytes, TxKind, U256};
use parking_lot::RwLock;
use revm::{
    ExecuteEvm,
    context::{TxEnv, result::ExecutionResult},
    context_interface::result::EVMError,
};
use stave_primitives::{Header, StateDiff};

use crate::{
    db::{BlockDb, Overlay},
    error::ExecError,
    evm::block_evm,
    state::StateReader,
};

/// An unsigned message call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallRequest {
    /// The caller (zero address when not given).
    pub from: Address,
    /// The callee; `None` runs `input` as initcode.
    pub to: Option<Address>,
    /// Gas the call may use.
    pub gas: u64,
    /// Gas price in wei (zero: the caller pays nothing).
    pub gas_price: u128,
    /// Wei sent with the call.
    pub value: U256,
    /// Calldata, or initcode when `to` is `None`.
    pub input: Bytes,
}

impl CallRequest {
    /// A signed transaction as a call from its sender (its fee and nonce ignored).
    pub fn from_tx(tx: &stave_primitives::RecoveredTx) -> Self {
        use alloy_consensus::Transaction as _;
        let envelope = tx.tx.envelope();
        Self {
            from: tx.sender,
            to: envelope.to(),
            gas: envelope.gas_limit(),
            gas_price: 0,
            value: envelope.value(),
            input: envelope.input().clone(),
        }
    }
}

/// What a call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// It returned `output` and used `gas_used`.
    Success {
        /// Return data (the deployed code for a creation).
        output: Bytes,
        /// Gas used, after refunds.
        gas_used: u64,
    },
    /// It reverted with `output` (ABI-encoded reason, if any).
    Revert {
        /// Revert data.
        output: Bytes,
        /// Gas used.
        gas_used: u64,
    },
    /// It stopped exceptionally (out of gas, invalid opcode, ...).
    Halt {
        /// revm's reason.
        reason: String,
        /// Gas used (all of it).
        gas_used: u64,
    },
    /// It could not start: the caller cannot pay the value, gas below intrinsic, ...
    Invalid(String),
}

/// Runs `request` against `base` in the environment of `header` (base fee ignored).
pub fn call(
    base: &dyn StateReader,
    chain_id: u64,
    header: &Header,
    request: &CallRequest,
) -> Result<CallOutcome, ExecError> {
    let diff = RwLock::new(StateDiff::default());
    let call_header = Header {
        base_fee_per_gas: 0,
        gas_limit: header.gas_limit.max(request.gas),
        ..header.clone()
    };
    let mut evm = block_evm(
        BlockDb::new(Overlay::new(base, &diff)),
        chain_id,
        &call_header,
    );
    evm.ctx.cfg.disable_nonce_check = true;
    let tx = TxEnv {
        tx_type: 0,
        caller: request.from,
        gas_limit: request.gas,
        gas_price: request.gas_price,
        kind: request.to.map_or(TxKind::Create, TxKind::Call),
        value: request.value,
        data: request.input.clone(),
        chain_id: Some(chain_id),
        ..Default::default()
    };
    let outcome = evm.transact_one(tx);
    // Nothing a call does is kept.
    let _discarded = evm.finalize();
    let result = match outcome {
        Ok(result) => result,
        Err(EVMError::Transaction(invalid)) => {
            return Ok(CallOutcome::Invalid(invalid.to_string()));
        }
        Err(EVMError::Database(error)) => return Err(error.into()),
        Err(other) => {
            return Err(ExecError::Evm {
                index: 0,
                reason: other.to_string(),
            });
        }
    };
    let gas_used = result.tx_gas_used();
    Ok(match result {
        ExecutionResult::Success { output, .. } => CallOutcome::Success {
            output: output.into_data(),
            gas_used,
        },
        ExecutionResult::Revert { output, .. } => CallOutcome::Revert { output, gas_used },
        ExecutionResult::Halt { reason, .. } => CallOutcome::Halt {
            reason: format!("{reason:?}"),
            gas_used,
        },
    })
}
