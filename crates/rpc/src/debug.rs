//! `debug_trace*`: go-ethereum's transaction traces (the struct logger, `callTracer`,
//! `prestateTracer`, `4byteTracer`, `noopTracer`, `flatCallTracer`, `muxTracer`), made by
//! revm-inspectors (see [`crate::trace`] for how blocks and calls are traced). JavaScript
//! tracers are refused.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::B256;
use alloy_rpc_types_eth::TransactionRequest;
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace, TraceResult,
};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_exec::{Tracer, TxTrace};

use crate::{
    error::RpcError,
    rpc::{Outcome, Rpc},
    trace::tag,
};

/// `debug_trace*` methods.
#[rpc(server)]
pub trait DebugApi {
    /// An included transaction, traced on the state the transactions before it left.
    #[method(name = "debug_traceTransaction")]
    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace>;
    /// A call, traced on a block's state.
    #[method(name = "debug_traceCall")]
    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace>;
    /// Every transaction of a block by number or tag.
    #[method(name = "debug_traceBlockByNumber")]
    async fn trace_block_by_number(
        &self,
        number: BlockNumberOrTag,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>>;
    /// Every transaction of a block by hash.
    #[method(name = "debug_traceBlockByHash")]
    async fn trace_block_by_hash(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>>;
}

/// The tracer `options` name (the struct logger when none).
fn geth(options: Option<GethDebugTracingOptions>) -> Tracer {
    Tracer::Geth(Box::new(options.unwrap_or_default()))
}

/// The geth trace in `trace`.
fn geth_trace(trace: TxTrace) -> Outcome<GethTrace> {
    match trace {
        TxTrace::Geth(trace) => Ok(*trace),
        _ => Err(RpcError::Internal(
            "a geth tracer made another trace".into(),
        )),
    }
}

impl Rpc {
    /// Every transaction of block `block` traced with `options`, each with its hash.
    async fn trace_block_geth(
        &self,
        block: BlockId,
        options: Option<GethDebugTracingOptions>,
    ) -> Outcome<Vec<TraceResult>> {
        let number = self.number_of(Some(block))?;
        let tracer = geth(options);
        self.evm(move |rpc, deadline| {
            let (block, traces) = rpc
                .trace_stored(number, |count| 0..count, &tracer, deadline)?
                .ok_or_else(|| RpcError::InvalidParams(format!("block {number} not found")))?;
            block
                .txs
                .iter()
                .zip(traces)
                .map(|((tx, _), trace)| {
                    Ok(TraceResult::Success {
                        result: geth_trace(trace)?,
                        tx_hash: Some(tx.hash()),
                    })
                })
                .collect()
        })
        .await
    }
}

#[async_trait]
impl DebugApiServer for Rpc {
    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace> {
        let tracer = geth(options);
        Ok(self
            .evm(move |rpc, deadline| {
                let (number, index) = rpc.included(hash)?;
                let traced = rpc.trace_stored(number, |_| index..index + 1, &tracer, deadline)?;
                let trace = traced.and_then(|(_, mut traces)| traces.pop());
                geth_trace(trace.ok_or_else(|| RpcError::Internal("not traced".into()))?)
            })
            .await?)
    }

    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace> {
        let options = options.unwrap_or_default();
        if options.state_overrides.is_some() || options.block_overrides.is_some() {
            return Err(RpcError::InvalidParams(
                "state and block overrides are not supported by debug_traceCall yet".into(),
            )
            .into());
        }
        let number = self.number_of(block)?;
        let tracer = geth(Some(options.tracing_options));
        Ok(self
            .evm(move |rpc, deadline| {
                geth_trace(rpc.trace_request(&request, number, &tracer, deadline)?)
            })
            .await?)
    }

    async fn trace_block_by_number(
        &self,
        number: BlockNumberOrTag,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>> {
        Ok(self.trace_block_geth(tag(number), options).await?)
    }

    async fn trace_block_by_hash(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>> {
        Ok(self.trace_block_geth(BlockId::from(hash), options).await?)
    }
}
