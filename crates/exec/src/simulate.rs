//! `eth_simulateV1`: calls run as the transactions of blocks that build on a block's state
//! and on each other, as go-ethereum's `internal/ethapi/simulate.go` runs them.
//!
//! Each simulated block may pretend (block overrides: number, time, gas limit, proposer,
//! base fee, randomness; state overrides laid over the state the block starts from) and
//! holds calls, each run on the state the calls and blocks before it left. Block numbers
//! strictly increase (one more than the parent's unless overridden; a gap is filled with
//! empty blocks, counted against the block limit) and so do timestamps (the parent's plus
//! [`TIME_STEP`] unless overridden). Without `validation` a call is not held to its nonce
//! and, if it names no fee, runs at a gas price and base fee of zero (the block's base fee
//! is zero unless overridden); with it, nonces are checked and the base fee (the parent's,
//! this chain's rule) applies. A sender's balance must always cover the value and gas it
//! offers to pay, and a sender with code may call (go-ethereum skips EIP-3607 here).
//!
//! Every block comes back whole: its header (state root, receipts root and transactions
//! root as this chain computes them, over the calls as unsigned transactions), its hash,
//! its receipts, and each call's outcome and logs. With `traceTransfers`, every ETH
//! transfer (a call's value, a creation's endowment, a self-destruct's balance) shows
//! among the call's logs as an ERC-20 `Transfer` from [`TRANSFER_LOG_EMITTER`], where it
//! happened, and is dropped with the frame when that reverts, as go-ethereum reports them.
//!
//! The whole simulation runs under one deadline (the long-running opcodes guarded as in
//! [`call_until`](crate::call_until)) and one gas budget, the RPC gas cap: a call's gas is
//! cut to what is left of it.

use std::{collections::BTreeMap, marker::PhantomData, sync::atomic::AtomicU64, time::Instant};

use alloy_consensus::Signed;
use alloy_primitives::{
    Address, B256, Bytes, Log, LogData, Signature, TxKind, U256, address, b256, logs_bloom,
};
use alloy_rpc_types_eth::{
    BlockOverrides,
    simulate::{SimBlock, SimulatePayload},
};
use parking_lot::RwLock;
use revm::{
    ExecuteEvm, Inspector,
    context::TxEnv,
    context_interface::{
        Cfg, ContextSetters, ContextTr, JournalTr, Transaction,
        journaled_state::account::JournaledAccountTr,
        result::{EVMError, HaltReason, InvalidTransaction},
        transaction::AccessList,
    },
    handler::{
        EthFrame, EvmTr, Handler,
        pre_execution::{calculate_caller_fee, validate_account_nonce_and_code},
    },
    inspector::{InspectorEvmTr, InspectorHandler},
    interpreter::{
        CallInputs, CallOutcome as FrameCallOutcome, CallScheme, CreateInputs, CreateOutcome,
        InitialAndFloorGas, interpreter::EthInterpreter,
    },
    state::EvmState,
};
use stave_primitives::{
    GasFee, Header, Receipt, SerialLeaves, SignedTx, StateDiff, StateError, StateReader, TxFields,
    merkle_root, receipts_root, state_root,
};

use crate::{
    call::{CallOutcome, CallRequest, DeadlineScope, guard},
    db::{AccountChange, BlockDb, Changes, Overlay, Reusable as _, WriteLog},
    env::BlockEnv,
    error::ExecError,
    evm::block_evm,
    overrides::{Overridden, OverrideError, override_block},
};

/// Seconds a simulated block's timestamp is past its parent's unless overridden
/// (go-ethereum's default).
pub const TIME_STEP: u64 = 12;

/// Where `traceTransfers` logs come from (ERC-7528's address for ETH).
pub const TRANSFER_LOG_EMITTER: Address = address!("eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");

