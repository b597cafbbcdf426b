//! Transactions run again under revm-inspectors' tracers, for `debug_trace*` (geth's struct
//! logger, `callTracer`, `prestateTracer`, `4byteTracer`, `noopTracer` and the rest
//! [`DebugInspector`] knows) and Parity's `trace_*`.
//!
//! A block's transactions run on its parent's state as the block ran them (the serial
//! executor's rules: each on the state the ones before it left, fees to the proposer);
//! those before the first one traced run untraced. A call runs as [`call_until`] runs it.
//! Both stop at a deadline as `eth_call` does: the tracers record every step, so time, not
//! only gas, is what a request must be bounded by. `eth_createAccessList` runs a call
//! under revm-inspectors' access-list inspector the same way.
//!
//! [`call_until`]: crate::call_until

use std::{ops::Range, sync::atomic::AtomicU64, time::Instant};

use alloy_primitives::{B256, map::HashSet};
use alloy_rpc_types_eth::TransactionInfo;
use alloy_rpc_types_trace::{
    geth::{GethDebugTracingOptions, GethTrace},
    parity::{LocalizedTransactionTrace, TraceResults, TraceType},
};
use parking_lot::RwLock;
use revm::{
    ExecuteEvm, InspectEvm, Inspector,
    context::{BlockEnv as RevmBlockEnv, TxEnv, result::ResultAndState},
    context_interface::result::EVMError,
    context_interface::transaction::AccessList,
    handler::MainnetContext,
};
use revm_inspectors::access_list::AccessListInspector;
use revm_inspectors::tracing::{
    DebugInspector, DebugInspectorError, TraceLimitBehavior, TraceLimits, TracingInspector,
    TracingInspectorConfig, TransactionContext,
};
use stave_primitives::{RecoveredTx, StateReader};

use crate::{
    call::{CallOutcome, CallRequest, DeadlineScope, call_evm, guard},
    db::{BlockDb, Changes, Overlay, OverlayRef, Reusable as _, WriteLog},
    env::BlockEnv,
    error::ExecError,
    evm::{BlockEvm, block_evm, tx_env},
};

/// What to trace transactions with.
#[derive(Debug, Clone)]
pub enum Tracer {
    /// geth's `debug_trace*` options: the tracer by name and its config.
    Geth(Box<GethDebugTracingOptions>),
    /// Parity's `trace_transaction` and `trace_block`: each call frame, located in its
    /// block.
    Calls,
    /// Parity's `trace_replay*` and `trace_call`: the trace types asked for.
    Replay(HashSet<TraceType>),
}

/// One transaction's trace, as its [`Tracer`] makes it.
#[derive(Debug, Clone)]
pub enum TxTrace {
    /// From [`Tracer::Geth`].
    Geth(Box<GethTrace>),
    /// From [`Tracer::Calls`].
    Calls(Vec<LocalizedTransactionTrace>),
    /// From [`Tracer::Replay`].
    Replay(Box<TraceResults>),
}

/// A committed block to trace: the state before it, its environment, its transactions
/// and its hash.
#[derive(Clone, Copy)]
pub struct TracedBlock<'a> {
    /// The state after its parent.
    pub base: &'a dyn StateReader,
    /// Its environment (its header).
    pub env: BlockEnv<'a>,
    /// Its transactions, in order.
    pub txs: &'a [RecoveredTx],
    /// Its hash.
    pub hash: B256,
}

/// What bounds a trace: when it stops, and how many bytes (call inputs, memory and
/// return data snapshots) the tracer may record for one transaction.
#[derive(Debug, Clone, Copy)]
pub struct TraceBounds {
    /// When the run stops ([`TraceError::TimedOut`]).
    pub deadline: Instant,
    /// The byte budget of one transaction's trace ([`TraceError::TooLarge`] beyond it).
    pub max_bytes: usize,
}

