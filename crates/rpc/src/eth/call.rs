//! Calls without a transaction: `eth_call`, `eth_estimateGas`, `eth_createAccessList` and
//! `eth_simulateV1` (blocks of calls, made in `eth/simulate.rs`), run on the heavy-method
//! workers within the configured gas cap and EVM timeout, on a block's state as the
//! caller's state and block overrides change it.

use std::time::{Duration, Instant};

use alloy_eips::BlockId;
use alloy_primitives::{Bytes, TxKind, U64, U256};
use alloy_rpc_types_eth::{
    AccessListResult, BlockOverrides, TransactionRequest,
    simulate::{SimulatePayload, SimulatedBlock},
    state::StateOverride,
};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_exec::{
    BlockEnv, CallOutcome, CallRequest, Overridden, OverrideError, StateReader, override_block,
};

use crate::{
    error::{RpcError, revert_reason},
    rpc::{Outcome, Rpc},
};

/// How much longer than the EVM timeout a call's answer is awaited (see `Rpc::evm`).
const EVM_GRACE: Duration = Duration::from_secs(1);

/// `eth_*` methods that run the EVM on a block's state without a transaction.
#[rpc(server)]
pub trait EthCallApi {
    /// Runs a call without a transaction.
    #[method(name = "eth_call")]
    async fn call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<Bytes>;
    /// The gas a transaction needs.
    #[method(name = "eth_estimateGas")]
    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
    ) -> RpcResult<U64>;
    /// The addresses and slots a transaction touches (EIP-2930), and the gas it uses with
    /// them warmed.
    #[method(name = "eth_createAccessList")]
    async fn create_access_list(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
    ) -> RpcResult<AccessListResult>;
    /// Runs calls as the transactions of blocks built on a block's state and on each
    /// other, with block and state overrides (go-ethereum's `eth_simulateV1`).
    #[method(name = "eth_simulateV1")]
    async fn simulate_v1(
        &self,
        payload: SimulatePayload,
        block: Option<BlockId>,
    ) -> RpcResult<Vec<SimulatedBlock>>;
}

/// What a call pretends: accounts and a block other than the state's.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallOverrides {
    /// Accounts' balance, nonce, code or storage.
    pub state: Option<StateOverride>,
    /// The block's number, time, gas limit, proposer, base fee or randomness.
    pub block: Option<Box<BlockOverrides>>,
}

impl Rpc {
    /// Runs `work` on a worker; the EVM stops at the deadline it is given (the EVM timeout
    /// from now, so the wait for a worker counts: a call that waited past it does not
    /// start). The answer is awaited a little longer than that, so a call stuck outside
    /// the EVM (a slow disk) is not waited on forever.
    pub(crate) async fn evm<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Rpc, Instant) -> Outcome<T> + Send + 'static,
    ) -> Outcome<T> {
        let timeout = self.ctx.config.evm_timeout;
        let deadline = Instant::now() + timeout;
        let task = self.heavy(move |rpc| {
            if Instant::now() >= deadline {
                return Err(rpc.timed_out());
            }
            work(rpc, deadline)
        });
        match tokio::time::timeout(timeout + EVM_GRACE, task).await {
            Ok(answer) => answer,
            Err(_) => Err(self.timed_out()),
        }
    }

    /// The error of a call stopped at the EVM timeout, in go-ethereum's words.
    pub(crate) fn timed_out(&self) -> RpcError {
        RpcError::Internal(format!(
            "execution aborted (timeout = {}s)",
            self.ctx.config.evm_timeout.as_secs_f64()
        ))
    }

    pub(crate) fn call_request(
        &self,
        request: &TransactionRequest,
        gas: Option<u64>,
    ) -> CallRequest {
        let cap = self.ctx.config.gas_cap;
        CallRequest {
            from: request.from.unwrap_or_default(),
            to: match request.to {
                Some(TxKind::Call(to)) => Some(to),
                _ => None,
            },
            gas: gas.or(request.gas).unwrap_or(cap).min(cap),
            // Calls are free: a caller need not hold ETH for gas to read or estimate.
            gas_price: 0,
            value: request.value.unwrap_or_default(),
            input: request.input.input().cloned().unwrap_or_default(),
            access_list: request.access_list.clone().unwrap_or_default(),
        }
    }

    /// Runs `run` on block `number`'s state and environment as `overrides` change them.
    pub(crate) fn on_call_state<R>(
        &self,
        number: u64,
        overrides: &CallOverrides,
        run: impl FnOnce(&dyn StateReader, BlockEnv<'_>) -> R,
    ) -> Outcome<R> {
        let chain_id = self.ctx.view.spec().chain_id();
        self.ctx
            .view
            .with_state(Some(number), |state, header| {
                let block = overrides.block.as_deref();
                let state = Overridden::new(state, overrides.state.as_ref(), block)?;
                let (header, random) = match block {
                    Some(block) => override_block(header, block)?,
                    None => (header.clone(), None),
                };
                let mut env = BlockEnv::new(chain_id, &header);
                if let Some(random) = random {
                    env.prevrandao = random;
                }
                Ok(run(&state, env))
            })?
            .map_err(|error: OverrideError| RpcError::InvalidParams(error.to_string()))
    }

    fn run_call(
        &self,
        request: &CallRequest,
        number: u64,
        overrides: &CallOverrides,
        deadline: Instant,
    ) -> Outcome<CallOutcome> {
        let outcome = self
            .on_call_state(number, overrides, |state, env| {
                stave_exec::call_until(state, env, request, deadline)
            })?
            .map_err(RpcError::internal)?;
        match outcome {
            CallOutcome::TimedOut => Err(self.timed_out()),
            outcome => Ok(outcome),
        }
    }
}