/// The topic of `Transfer(address,address,uint256)`, which transfer logs carry first.
pub const TRANSFER_TOPIC: B256 =
    b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// One call of a simulated block: a transaction without a signature. What it leaves out
/// is filled in as go-ethereum does: the gas the block has left (cut to the simulation's
/// gas budget), the sender's nonce in the simulation, no fee.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimCall {
    /// The sender (the zero address when the request names none).
    pub from: Address,
    /// The callee; `None` runs `input` as initcode.
    pub to: Option<Address>,
    /// Gas it may use; `None`: what the block has left.
    pub gas: Option<u64>,
    /// What it offers to pay for gas.
    pub fee: SimFee,
    /// Its nonce; `None`: the sender's current one.
    pub nonce: Option<u64>,
    /// Wei sent with it.
    pub value: U256,
    /// Calldata, or initcode when `to` is `None`.
    pub input: Bytes,
    /// Addresses and slots warmed before it runs (EIP-2930).
    pub access_list: AccessList,
}

/// What a simulated call offers to pay for gas, as the request names it. One that offers
/// nothing runs, without validation, at a base fee of zero (go-ethereum's `NoBaseFee`),
/// whatever the block's.
pub type SimFee = GasFee;

impl SimCall {
    /// The call with its `gas` and `nonce` settled, as revm's transaction on `chain_id`.
    fn tx_env(&self, chain_id: u64, gas: u64, nonce: u64) -> TxEnv {
        let mut tx = CallRequest {
            from: self.from,
            to: self.to,
            gas,
            gas_price: self.fee.max_fee(),
            value: self.value,
            input: self.input.clone(),
            access_list: self.access_list.clone(),
        }
        .tx_env(chain_id);
        tx.nonce = nonce;
        if let SimFee::Dynamic { priority_fee, .. } = self.fee {
            tx.tx_type = 2;
            tx.gas_priority_fee = Some(priority_fee);
        }
        tx
    }

    /// The call as the unsigned transaction its simulated block holds (all-zero
    /// signature, as go-ethereum's): what its hash, and the block's transactions root,
    /// are computed from.
    fn unsigned_tx(&self, chain_id: u64, gas: u64, nonce: u64) -> SignedTx {
        let tx = TxFields {
            chain_id,
            nonce,
            gas_limit: gas,
            to: self.to.map_or(TxKind::Create, TxKind::Call),
            value: self.value,
            input: self.input.clone(),
            access_list: self.access_list.clone(),
            fee: self.fee,
        }
        .typed();
        let signature = Signature::new(U256::ZERO, U256::ZERO, false);
        let hash = tx.tx_hash(&signature);
        SignedTx::from_envelope(Signed::new_unchecked(tx, signature, hash).into())
    }
}

/// What bounds a simulation: the size of the request, its gas and its time.
#[derive(Debug, Clone, Copy)]
pub struct SimBounds {
    /// Most blocks simulated, counted from the block it builds on (gap fillers included,
    /// as go-ethereum counts them).
    pub max_blocks: u64,
    /// Most calls in all blocks together.
    pub max_calls: usize,
    /// Most gas all calls together may use (the RPC gas cap): each call's gas is cut to
    /// what is left.
    pub gas_cap: u64,
    /// When the simulation stops ([`SimulationError::TimedOut`]).
    pub deadline: Instant,
}

/// A simulated block: its header and hash, the calls as its transactions (with their
/// senders), their receipts, and what each call did.
#[derive(Debug, Clone)]
pub struct SimulatedBlock {
    /// The header, with this chain's roots over the block's calls and state changes.
    pub header: Header,
    /// The header's hash.
    pub hash: B256,
    /// The calls as unsigned transactions, with their senders.
    pub txs: Vec<(SignedTx, Address)>,
    /// One receipt per call (its logs are the EVM's, without transfer logs).
    pub receipts: Vec<Receipt>,
    /// What each call did.
    pub calls: Vec<SimCallOutcome>,
}