/// Why a trace could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The tracer's config does not fit the tracer.
    #[error("invalid tracer config")]
    InvalidConfig,
    /// A tracer this node does not run (JavaScript tracers).
    #[error("unsupported tracer: {0}")]
    Unsupported(String),
    /// The deadline passed first.
    #[error("execution aborted (timeout)")]
    TimedOut,
    /// A transaction's trace would record more than the byte budget.
    #[error("the trace of transaction {index} is larger than {max_bytes} bytes")]
    TooLarge {
        /// Its position in the block (0 for a call).
        index: usize,
        /// The budget.
        max_bytes: usize,
    },
    /// A transaction of the block, or the call, could not start.
    #[error("transaction {index} could not run: {reason}")]
    Invalid {
        /// Its position in the block (0 for a call).
        index: usize,
        /// revm's reason.
        reason: String,
    },
    /// An access list still changed after this many runs.
    #[error("the access list did not settle in {0} runs")]
    Unsettled(usize),
    /// The state could not be read.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl<E: Into<ExecError> + std::error::Error> From<DebugInspectorError<E>> for TraceError {
    fn from(error: DebugInspectorError<E>) -> Self {
        match error {
            DebugInspectorError::InvalidTracerConfig => Self::InvalidConfig,
            DebugInspectorError::Database(error) => Self::Exec(error.into()),
            other => Self::Unsupported(other.to_string()),
        }
    }
}

/// Traces the transactions of `block` at `traced` (those before it run untraced) with
/// `tracer`, stopping at `deadline`; one trace per traced transaction.
pub fn trace_block(
    block: TracedBlock<'_>,
    traced: Range<usize>,
    tracer: &Tracer,
    bounds: TraceBounds,
) -> Result<Vec<TxTrace>, TraceError> {
    let diff = RwLock::new(Changes::default());
    let hits = AtomicU64::new(0);
    let overlay = Overlay::new(block.base, &diff, &hits);
    let evm = block_evm(BlockDb::new(overlay), block.env);
    let runs = block.txs[..traced.end.min(block.txs.len())]
        .iter()
        .enumerate()
        .map(|(index, tx)| Run {
            env: tx_env(tx),
            index,
            traced: index >= traced.start,
            hash: Some(tx.tx.hash()),
        });
    with_tracer(tracer, evm, Some(block.hash), runs, bounds)
}

/// Most runs [`create_access_list`] makes: each warms what the one before touched, which
/// may take the call down another path that touches more.
const ACCESS_LIST_ROUNDS: usize = 8;

/// The addresses and storage slots `request` touches besides its sender, its callee and
/// the precompiles (EIP-2930), and what the call does with them warmed, as
/// `eth_createAccessList` answers: run again with the list found until it stops changing.
pub fn create_access_list(
    base: &dyn StateReader,
    env: BlockEnv<'_>,
    request: &CallRequest,
    deadline: Instant,
) -> Result<(AccessList, CallOutcome), TraceError> {
    let mut request = request.clone();
    let bounds = TraceBounds {
        deadline,
        max_bytes: usize::MAX,
    };
    for _ in 0..ACCESS_LIST_ROUNDS {
        let diff = RwLock::new(Changes::default());
        let hits = AtomicU64::new(0);
        let (evm, tx) = call_evm(Overlay::new(base, &diff, &hits), env, &request, false);
        let inspector = AccessListInspector::new(request.access_list.clone());
        let run = Run {
            env: tx,
            index: 0,
            traced: true,
            hash: None,
        };
        let found = run_traced(
            evm,
            inspector,
            None,
            [run],
            bounds,
            |inspector, _, res, _| {
                Ok((inspector.access_list(), CallOutcome::of(res.result.clone())))
            },
        )?;
        let Some((list, outcome)) = found.into_iter().next() else {
            break;
        };
        if list == request.access_list {
            return Ok((list, outcome));
        }
        request.access_list = list;
    }
    Err(TraceError::Unsettled(ACCESS_LIST_ROUNDS))
}