fn failed(outcome: CallOutcome) -> RpcError {
    match outcome {
        CallOutcome::Revert { output, .. } => RpcError::Reverted {
            reason: revert_reason(&output),
            data: output,
        },
        CallOutcome::Halt { reason, .. } => {
            RpcError::Internal(format!("execution failed: {reason}"))
        }
        CallOutcome::Invalid(reason) => RpcError::Internal(reason),
        CallOutcome::Success { .. } | CallOutcome::TimedOut => {
            RpcError::Internal(format!("unexpected outcome {outcome:?}"))
        }
    }
}

#[async_trait]
impl EthCallApiServer for Rpc {
    async fn call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
        block_overrides: Option<Box<BlockOverrides>>,
    ) -> RpcResult<Bytes> {
        let number = self.number_of(block)?;
        let overrides = CallOverrides {
            state: state_overrides,
            block: block_overrides,
        };
        Ok(self
            .evm(move |rpc, deadline| {
                let call = rpc.call_request(&request, None);
                match rpc.run_call(&call, number, &overrides, deadline)? {
                    CallOutcome::Success { output, .. } => Ok(output),
                    other => Err(failed(other)),
                }
            })
            .await?)
    }

    async fn estimate_gas(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        state_overrides: Option<StateOverride>,
    ) -> RpcResult<U64> {
        let number = self.number_of(block)?;
        let overrides = CallOverrides {
            state: state_overrides,
            block: None,
        };
        Ok(self
            .evm(move |rpc, deadline| {
                let mut call = rpc.call_request(&request, None);
                let cap = call.gas;
                let used = match rpc.run_call(&call, number, &overrides, deadline)? {
                    CallOutcome::Success { gas_used, .. } => gas_used,
                    CallOutcome::Halt { .. } => {
                        return Err(RpcError::Internal(format!(
                            "gas required exceeds allowance ({cap})"
                        )));
                    }
                    other => return Err(failed(other)),
                };
                // Refunds and the 63/64 rule make the limit a call needs exceed what it
                // uses: search between the two.
                let (mut low, mut high) = (used.saturating_sub(1), cap);
                while low + 1 < high {
                    let mid = low + (high - low) / 2;
                    call.gas = mid;
                    match rpc.run_call(&call, number, &overrides, deadline)? {
                        CallOutcome::Success { .. } => high = mid,
                        _ => low = mid,
                    }
                }
                Ok(U64::from(high))
            })
            .await?)
    }

    async fn create_access_list(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
    ) -> RpcResult<AccessListResult> {
        let number = self.number_of(block)?;
        Ok(self
            .evm(move |rpc, deadline| {
                let call = rpc.call_request(&request, None);
                let (access_list, outcome) = rpc
                    .on_call_state(number, &CallOverrides::default(), |state, env| {
                        stave_exec::create_access_list(state, env, &call, deadline)
                    })?
                    .map_err(|error| rpc.trace_error(error))?;
                let (gas_used, error) = match outcome {
                    CallOutcome::Success { gas_used, .. } => (gas_used, None),
                    CallOutcome::Revert { gas_used, .. } | CallOutcome::Halt { gas_used, .. } => {
                        (gas_used, Some(failed(outcome).to_string()))
                    }
                    other => return Err(failed(other)),
                };
                Ok(AccessListResult {
                    access_list,
                    gas_used: U256::from(gas_used),
                    error,
                })
            })
            .await?)
    }

    async fn simulate_v1(
        &self,
        payload: SimulatePayload,
        block: Option<BlockId>,
    ) -> RpcResult<Vec<SimulatedBlock>> {
        let number = self.number_of(block)?;
        Ok(self
            .evm(move |rpc, deadline| rpc.simulate(payload, number, deadline))
            .await?)
    }
}