/// What one simulated call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCallOutcome {
    /// Success, revert or halt (never `Invalid` or `TimedOut`: those fail the whole
    /// simulation). A halt's reason is go-ethereum's message, noting when the call's gas
    /// was cut to the budget.
    pub outcome: CallOutcome,
    /// Gas it consumed before refunds (its peak).
    pub max_used_gas: u64,
    /// Its logs, with transfer logs when traced; none when it failed.
    pub logs: Vec<Log>,
}

/// Why a call could not run at all (go-ethereum's transaction validation errors): each
/// fails the whole simulation with its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidCall {
    /// Its nonce is below the sender's (with validation).
    NonceTooLow,
    /// Its nonce is above the sender's (with validation).
    NonceTooHigh,
    /// Its fee cap is below the block's base fee.
    FeeCapTooLow,
    /// Its gas does not cover the intrinsic cost (or the EIP-7623 calldata floor).
    IntrinsicGas,
    /// The sender cannot pay the value and the gas it offers to buy.
    InsufficientFunds,
    /// Its initcode is larger than EIP-3860 allows.
    InitCodeTooLarge,
    /// Its fee fields contradict each other (tip above cap).
    FeeFields,
    /// Any other reason revm refuses it.
    Other,
}

/// Why a simulation was refused or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimulationError {
    /// No blocks to simulate.
    #[error("empty input")]
    Empty,
    /// More blocks than [`SimBounds::max_blocks`], given or reached by a number override.
    #[error("too many blocks")]
    TooManyBlocks,
    /// More calls than [`SimBounds::max_calls`].
    #[error("too many calls: {calls} > {max}")]
    TooManyCalls {
        /// Calls in the request.
        calls: usize,
        /// The limit.
        max: usize,
    },
    /// A block's number is not above the one before it.
    #[error("block numbers must be in order: {got} <= {parent}")]
    BlockNumber {
        /// The number asked for.
        got: U256,
        /// The number before it.
        parent: u64,
    },
    /// A block's timestamp is not above the one before it (or runs past `u64`).
    #[error("block timestamps must be in order: {got} <= {parent}")]
    BlockTimestamp {
        /// The timestamp asked for.
        got: u64,
        /// The timestamp before it.
        parent: u64,
    },
    /// A call asks for more gas than its block has left.
    #[error("block gas limit reached: remaining: {remaining}, required: {required}")]
    BlockGasLimit {
        /// Gas the block has left.
        remaining: u64,
        /// Gas the call asks for.
        required: u64,
    },
    /// A state or block override was refused.
    #[error(transparent)]
    Override(#[from] OverrideError),
    /// A call could not run (nonce, funds, fee, intrinsic gas); the message is
    /// go-ethereum's.
    #[error("{message}")]
    InvalidCall {
        /// Why, as a kind (the error code).
        kind: InvalidCall,
        /// What go-ethereum says.
        message: String,
    },
    /// The deadline passed first.
    #[error("execution aborted (timeout)")]
    TimedOut,
    /// The state could not be read, or revm failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl From<StateError> for SimulationError {
    fn from(error: StateError) -> Self {
        Self::Exec(error.into())
    }
}

