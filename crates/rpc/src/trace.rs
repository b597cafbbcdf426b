//! `trace_*`: Parity's (and reth's, Erigon's) transaction traces, made by revm-inspectors
//! through [`stave_exec::trace_block`], on the heavy-method workers within the EVM timeout
//! and the response limit. Also the tracing both namespaces share: a stored block's
//! transactions traced on its parent's state, and a call traced on a block's.

use std::ops::Range;

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{B256, map::HashSet};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_rpc_types_trace::{
    filter::TraceFilter,
    parity::{LocalizedTransactionTrace, TraceResults, TraceResultsWithTransactionHash, TraceType},
};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_exec::{BlockEnv, TraceBounds, TraceError, TracedBlock, Tracer, TxTrace};
use stave_primitives::RecoveredTx;

use crate::{
    convert::StoredBlock,
    error::RpcError,
    eth::call::CallOverrides,
    rpc::{Outcome, Rpc},
};

/// `trace_*` methods.
#[rpc(server)]
pub trait TraceApi {
    /// Every call frame of an included transaction.
    #[method(name = "trace_transaction")]
    async fn transaction(&self, hash: B256) -> RpcResult<Option<Vec<LocalizedTransactionTrace>>>;
    /// Every call frame of a block's transactions.
    #[method(name = "trace_block")]
    async fn block(&self, block: BlockId) -> RpcResult<Option<Vec<LocalizedTransactionTrace>>>;
    /// A block's transactions replayed with the trace types asked for.
    #[method(name = "trace_replayBlockTransactions")]
    async fn replay_block_transactions(
        &self,
        block: BlockId,
        types: HashSet<TraceType>,
    ) -> RpcResult<Option<Vec<TraceResultsWithTransactionHash>>>;
    /// An included transaction replayed with the trace types asked for.
    #[method(name = "trace_replayTransaction")]
    async fn replay_transaction(
        &self,
        hash: B256,
        types: HashSet<TraceType>,
    ) -> RpcResult<TraceResults>;
    /// A call traced with the trace types asked for.
    #[method(name = "trace_call")]
    async fn call(
        &self,
        request: TransactionRequest,
        types: HashSet<TraceType>,
        block: Option<BlockId>,
    ) -> RpcResult<TraceResults>;
    /// The call frames of a range of blocks that match the filter's addresses.
    #[method(name = "trace_filter")]
    async fn filter(&self, filter: TraceFilter) -> RpcResult<Vec<LocalizedTransactionTrace>>;
}

impl Rpc {
    /// Traces the transactions at `traced` of stored block `number` (those before run
    /// untraced) with `tracer`, on its parent's state, stopping at `deadline`; `None`
    /// for a block not stored.
    pub(crate) fn trace_stored(
        &self,
        number: u64,
        traced: impl FnOnce(usize) -> Range<usize>,
        tracer: &Tracer,
        deadline: std::time::Instant,
    ) -> Outcome<Option<(StoredBlock, Vec<TxTrace>)>> {
        let Some(block) = self.visible_block(number, true)? else {
            return Ok(None);
        };
        let Some(parent) = number.checked_sub(1) else {
            // The genesis has no transactions.
            return Ok(Some((block, Vec::new())));
        };
        let txs: Vec<RecoveredTx> = block
            .txs
            .iter()
            .map(|(tx, sender)| RecoveredTx {
                tx: tx.clone(),
                sender: *sender,
            })
            .collect();
        let range = traced(txs.len());
        let chain_id = self.ctx.view.spec().chain_id();
        let traces = self
            .ctx
            .view
            .with_state(Some(parent), |state, _| {
                let traced_block = TracedBlock {
                    base: state,
                    env: BlockEnv::new(chain_id, &block.header),
                    txs: &txs,
                    hash: block.hash,
                };
                stave_exec::trace_block(traced_block, range, tracer, self.trace_bounds(deadline))
            })?
            .map_err(|error| self.trace_error(error))?;
        Ok(Some((block, traces)))
    }

    /// Traces `request` as a call on block `number`'s state, as `overrides` change it,
    /// with `tracer`.
    pub(crate) fn trace_request(
        &self,
        request: &TransactionRequest,
        number: u64,
        overrides: &CallOverrides,
        tracer: &Tracer,
        deadline: std::time::Instant,
    ) -> Outcome<TxTrace> {
        let call = self.call_request(request, None);
        self.on_call_state(number, overrides, |state, env| {
            stave_exec::trace_call(state, env, &call, tracer, self.trace_bounds(deadline))
        })?
        .map_err(|error| self.trace_error(error))
    }

    /// What bounds one request's traces: the EVM deadline, and no more recorded bytes
    /// per transaction than an answer may hold.
    fn trace_bounds(&self, deadline: std::time::Instant) -> TraceBounds {
        TraceBounds {
            deadline,
            max_bytes: self.ctx.config.max_response_bytes as usize,
        }
    }

    /// A trace's failure as clients see it.
    pub(crate) fn trace_error(&self, error: TraceError) -> RpcError {
        match error {
            TraceError::TimedOut => self.timed_out(),
            TraceError::InvalidConfig | TraceError::Unsupported(_) => {
                RpcError::InvalidParams(error.to_string())
            }
            TraceError::TooLarge { .. } => RpcError::LimitExceeded(error.to_string()),
            other => RpcError::internal(other),
        }
    }