/// Traces `request` run as a call on `base` in `env` with `tracer`, stopping at
/// `deadline`.
pub fn trace_call(
    base: &dyn StateReader,
    env: BlockEnv<'_>,
    request: &CallRequest,
    tracer: &Tracer,
    bounds: TraceBounds,
) -> Result<TxTrace, TraceError> {
    let diff = RwLock::new(Changes::default());
    let hits = AtomicU64::new(0);
    let (evm, tx) = call_evm(Overlay::new(base, &diff, &hits), env, request, false);
    let run = Run {
        env: tx,
        index: 0,
        traced: true,
        hash: None,
    };
    let mut traces = with_tracer(tracer, evm, None, [run], bounds)?;
    traces.pop().ok_or(TraceError::TimedOut)
}

/// A transaction to run: revm's form of it, its place in the block, whether it is
/// traced, and its hash (none for a call).
struct Run {
    env: TxEnv,
    index: usize,
    traced: bool,
    hash: Option<B256>,
}

/// Where a traced transaction ran: the block's hash (none for a call) and number.
struct Place<'r> {
    block_hash: Option<B256>,
    run: &'r Run,
    block: &'r RevmBlockEnv,
}

/// Runs `runs` on `evm` under the inspector `tracer` names.
fn with_tracer<'a>(
    tracer: &Tracer,
    evm: BlockEvm<BlockDb<'a>>,
    block_hash: Option<B256>,
    runs: impl IntoIterator<Item = Run>,
    bounds: TraceBounds,
) -> Result<Vec<TxTrace>, TraceError> {
    match tracer {
        Tracer::Geth(options) => {
            let inspector = DebugInspector::new(options.as_ref().clone())?;
            run_traced(
                evm,
                inspector,
                block_hash,
                runs,
                bounds,
                |tracer, place, res, pre| {
                    let context = TransactionContext {
                        block_hash: place.block_hash,
                        tx_index: place.block_hash.map(|_| place.run.index),
                        tx_hash: place.run.hash,
                    };
                    let trace =
                        tracer.get_result(Some(context), &place.run.env, place.block, res, pre)?;
                    tracer.fuse()?;
                    Ok(TxTrace::Geth(Box::new(trace)))
                },
            )
        }
        Tracer::Calls => {
            let inspector = TracingInspector::new(TracingInspectorConfig::default_parity());
            run_traced(
                evm,
                inspector,
                block_hash,
                runs,
                bounds,
                |tracer, place, _, _| {
                    let info = TransactionInfo {
                        hash: place.run.hash,
                        index: place.block_hash.map(|_| place.run.index as u64),
                        block_hash: place.block_hash,
                        block_number: Some(place.block.number.saturating_to()),
                        base_fee: Some(place.block.basefee),
                        block_timestamp: Some(place.block.timestamp.saturating_to()),
                    };
                    Ok(TxTrace::Calls(
                        take(tracer).into_localized_transaction_traces(info),
                    ))
                },
            )
        }
        Tracer::Replay(types) => {
            let config = TracingInspectorConfig::from_parity_config(types);
            run_traced(
                evm,
                TracingInspector::new(config),
                block_hash,
                runs,
                bounds,
                |tracer, _, res, pre| {
                    let results = take(tracer)
                        .into_trace_results_with_state(res, types, &*pre)
                        .map_err(ExecError::from)?;
                    Ok(TxTrace::Replay(Box::new(results)))
                },
            )
        }
    }
}

/// The parity builder of what `tracer` recorded, leaving it fresh (with the same
/// limits) for the next transaction.
fn take(tracer: &mut TracingInspector) -> revm_inspectors::tracing::ParityTraceBuilder {
    let recorded = tracer.clone();
    tracer.fuse();
    recorded.into_parity_builder()
}

/// An inspector whose recording a byte budget bounds.
trait Budgeted {
    /// It, recording at most `bytes` bytes per transaction (halting the run past them).
    fn budgeted(self, bytes: usize) -> Self;
    /// True if the last run went past the budget.
    fn over_budget(&self) -> bool;
}