/// Simulates `payload`'s blocks on `base`, the state after block `parent`, on chain
/// `chain_id`, within `bounds`: one [`SimulatedBlock`] per block, gap fillers included.
pub fn simulate(
    base: &dyn StateReader,
    parent: &Header,
    chain_id: u64,
    payload: &SimulatePayload<SimCall>,
    bounds: SimBounds,
) -> Result<Vec<SimulatedBlock>, SimulationError> {
    let blocks = &payload.block_state_calls;
    if blocks.is_empty() {
        return Err(SimulationError::Empty);
    }
    if blocks.len() as u64 > bounds.max_blocks {
        return Err(SimulationError::TooManyBlocks);
    }
    let calls = blocks.iter().map(|block| block.calls.len()).sum();
    if calls > bounds.max_calls {
        return Err(SimulationError::TooManyCalls {
            calls,
            max: bounds.max_calls,
        });
    }
    let planned = plan(parent, blocks, bounds.max_blocks)?;
    let scope = DeadlineScope::enter(Some(bounds.deadline));
    let mut simulation = Simulation {
        base,
        chain_id,
        rules: Rules {
            validation: payload.validation,
            trace_transfers: payload.trace_transfers,
            deadline: bounds.deadline,
        },
        budget: bounds.gas_cap,
        changes: StateDiff::default(),
        hashes: BTreeMap::new(),
    };
    let mut parent = (parent.clone(), parent.hash_slow());
    let mut simulated = Vec::with_capacity(planned.len());
    for block in planned {
        let next = simulation.block(&parent.0, parent.1, block, &scope)?;
        parent = (next.header.clone(), next.hash);
        simulated.push(next);
    }
    Ok(simulated)
}

/// A block to simulate: its number and timestamp, settled, and the request's block (none
/// for an empty block filling a gap).
struct Planned<'p> {
    number: u64,
    timestamp: u64,
    block: Option<&'p SimBlock<SimCall>>,
}

/// The chain the request asks for, after `parent`: numbers and timestamps checked and
/// defaulted, gaps in the numbers filled with empty blocks (go-ethereum's
/// `sanitizeChain`).
fn plan<'p>(
    parent: &Header,
    blocks: &'p [SimBlock<SimCall>],
    max_blocks: u64,
) -> Result<Vec<Planned<'p>>, SimulationError> {
    let mut planned = Vec::with_capacity(blocks.len());
    let (mut number, mut time) = (parent.number, parent.timestamp);
    let after = |time: u64| {
        time.checked_add(TIME_STEP)
            .ok_or(SimulationError::BlockTimestamp {
                got: time,
                parent: time,
            })
    };
    for block in blocks {
        let overrides = block.block_overrides.as_ref();
        let wanted = overrides
            .and_then(|overrides| overrides.number)
            .unwrap_or(U256::from(number) + U256::from(1));
        if wanted <= U256::from(number) {
            return Err(SimulationError::BlockNumber {
                got: wanted,
                parent: number,
            });
        }
        if wanted - U256::from(parent.number) > U256::from(max_blocks) {
            return Err(SimulationError::TooManyBlocks);
        }
        // Within `max_blocks` of a `u64` height.
        let wanted = u64::try_from(wanted).map_err(|_| SimulationError::TooManyBlocks)?;
        for filler in number + 1..wanted {
            time = after(time)?;
            planned.push(Planned {
                number: filler,
                timestamp: time,
                block: None,
            });
        }
        time = match overrides.and_then(|overrides| overrides.time) {
            Some(got) if got <= time => {
                return Err(SimulationError::BlockTimestamp { got, parent: time });
            }
            Some(got) => got,
            None => after(time)?,
        };
        number = wanted;
        planned.push(Planned {
            number,
            timestamp: time,
            block: Some(block),
        });
    }
    Ok(planned)
}

/// What holds for every call of a simulation.
#[derive(Debug, Clone, Copy)]
struct Rules {
    /// Nonces checked, base fee charged.
    validation: bool,
    /// ETH transfers reported as logs.
    trace_transfers: bool,
    /// When it stops.
    deadline: Instant,
}

/// A simulation under way: the state its blocks left so far, their hashes, the gas left.
struct Simulation<'a> {
    base: &'a dyn StateReader,
    chain_id: u64,
    rules: Rules,
    /// Gas the calls still to come may use together.
    budget: u64,
    /// Every simulated block's changes so far, its state overrides included.
    changes: StateDiff,
    /// The simulated blocks' hashes, for `BLOCKHASH`.
    hashes: BTreeMap<u64, B256>,
}