    /// The included transaction `hash` traced with `tracer` on the state the block's
    /// transactions before it left.
    pub(crate) fn trace_included(
        &self,
        hash: B256,
        tracer: &Tracer,
        deadline: std::time::Instant,
    ) -> Outcome<TxTrace> {
        let (number, index) = self.included(hash)?;
        let traced = self.trace_stored(number, |_| index..index + 1, tracer, deadline)?;
        traced
            .and_then(|(_, mut traces)| traces.pop())
            .ok_or_else(|| RpcError::InvalidParams(format!("transaction {hash} not found")))
    }

    /// The block number and position of an included transaction.
    pub(crate) fn included(&self, hash: B256) -> Outcome<(u64, usize)> {
        self.tx_location(hash)?
            .ok_or_else(|| RpcError::InvalidParams(format!("transaction {hash} not found")))
    }

    /// `tracer`'s traces of stored block `block`'s transactions at `traced`.
    async fn traces_of(
        &self,
        block: BlockId,
        traced: fn(usize) -> Range<usize>,
        tracer: Tracer,
    ) -> Outcome<Option<(StoredBlock, Vec<TxTrace>)>> {
        let number = self.number_of(Some(block))?;
        self.evm(move |rpc, deadline| rpc.trace_stored(number, traced, &tracer, deadline))
            .await
    }
}

/// Every transaction of a block of `count`.
fn all(count: usize) -> Range<usize> {
    0..count
}

/// The call frames in `traces` (made by [`Tracer::Calls`]).
fn call_frames(traces: Vec<TxTrace>) -> Vec<LocalizedTransactionTrace> {
    traces
        .into_iter()
        .flat_map(|trace| match trace {
            TxTrace::Calls(frames) => frames,
            _ => Vec::new(),
        })
        .collect()
}

/// The replay in `trace` (made by [`Tracer::Replay`]).
fn replayed(trace: TxTrace) -> Outcome<TraceResults> {
    match trace {
        TxTrace::Replay(results) => Ok(*results),
        _ => Err(RpcError::Internal("a replay made another trace".into())),
    }
}

#[async_trait]
impl TraceApiServer for Rpc {
    async fn transaction(&self, hash: B256) -> RpcResult<Option<Vec<LocalizedTransactionTrace>>> {
        let Some((number, index)) = self.tx_location(hash)? else {
            return Ok(None);
        };
        let traced = self
            .evm(move |rpc, deadline| {
                rpc.trace_stored(number, |_| index..index + 1, &Tracer::Calls, deadline)
            })
            .await?;
        Ok(traced.map(|(_, traces)| call_frames(traces)))
    }

    async fn block(&self, block: BlockId) -> RpcResult<Option<Vec<LocalizedTransactionTrace>>> {
        let traced = self.traces_of(block, all, Tracer::Calls).await?;
        Ok(traced.map(|(_, traces)| call_frames(traces)))
    }

    async fn replay_block_transactions(
        &self,
        block: BlockId,
        types: HashSet<TraceType>,
    ) -> RpcResult<Option<Vec<TraceResultsWithTransactionHash>>> {
        let Some((block, traces)) = self.traces_of(block, all, Tracer::Replay(types)).await? else {
            return Ok(None);
        };
        let results = block
            .txs
            .iter()
            .zip(traces)
            .map(|((tx, _), trace)| {
                Ok(TraceResultsWithTransactionHash {
                    full_trace: replayed(trace)?,
                    transaction_hash: tx.hash(),
                })
            })
            .collect::<Outcome<_>>()?;
        Ok(Some(results))
    }

    async fn replay_transaction(
        &self,
        hash: B256,
        types: HashSet<TraceType>,
    ) -> RpcResult<TraceResults> {
        let tracer = Tracer::Replay(types);
        Ok(self
            .evm(move |rpc, deadline| replayed(rpc.trace_included(hash, &tracer, deadline)?))
            .await?)
    }

    async fn call(
        &self,
        request: TransactionRequest,
        types: HashSet<TraceType>,
        block: Option<BlockId>,
    ) -> RpcResult<TraceResults> {
        let number = self.number_of(block)?;
        let tracer = Tracer::Replay(types);
        Ok(self
            .evm(move |rpc, deadline| {
                let overrides = CallOverrides::default();
                replayed(rpc.trace_request(&request, number, &overrides, &tracer, deadline)?)
            })
            .await?)
    }

    async fn filter(&self, filter: TraceFilter) -> RpcResult<Vec<LocalizedTransactionTrace>> {
        let head = self.head()?;
        let from = filter.from_block.unwrap_or(head);
        let to = filter.to_block.unwrap_or(head).min(head);
        if from > to {
            return Err(
                RpcError::InvalidParams(format!("fromBlock {from} is after toBlock {to}")).into(),
            );
        }
        let max = self.ctx.config.max_log_blocks;
        if to - from >= max {
            return Err(RpcError::LimitExceeded(format!(
                "trace_filter over {} blocks, more than the limit of {max}: ask for fewer",
                to - from + 1
            ))
            .into());
        }
        Ok(self
            .evm(move |rpc, deadline| {
                let matcher = filter.matcher();
                let mut frames = Vec::new();
                for number in from..=to {
                    if let Some((_, traces)) =
                        rpc.trace_stored(number, all, &Tracer::Calls, deadline)?
                    {
                        frames.extend(
                            call_frames(traces)
                                .into_iter()
                                .filter(|frame| matcher.matches(&frame.trace)),
                        );
                    }
                }
                let after = filter.after.unwrap_or(0) as usize;
                let count = filter.count.map_or(usize::MAX, |count| count as usize);
                Ok(frames.into_iter().skip(after).take(count).collect())
            })
            .await?)
    }
}

/// A block tag's number, for the `debug_traceBlockByNumber` parameter.
pub(crate) fn tag(number: BlockNumberOrTag) -> BlockId {
    BlockId::Number(number)
}
