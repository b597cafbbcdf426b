//! The execute stage: revm runs a block's recovered transactions against the state
//! before the block and returns receipts and the block's state diff for the commit stage.
//!
//! [`execute_serial`] runs transactions one after another and is the reference every
//! other executor must equal byte for byte. [`ParallelExecutor`] runs one chunk of the block
//! per core and commits the chunks in block order, re-executing what read stale state, so
//! it always does. State is read through [`StateReader`] and
//! written as a [`StateDiff`]; each transaction's priority fee is credited to the block's
//! proposer as it ends, as on Ethereum (see the `evm` module).
//!
//! The chain runs Prague rules ([`stave_primitives::SPEC`]); [`BlockEnv`] may name
//! another fork (the Ethereum state tests run Cancun). The chain id comes from the
//! genesis, the base fee and gas limit from the header.

mod call;
mod db;
mod env;
mod error;
mod evm;
mod overrides;
mod parallel;
mod serial;
mod simulate;
mod trace;

pub use alloy_rpc_types_eth::state::{AccountOverride, StateOverride};
pub use call::{CallOutcome, CallRequest, call, call_until};
pub use env::{BlockEnv, BlockInput, Mode};
pub use error::ExecError;
pub use overrides::{Overridden, OverrideError, override_block};
pub use parallel::ParallelExecutor;
pub use serial::{ExecutionOutcome, SkippedTx, execute_serial};
pub use simulate::{
    InvalidCall, SimBounds, SimCall, SimCallOutcome, SimFee, SimulatedBlock, SimulationError,
    TIME_STEP, TRANSFER_LOG_EMITTER, TRANSFER_TOPIC, simulate,
};
pub use stave_primitives::{
    AccountDiff, AccountState, MemoryState, StateDiff, StateError, StateReader,
};
pub use trace::{
    TraceBounds, TraceError, TracedBlock, Tracer, TxTrace, create_access_list, trace_block,
    trace_call,
};