impl Simulation<'_> {
    /// Simulates `planned` on the state so far, after `parent` (whose hash is
    /// `parent_hash`).
    fn block(
        &mut self,
        parent: &Header,
        parent_hash: B256,
        planned: Planned<'_>,
        scope: &DeadlineScope,
    ) -> Result<SimulatedBlock, SimulationError> {
        let none = BlockOverrides::default();
        let overrides = planned
            .block
            .and_then(|block| block.block_overrides.as_ref())
            .unwrap_or(&none);
        let template = Header {
            parent_hash,
            number: planned.number,
            timestamp: planned.timestamp,
            proposer: parent.proposer,
            gas_limit: parent.gas_limit,
            // This chain's rule: the parent's base fee. Without validation, none.
            base_fee_per_gas: if self.rules.validation {
                parent.base_fee_per_gas
            } else {
                0
            },
            ..Header::default()
        };
        let (mut header, random) = override_block(&template, overrides)?;
        let calls = planned.block.map_or(&[][..], |block| &block.calls[..]);
        let before = Simulated {
            base: self.base,
            changes: &self.changes,
            hashes: &self.hashes,
        };
        let state_overrides = planned
            .block
            .and_then(|block| block.state_overrides.as_ref());
        let state = Overridden::new(&before, state_overrides, Some(overrides))?;
        let mut env = BlockEnv::new(self.chain_id, &header);
        if let Some(random) = random {
            env.prevrandao = random;
        }
        let ran = run_calls(&state, env, calls, self.rules, &mut self.budget, scope)?;
        let mut diff = state.diff()?;
        diff.append(ran.diff);
        let hashes: Vec<B256> = ran.txs.iter().map(|(tx, _)| tx.hash()).collect();
        header.gas_used = ran.gas_used;
        header.transactions_root = merkle_root(&hashes);
        header.receipts_root = receipts_root(&ran.receipts, &SerialLeaves);
        header.state_root = state_root(parent.state_root, &diff, &SerialLeaves);
        let hash = header.hash_slow();
        self.hashes.insert(header.number, hash);
        self.changes.append(diff);
        Ok(SimulatedBlock {
            header,
            hash,
            txs: ran.txs,
            receipts: ran.receipts,
            calls: ran.calls,
        })
    }
}

/// What a block's calls did: their state changes, gas, transactions, receipts, outcomes.
struct BlockRun {
    diff: StateDiff,
    gas_used: u64,
    txs: Vec<(SignedTx, Address)>,
    receipts: Vec<Receipt>,
    calls: Vec<SimCallOutcome>,
}

/// What go-ethereum adds to a halt's message when the call's gas was cut to the budget.
const CAPPED: &str = " (gas limit was capped by the RPC server's global gas cap)";

