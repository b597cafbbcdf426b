//! Message calls that change nothing: `eth_call` and `eth_estimateGas`.
//!
//! A call runs like a transaction from `from` on top of a block's state, without a
//! signature or nonce check and at a gas price of zero unless one is given; its state
//! changes are thrown away.
//!
//! [`call_until`] also stops the EVM at a deadline, as node operators expect of
//! `eth_call`: the gas cap alone does not bound time (a loop of cheap opcodes, or calls
//! into slow precompiles). Jumps, calls and creations, the only ways code runs long,
//! check the clock every [`CLOCK_EVERY`] executions, on the calling thread; block
//! execution uses revm's own instructions and pays nothing for this.

use std::{cell::Cell, sync::atomic::AtomicU64, time::Instant};

use alloy_primitives::{Address, Bytes, TxKind, U256};
use parking_lot::RwLock;
use revm::{
    ExecuteEvm,
    bytecode::opcode,
    context::{
        TxEnv,
        result::{ExecutionResult, HaltReason},
    },
    context_interface::result::EVMError,
    context_interface::transaction::AccessList,
    handler::instructions::EthInstructions,
    interpreter::{
        Host, Instruction, InstructionContext, InstructionExecResult, InstructionResult,
        InterpreterTypes, instruction_table,
    },
};
use stave_primitives::{Header, StateReader};

use crate::{
    db::{BlockDb, Changes, Overlay},
    env::BlockEnv,
    error::ExecError,
    evm::{BlockEvm, block_evm},
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
    /// Addresses and slots warmed before it runs (EIP-2930).
    pub access_list: AccessList,
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
            access_list: envelope.access_list().cloned().unwrap_or_default(),
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
    /// It was stopped at its deadline ([`call_until`]).
    TimedOut,
}

/// Guarded executions between two reads of the clock.
pub const CLOCK_EVERY: u32 = 1024;

thread_local! {
    /// The deadline of the call running on this thread, if any.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Guarded executions left before the next clock read.
    static UNTIL_CLOCK: Cell<u32> = const { Cell::new(0) };
    /// Set once the deadline passed, so every frame of the call stops at its next jump.
    static TIMED_OUT: Cell<bool> = const { Cell::new(false) };
}

/// True once this thread's call is past its deadline.
fn past_deadline() -> bool {
    if TIMED_OUT.get() {
        return true;
    }
    let Some(deadline) = DEADLINE.get() else {
        return false;
    };
    let left = UNTIL_CLOCK.get();
    if left > 0 {
        UNTIL_CLOCK.set(left - 1);
        return false;
    }
    UNTIL_CLOCK.set(CLOCK_EVERY);
    let late = Instant::now() >= deadline;
    TIMED_OUT.set(late);
    late
}

/// Opcode `OP` of revm's table, run only while the call is within its deadline; past it,
/// the frame halts (and its parents halt at their next guarded opcode).
fn guarded<W: InterpreterTypes, H: Host, const OP: u8>(
    context: InstructionContext<'_, H, W>,
) -> InstructionExecResult {
    if past_deadline() {
        return Err(InstructionResult::OutOfGas);
    }
    instruction_table::<W, H>()[OP as usize].execute(context)
}

/// The opcodes through which code can run for long, each with its guarded version.
fn guards<W: InterpreterTypes, H: Host>() -> [(u8, Instruction<W, H>); 8] {
    [
        (
            opcode::JUMP,
            Instruction::new(guarded::<W, H, { opcode::JUMP }>),
        ),
        (
            opcode::JUMPI,
            Instruction::new(guarded::<W, H, { opcode::JUMPI }>),
        ),
        (
            opcode::CALL,
            Instruction::new(guarded::<W, H, { opcode::CALL }>),
        ),
        (
            opcode::CALLCODE,
            Instruction::new(guarded::<W, H, { opcode::CALLCODE }>),
        ),
        (
            opcode::DELEGATECALL,
            Instruction::new(guarded::<W, H, { opcode::DELEGATECALL }>),
        ),
        (
            opcode::STATICCALL,
            Instruction::new(guarded::<W, H, { opcode::STATICCALL }>),
        ),
        (
            opcode::CREATE,
            Instruction::new(guarded::<W, H, { opcode::CREATE }>),
        ),
        (
            opcode::CREATE2,
            Instruction::new(guarded::<W, H, { opcode::CREATE2 }>),
        ),
    ]
}

/// Sets this thread's deadline for one call and clears it afterwards, even on a panic.
pub(crate) struct DeadlineScope;

impl DeadlineScope {
    /// Starts the deadline `deadline` (none: the guards never stop anything).
    pub(crate) fn enter(deadline: Option<Instant>) -> Self {
        DEADLINE.set(deadline);
        UNTIL_CLOCK.set(0);
        TIMED_OUT.set(false);
        Self
    }

    /// True once the deadline passed (the run was stopped).
    pub(crate) fn timed_out(&self) -> bool {
        TIMED_OUT.get()
    }
}

impl Drop for DeadlineScope {
    fn drop(&mut self) {
        DEADLINE.set(None);
        TIMED_OUT.set(false);
    }
}

/// Runs `request` against `base` in the environment `env` (base fee ignored).
pub fn call(
    base: &dyn StateReader,
    env: BlockEnv<'_>,
    request: &CallRequest,
) -> Result<CallOutcome, ExecError> {
    run(base, env, request, None)
}

