//! `eth_simulateV1` (registered with `eth_call` in [`super::call`]): the request's calls
//! as [`stave_exec::SimCall`]s, the simulation run by [`stave_exec::simulate`] on a
//! block's state within the `[rpc]` limits, and each simulated block answered as a block
//! is, with its calls' results.

use std::time::Instant;

use alloy_primitives::TxKind;
use alloy_rpc_types_eth::{
    TransactionRequest,
    simulate::{SimBlock, SimCallResult, SimulateError, SimulatePayload, SimulatedBlock},
};
use stave_exec::{CallOutcome, SimBounds, SimCall, SimFee, SimulationError};
use stave_primitives::block_bloom;

use crate::{
    convert::{StoredBlock, rpc_block, rpc_logs_of},
    error::{EXECUTION_REVERTED, RpcError, revert_reason, simulate::VM_ERROR},
    rpc::{Outcome, Rpc},
};

impl Rpc {
    /// Simulates `payload` on the state after block `number`, stopping at `deadline`.
    pub(crate) fn simulate(
        &self,
        payload: SimulatePayload,
        number: u64,
        deadline: Instant,
    ) -> Outcome<Vec<SimulatedBlock>> {
        let chain_id = self.ctx.view.spec().chain_id();
        let config = &self.ctx.config;
        let full = payload.return_full_transactions;
        let payload = sim_payload(payload, chain_id)?;
        let bounds = SimBounds {
            max_blocks: config.simulate_max_blocks,
            max_calls: config.simulate_max_calls,
            gas_cap: config.gas_cap,
            deadline,
        };
        let simulated = self
            .ctx
            .view
            .with_state(Some(number), |state, header| {
                stave_exec::simulate(state, header, chain_id, &payload, bounds)
            })?
            .map_err(|error| match error {
                SimulationError::TimedOut => self.timed_out(),
                error => RpcError::Simulation(error),
            })?;
        simulated
            .into_iter()
            .map(|block| rpc_simulated(block, full))
            .collect()
    }
}

/// The request with its calls as the executor takes them.
fn sim_payload(payload: SimulatePayload, chain_id: u64) -> Outcome<SimulatePayload<SimCall>> {
    let block_state_calls = payload
        .block_state_calls
        .into_iter()
        .map(|block| {
            Ok(SimBlock {
                block_overrides: block.block_overrides,
                state_overrides: block.state_overrides,
                calls: block
                    .calls
                    .iter()
                    .map(|call| sim_call(call, chain_id))
                    .collect::<Outcome<_>>()?,
            })
        })
        .collect::<Outcome<_>>()?;
    Ok(SimulatePayload {
        block_state_calls,
        trace_transfers: payload.trace_transfers,
        validation: payload.validation,
        return_full_transactions: payload.return_full_transactions,
    })
}

/// `request` as a simulated call on chain `chain_id`, refused as go-ethereum refuses it:
/// both fee styles at once, another chain's id; and blob or EIP-7702 fields, which this
/// chain's simulation does not run.
fn sim_call(request: &TransactionRequest, chain_id: u64) -> Outcome<SimCall> {
    let invalid = |message: String| Err(RpcError::InvalidParams(message));
    if let Some(id) = request.chain_id
        && id != chain_id
    {
        return invalid(format!(
            "chainId does not match node's (have={id}, want={chain_id})"
        ));
    }
    if request.blob_versioned_hashes.is_some() || request.sidecar.is_some() {
        return invalid("blob transactions are not supported by eth_simulateV1".into());
    }
    if request.authorization_list.is_some() {
        return invalid("authorization lists are not supported by eth_simulateV1".into());
    }
    let fee = match (
        request.gas_price,
        request.max_fee_per_gas,
        request.max_priority_fee_per_gas,
    ) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return invalid(
                "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
            );
        }
        (Some(gas_price), None, None) => SimFee::Legacy { gas_price },
        (None, max_fee, priority_fee) => SimFee::Dynamic {
            max_fee: max_fee.unwrap_or(0),
            priority_fee: priority_fee.unwrap_or(0),
        },
    };
    Ok(SimCall {
        from: request.from.unwrap_or_default(),
        to: match request.to {
            Some(TxKind::Call(to)) => Some(to),
            _ => None,
        },
        gas: request.gas,
        fee,
        nonce: request.nonce,
        value: request.value.unwrap_or_default(),
        input: request.input.input().cloned().unwrap_or_default(),
        access_list: request.access_list.clone().unwrap_or_default(),
    })
}

/// A simulated block as a block (transaction hashes, or whole transactions when `full`)
/// with its calls' results, their logs located in it as go-ethereum locates them.
fn rpc_simulated(block: stave_exec::SimulatedBlock, full: bool) -> Outcome<SimulatedBlock> {
    let body = stave_codec::encode_indexed(&block.txs, |(tx, _), out| tx.encode_into(out))
        .map_err(RpcError::internal)?;
    let stored = StoredBlock {
        size: alloy_rlp::encode(&block.header).len() + body.len(),
        header: block.header,
        hash: block.hash,
        txs: block.txs,
    };
    let logs = rpc_logs_of(&stored, block.calls.iter().map(|call| call.logs.as_slice()));
    let calls = block
        .calls
        .into_iter()
        .zip(logs)
        .map(|(call, logs)| {
            let (return_data, gas_used, error) = match call.outcome {
                CallOutcome::Success { output, gas_used } => (output, gas_used, None),
                CallOutcome::Revert { output, gas_used } => {
                    let message = RpcError::Reverted {
                        reason: revert_reason(&output),
                        data: output.clone(),
                    }
                    .to_string();
                    let error = SimulateError {
                        code: EXECUTION_REVERTED,
                        message,
                        data: Some(output),
                    };
                    (Default::default(), gas_used, Some(error))
                }
                CallOutcome::Halt { reason, gas_used } => {
                    let error = SimulateError {
                        code: VM_ERROR,
                        message: reason,
                        data: None,
                    };
                    (Default::default(), gas_used, Some(error))
                }
                other @ (CallOutcome::Invalid(_) | CallOutcome::TimedOut) => {
                    return Err(RpcError::Internal(format!(
                        "unexpected simulated outcome {other:?}"
                    )));
                }
            };
            Ok(SimCallResult {
                return_data,
                status: error.is_none(),
                logs,
                gas_used,
                max_used_gas: Some(call.max_used_gas),
                error,
            })
        })
        .collect::<Outcome<_>>()?;
    Ok(SimulatedBlock {
        inner: rpc_block(&stored, block_bloom(&block.receipts), full),
        calls,
    })
}