/// Runs `calls` one after another on `state` in `env` under `rules`, each on the state
/// the ones before it left, their gas taken from `budget`.
fn run_calls(
    state: &dyn StateReader,
    env: BlockEnv<'_>,
    calls: &[SimCall],
    rules: Rules,
    budget: &mut u64,
    scope: &DeadlineScope,
) -> Result<BlockRun, SimulationError> {
    let changes = RwLock::new(Changes::default());
    let hits = AtomicU64::new(0);
    let overlay = Overlay::new(state, &changes, &hits);
    let mut evm = block_evm(BlockDb::new(overlay), env).with_inspector(TransferLogs::default());
    guard(&mut evm.instruction);
    evm.ctx.cfg.disable_nonce_check = !rules.validation;
    let mut handler = SimHandler(PhantomData);
    let mut writes = WriteLog::default();
    let header = env.header;
    let mut run = BlockRun {
        diff: StateDiff::default(),
        gas_used: 0,
        txs: Vec::with_capacity(calls.len()),
        receipts: Vec::with_capacity(calls.len()),
        calls: Vec::with_capacity(calls.len()),
    };
    for (index, call) in calls.iter().enumerate() {
        if Instant::now() >= rules.deadline {
            return Err(SimulationError::TimedOut);
        }
        let remaining = header.gas_limit.saturating_sub(run.gas_used);
        let asked = call.gas.unwrap_or(remaining);
        if asked > remaining {
            return Err(SimulationError::BlockGasLimit {
                remaining,
                required: asked,
            });
        }
        let gas = asked.min(*budget);
        let nonce = match call.nonce {
            Some(nonce) => nonce,
            None => overlay
                .with_view(|view| view.account(call.from))?
                .map_or(0, |account| account.nonce),
        };
        // go-ethereum's `NoBaseFee`: a call that offers nothing sees a base fee of zero.
        let base_fee = if rules.validation || !call.fee.is_zero() {
            header.base_fee_per_gas
        } else {
            0
        };
        evm.ctx.block.basefee = base_fee;
        evm.ctx.set_tx(call.tx_env(env.chain_id, gas, nonce));
        let outcome = if rules.trace_transfers {
            handler.inspect_run(&mut evm)
        } else {
            handler.run(&mut evm)
        };
        // Emptied even after a refusal (see `run_tx`).
        let written = evm.finalize();
        let traced = evm.inspector.take();
        if scope.timed_out() {
            return Err(SimulationError::TimedOut);
        }
        let result = match outcome {
            Ok(result) => result,
            Err(EVMError::Transaction(invalid)) => {
                return Err(invalid_call(call, base_fee, invalid));
            }
            Err(EVMError::Database(error)) => return Err(error.into()),
            Err(other) => {
                return Err(ExecError::Evm {
                    index,
                    reason: other.to_string(),
                }
                .into());
            }
        };
        writes.clear();
        let range = writes.append(written);
        overlay.apply(&writes, range);
        let gas_used = result.tx_gas_used();
        *budget = budget.saturating_sub(gas_used);
        run.gas_used += gas_used;
        let spent = result.gas();
        let max_used_gas = spent.total_gas_spent().max(spent.floor_gas());
        let success = result.is_success();
        let logs = match success {
            true => result.logs().to_vec(),
            false => Vec::new(),
        };
        let shown = match (success, rules.trace_transfers) {
            (false, _) => Vec::new(),
            (true, true) => traced,
            (true, false) => logs.clone(),
        };
        run.receipts.push(Receipt {
            logs_bloom: logs_bloom(&logs),
            receipt: alloy_consensus::Receipt {
                status: success.into(),
                cumulative_gas_used: run.gas_used,
                logs,
            },
        });
        let mut outcome = CallOutcome::of(result);
        if let CallOutcome::Halt { reason, .. } = &mut outcome
            && gas < asked
        {
            reason.push_str(CAPPED);
        }
        run.txs
            .push((call.unsigned_tx(env.chain_id, gas, nonce), call.from));
        run.calls.push(SimCallOutcome {
            outcome,
            max_used_gas,
            logs: shown,
        });
    }
    run.diff = overlay.take_diff(0);
    Ok(run)
}