/// [`call`], stopped at `deadline` with [`CallOutcome::TimedOut`].
pub fn call_until(
    base: &dyn StateReader,
    env: BlockEnv<'_>,
    request: &CallRequest,
    deadline: Instant,
) -> Result<CallOutcome, ExecError> {
    run(base, env, request, Some(deadline))
}

/// The EVM a call runs in over `overlay` (the block's base fee ignored, its gas limit
/// raised to the call's, no nonce check), its long-running opcodes guarded by this
/// thread's deadline when `guarded`, and the call as revm's transaction.
pub(crate) fn call_evm<'a>(
    overlay: Overlay<'a>,
    env: BlockEnv<'_>,
    request: &CallRequest,
    guarded: bool,
) -> (BlockEvm<BlockDb<'a>>, TxEnv) {
    let header = env.header;
    let call_header = Header {
        base_fee_per_gas: 0,
        gas_limit: header.gas_limit.max(request.gas),
        ..header.clone()
    };
    let mut evm = block_evm(
        BlockDb::new(overlay),
        BlockEnv {
            header: &call_header,
            ..env
        },
    );
    evm.ctx.cfg.disable_nonce_check = true;
    if guarded {
        guard(&mut evm.instruction);
    }
    (evm, request.tx_env(env.chain_id))
}

impl CallRequest {
    /// The call as revm's transaction on chain `chain_id`: a legacy transaction, or an
    /// EIP-2930 one when it carries an access list (the gas price reads the same).
    pub(crate) fn tx_env(&self, chain_id: u64) -> TxEnv {
        TxEnv {
            tx_type: u8::from(!self.access_list.is_empty()),
            access_list: self.access_list.clone(),
            caller: self.from,
            gas_limit: self.gas,
            gas_price: self.gas_price,
            kind: self.to.map_or(TxKind::Create, TxKind::Call),
            value: self.value,
            data: self.input.clone(),
            chain_id: Some(chain_id),
            ..Default::default()
        }
    }
}

/// Replaces the long-running opcodes of `instructions` with their deadline-guarded
/// versions (see [`DeadlineScope`]).
pub(crate) fn guard<W: InterpreterTypes, H: Host>(instructions: &mut EthInstructions<W, H>) {
    for (op, instruction) in guards() {
        let gas = instructions.gas_table()[op as usize];
        instructions.insert_instruction(op, instruction, gas);
    }
}

fn run(
    base: &dyn StateReader,
    env: BlockEnv<'_>,
    request: &CallRequest,
    deadline: Option<Instant>,
) -> Result<CallOutcome, ExecError> {
    let diff = RwLock::new(Changes::default());
    let hits = AtomicU64::new(0);
    let overlay = Overlay::new(base, &diff, &hits);
    let (mut evm, tx) = call_evm(overlay, env, request, deadline.is_some());
    let scope = DeadlineScope::enter(deadline);
    let outcome = evm.transact_one(tx);
    // Nothing a call does is kept.
    let _discarded = evm.finalize();
    let timed_out = scope.timed_out();
    drop(scope);
    if timed_out {
        return Ok(CallOutcome::TimedOut);
    }
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
    Ok(CallOutcome::of(result))
}

impl CallOutcome {
    /// What revm's `result` says the call did.
    pub(crate) fn of(result: ExecutionResult) -> Self {
        let gas_used = result.tx_gas_used();
        match result {
            ExecutionResult::Success { output, .. } => Self::Success {
                output: output.into_data(),
                gas_used,
            },
            ExecutionResult::Revert { output, .. } => Self::Revert { output, gas_used },
            ExecutionResult::Halt { reason, .. } => Self::Halt {
                reason: halt_message(&reason),
                gas_used,
            },
        }
    }
}

/// What go-ethereum says when execution stops for `reason` (its `core/vm` errors), the
/// words clients and `eth_simulateV1` results show.
pub(crate) fn halt_message(reason: &HaltReason) -> String {
    match reason {
        HaltReason::OutOfGas(_) => "out of gas",
        HaltReason::OpcodeNotFound | HaltReason::NotActivated => "invalid opcode",
        HaltReason::InvalidFEOpcode => "invalid opcode: INVALID",
        HaltReason::InvalidJump => "invalid jump destination",
        HaltReason::StackUnderflow => "stack underflow",
        HaltReason::StackOverflow => "stack limit reached 1024",
        HaltReason::OutOfOffset => "return data out of bounds",
        HaltReason::CreateCollision => "contract address collision",
        HaltReason::PrecompileError => "precompiled failed",
        HaltReason::PrecompileErrorWithContext(message) => return message.clone(),
        HaltReason::NonceOverflow => "nonce uint64 overflow",
        HaltReason::CreateContractSizeLimit => "max code size exceeded",
        HaltReason::CreateContractStartingWithEF => "invalid code: must not begin with 0xef",
        HaltReason::CreateInitCodeSizeLimit => "max initcode size exceeded",
        HaltReason::OverflowPayment => "gas uint64 overflow",
        HaltReason::StateChangeDuringStaticCall | HaltReason::CallNotAllowedInsideStatic => {
            "write protection"
        }
        HaltReason::OutOfFunds => "insufficient balance for transfer",
        HaltReason::CallTooDeep => "max call depth exceeded",
    }
    .to_owned()
}