impl Budgeted for TracingInspector {
    fn budgeted(self, bytes: usize) -> Self {
        let limits = TraceLimits::default()
            .set_max_recorded_bytes(Some(bytes))
            .set_behavior(TraceLimitBehavior::Halt);
        self.with_limits(limits)
    }

    fn over_budget(&self) -> bool {
        self.limit_exceeded()
    }
}

impl Budgeted for AccessListInspector {
    fn budgeted(self, _bytes: usize) -> Self {
        // It keeps addresses and slots, as many as the gas can touch.
        self
    }

    fn over_budget(&self) -> bool {
        false
    }
}

impl Budgeted for DebugInspector {
    fn budgeted(self, bytes: usize) -> Self {
        match self {
            Self::CallTracer(inner, config) => Self::CallTracer(inner.budgeted(bytes), config),
            Self::PreStateTracer(inner, config) => {
                Self::PreStateTracer(inner.budgeted(bytes), config)
            }
            Self::FlatCallTracer(inner) => Self::FlatCallTracer(inner.budgeted(bytes)),
            Self::Erc7562Tracer(inner, config) => {
                Self::Erc7562Tracer(inner.budgeted(bytes), config)
            }
            Self::Default(inner, config) => Self::Default(inner.budgeted(bytes), config),
            // The others record no byte buffers (the 4-byte tracer keeps a count per
            // selector; mux tracers are bounded by the deadline alone).
            other => other,
        }
    }

    fn over_budget(&self) -> bool {
        match self {
            Self::CallTracer(inner, _)
            | Self::PreStateTracer(inner, _)
            | Self::FlatCallTracer(inner)
            | Self::Erc7562Tracer(inner, _)
            | Self::Default(inner, _) => inner.over_budget(),
            _ => false,
        }
    }
}

/// Runs `runs` in order on `evm` with `inspector` watching the traced ones, each on the
/// state the ones before it left; `result` makes each traced one's trace from what the
/// inspector recorded, its outcome and the state before it.
fn run_traced<'a, I, R>(
    evm: BlockEvm<BlockDb<'a>>,
    inspector: I,
    block_hash: Option<B256>,
    runs: impl IntoIterator<Item = Run>,
    bounds: TraceBounds,
    mut result: impl FnMut(
        &mut I,
        Place<'_>,
        &ResultAndState,
        &mut OverlayRef<'a>,
    ) -> Result<R, TraceError>,
) -> Result<Vec<R>, TraceError>
where
    I: Inspector<MainnetContext<BlockDb<'a>>> + Budgeted,
{
    let mut evm = evm.with_inspector(inspector.budgeted(bounds.max_bytes));
    guard(&mut evm.instruction);
    let scope = DeadlineScope::enter(Some(bounds.deadline));
    let mut writes = WriteLog::default();
    let mut traces = Vec::new();
    for run in runs {
        let outcome = match run.traced {
            true => evm.inspect_tx(run.env.clone()),
            false => evm.transact(run.env.clone()),
        };
        if scope.timed_out() {
            return Err(TraceError::TimedOut);
        }
        if run.traced && evm.inspector.over_budget() {
            return Err(TraceError::TooLarge {
                index: run.index,
                max_bytes: bounds.max_bytes,
            });
        }
        let res = match outcome {
            Ok(res) => res,
            Err(EVMError::Database(error)) => return Err(ExecError::from(error).into()),
            Err(other) => {
                return Err(TraceError::Invalid {
                    index: run.index,
                    reason: other.to_string(),
                });
            }
        };
        let overlay = evm.ctx.journaled_state.database.overlay;
        if run.traced {
            let place = Place {
                block_hash,
                run: &run,
                block: &evm.ctx.block,
            };
            traces.push(result(
                &mut evm.inspector,
                place,
                &res,
                &mut OverlayRef(overlay),
            )?);
        }
        writes.clear();
        let range = writes.append(res.state);
        overlay.apply(&writes, range);
    }
    Ok(traces)
}