/// The error of `call`, run at `base_fee`, refused by revm for `invalid`, in
/// go-ethereum's words.
fn invalid_call(call: &SimCall, base_fee: u64, invalid: InvalidTransaction) -> SimulationError {
    let from = call.from;
    let (kind, message) = match invalid {
        InvalidTransaction::NonceTooLow { tx, state } => (
            InvalidCall::NonceTooLow,
            format!("nonce too low: address {from}, tx: {tx} state: {state}"),
        ),
        InvalidTransaction::NonceTooHigh { tx, state } => (
            InvalidCall::NonceTooHigh,
            format!("nonce too high: address {from}, tx: {tx} state: {state}"),
        ),
        InvalidTransaction::GasPriceLessThanBasefee => (
            InvalidCall::FeeCapTooLow,
            format!(
                "max fee per gas less than block base fee: address {from}, maxFeePerGas: {}, \
                 baseFee: {base_fee}",
                call.fee.max_fee()
            ),
        ),
        InvalidTransaction::CallGasCostMoreThanGasLimit {
            initial_gas,
            gas_limit,
        } => (
            InvalidCall::IntrinsicGas,
            format!("intrinsic gas too low: have {gas_limit}, want {initial_gas}"),
        ),
        InvalidTransaction::GasFloorMoreThanGasLimit {
            gas_floor,
            gas_limit,
        } => (
            InvalidCall::IntrinsicGas,
            format!("insufficient gas for floor data gas cost: have {gas_limit}, want {gas_floor}"),
        ),
        InvalidTransaction::LackOfFundForMaxFee { fee, balance } => (
            InvalidCall::InsufficientFunds,
            format!(
                "insufficient funds for gas * price + value: address {from} have {balance} \
                 want {fee}"
            ),
        ),
        InvalidTransaction::CreateInitCodeSizeLimit => (
            InvalidCall::InitCodeTooLarge,
            format!("max initcode size exceeded: code size {}", call.input.len()),
        ),
        InvalidTransaction::PriorityFeeGreaterThanMaxFee => (
            InvalidCall::FeeFields,
            format!(
                "max priority fee per gas higher than max fee per gas: address {from}, \
                 maxPriorityFeePerGas: {}, maxFeePerGas: {}",
                match call.fee {
                    SimFee::Dynamic { priority_fee, .. } => priority_fee,
                    SimFee::Legacy { gas_price } => gas_price,
                },
                call.fee.max_fee()
            ),
        ),
        other => (InvalidCall::Other, other.to_string()),
    };
    SimulationError::InvalidCall { kind, message }
}

/// The state a simulated block starts from: `base` with the changes of the simulated
/// blocks before it, whose hashes `BLOCKHASH` reads.
struct Simulated<'a> {
    base: &'a dyn StateReader,
    changes: &'a StateDiff,
    hashes: &'a BTreeMap<u64, B256>,
}

impl StateReader for Simulated<'_> {
    fn account(
        &self,
        address: Address,
    ) -> Result<Option<stave_primitives::AccountState>, StateError> {
        match self.changes.accounts.get(&address) {
            Some(change) => Ok(change.info),
            None => self.base.account(address),
        }
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        match self
            .changes
            .accounts
            .get(&address)
            .and_then(|change| change.slot(&slot))
        {
            Some(value) => Ok(value),
            None => self.base.storage(address, slot),
        }
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        match self.changes.codes.get(&code_hash) {
            Some(code) => Ok(Some(code.clone())),
            None => self.base.code(code_hash),
        }
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        match self.hashes.get(&number) {
            Some(hash) => Ok(*hash),
            None => self.base.block_hash(number),
        }
    }
}

/// Mainnet's handler but for one rule: a sender with code may call, as go-ethereum's
/// simulation never applies EIP-3607 (a contract wallet simulating its own calls).
/// Fees go to the proposer as a block's do.
struct SimHandler<EVM>(PhantomData<EVM>);

impl<EVM> Handler for SimHandler<EVM>
where
    EVM: EvmTr<
            Context: ContextTr<Journal: JournalTr<State = EvmState>>,
            Frame = EthFrame<EthInterpreter>,
        >,
{
    type Evm = EVM;
    type Error =
        EVMError<<<EVM::Context as ContextTr>::Db as revm::Database>::Error, InvalidTransaction>;
    type HaltReason = HaltReason;

    fn validate_against_state_and_deduct_caller(
        &self,
        evm: &mut Self::Evm,
        _init_and_floor_gas: &mut InitialAndFloorGas,
    ) -> Result<(), Self::Error> {
        let (block, tx, cfg, journal, _, _) = evm.ctx().all_mut();
        let mut caller = journal.load_account_with_code_mut(tx.caller())?.data;
        validate_account_nonce_and_code(
            &caller.account().info,
            tx.nonce(),
            true,
            cfg.is_nonce_check_disabled(),
        )?;
        let balance = calculate_caller_fee(*caller.balance(), tx, block, cfg)?;
        caller.set_balance(balance);
        if tx.kind().is_call() {
            caller.bump_nonce();
        }
        Ok(())
    }
}

impl<EVM> InspectorHandler for SimHandler<EVM>
where
    EVM: InspectorEvmTr<
            Context: ContextTr<Journal: JournalTr<State = EvmState>>,
            Frame = EthFrame<EthInterpreter>,
            Inspector: Inspector<<EVM as EvmTr>::Context, EthInterpreter>,
        >,
{
    type IT = EthInterpreter;
}

/// Collects a call's logs frame by frame, as go-ethereum's simulation tracer does: each
/// ETH transfer is a `Transfer` log from [`TRANSFER_LOG_EMITTER`] at the start of the
/// frame that moves it (a self-destruct's where it happens), and a frame that fails takes
/// its logs, transfers included, with it.
#[derive(Debug, Default)]
struct TransferLogs {
    /// The logs of each open frame, outermost first.
    frames: Vec<Vec<Log>>,
    /// The logs of the call, once its outermost frame succeeded.
    done: Vec<Log>,
}

impl TransferLogs {
    /// The finished call's logs, leaving it ready for the next call.
    fn take(&mut self) -> Vec<Log> {
        self.frames.clear();
        std::mem::take(&mut self.done)
    }

    /// Closes the innermost frame: its logs join its parent's if it succeeded.
    fn close(&mut self, succeeded: bool) {
        let logs = self.frames.pop().unwrap_or_default();
        if !succeeded {
            return;
        }
        match self.frames.last_mut() {
            Some(parent) => parent.extend(logs),
            None => self.done = logs,
        }
    }
}

/// The log of `value` wei moving from `from` to `to`.
fn transfer_log(from: Address, to: Address, value: U256) -> Log {
    Log {
        address: TRANSFER_LOG_EMITTER,
        data: LogData::new_unchecked(
            vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
            Bytes::from(value.to_be_bytes::<32>()),
        ),
    }
}

impl<CTX: ContextTr> Inspector<CTX> for TransferLogs {
    fn log(&mut self, _context: &mut CTX, log: Log) {
        if let Some(frame) = self.frames.last_mut() {
            frame.push(log);
        }
    }

    fn call(&mut self, _context: &mut CTX, inputs: &mut CallInputs) -> Option<FrameCallOutcome> {
        let mut frame = Vec::new();
        // A delegate call moves nothing; go-ethereum leaves CALLCODE's value out too.
        if inputs.scheme != CallScheme::CallCode
            && let Some(value) = inputs.transfer_value()
            && !value.is_zero()
        {
            frame.push(transfer_log(
                inputs.transfer_from(),
                inputs.transfer_to(),
                value,
            ));
        }
        self.frames.push(frame);
        None
    }

    fn call_end(
        &mut self,
        _context: &mut CTX,
        _inputs: &CallInputs,
        outcome: &mut FrameCallOutcome,
    ) {
        self.close(outcome.instruction_result().is_ok());
    }

    fn create(&mut self, _context: &mut CTX, _inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.frames.push(Vec::new());
        None
    }

    fn create_end(
        &mut self,
        _context: &mut CTX,
        inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        let succeeded = outcome.instruction_result().is_ok();
        // The new address is known only now; its endowment goes first among its logs.
        if succeeded
            && !inputs.value().is_zero()
            && let (Some(address), Some(frame)) = (outcome.address, self.frames.last_mut())
        {
            frame.insert(0, transfer_log(inputs.caller(), address, inputs.value()));
        }
        self.close(succeeded);
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        if !value.is_zero()
            && let Some(frame) = self.frames.last_mut()
        {
            frame.push(transfer_log(contract, target, value));
        }
    }
}
