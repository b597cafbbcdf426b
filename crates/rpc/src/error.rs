//! JSON-RPC errors with the codes and messages Ethereum clients expect.

use alloy_primitives::Bytes;
use jsonrpsee::types::ErrorObjectOwned;
use stave_exec::{InvalidCall, SimulationError};
use stave_node::ViewError;
use stave_txpool::PoolError;

/// go-ethereum's code for a failed server-side operation (nonce too low, state missing...).
pub const SERVER_ERROR: i32 = -32000;
/// JSON-RPC's code for invalid method parameters.
pub const INVALID_PARAMS: i32 = -32602;
/// The code clients read revert data from (EIP-1474 / geth: `execution reverted`).
pub const EXECUTION_REVERTED: i32 = 3;
/// The code for a query over a resource limit (as Infura and geth use for `eth_getLogs`),
/// and for a server too busy to take a heavy request.
pub const LIMIT_EXCEEDED: i32 = -32005;
/// JSON-RPC's code for an internal error (go-ethereum's for a simulated call refused for a
/// reason it has no code of its own for).
pub const INTERNAL_ERROR: i32 = -32603;

/// The codes of `eth_simulateV1`'s errors (ethereum/execution-apis, as go-ethereum and
/// reth answer them): a simulated call that could not run, a chain of blocks out of
/// order, a request over a limit.
pub mod simulate {
    /// A call's nonce is below its sender's.
    pub const NONCE_TOO_LOW: i32 = -38010;
    /// A call's nonce is above its sender's.
    pub const NONCE_TOO_HIGH: i32 = -38011;
    /// A call's fee cap is below the block's base fee.
    pub const BASE_FEE_TOO_LOW: i32 = -38012;
    /// A call's gas does not cover its intrinsic cost.
    pub const INTRINSIC_GAS: i32 = -38013;
    /// A call's sender cannot pay for it.
    pub const INSUFFICIENT_FUNDS: i32 = -38014;
    /// A call asks for more gas than its block has left.
    pub const BLOCK_GAS_LIMIT_REACHED: i32 = -38015;
    /// A block's number is not above the one before it.
    pub const BLOCK_NUMBER_INVALID: i32 = -38020;
    /// A block's timestamp is not above the one before it.
    pub const BLOCK_TIMESTAMP_INVALID: i32 = -38021;
    /// A creation's initcode is over the EIP-3860 limit.
    pub const MAX_INIT_CODE_SIZE_EXCEEDED: i32 = -38025;
    /// Too many blocks or calls.
    pub const CLIENT_LIMIT_EXCEEDED: i32 = -38026;
    /// A call halted (out of gas, invalid opcode...): the code of its `error`.
    pub const VM_ERROR: i32 = -32015;
}

/// What an RPC method can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The txpool refused a transaction (its message is what clients match on).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The state asked for is not kept, or the block does not exist.
    #[error(transparent)]
    View(#[from] ViewError),
    /// A parameter is wrong.
    #[error("{0}")]
    InvalidParams(String),
    /// A call reverted.
    #[error("execution reverted{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Reverted {
        /// The decoded `Error(string)` reason, when there is one.
        reason: Option<String>,
        /// The raw revert data.
        data: Bytes,
    },
    /// A query went over a limit; the message says what would succeed.
    #[error("{0}")]
    LimitExceeded(String),
    /// Every worker for heavy methods is busy and its queue (of this many requests, the
    /// running ones included) is full: retry later.
    #[error("server busy: {0} heavy requests running or queued, retry later")]
    Busy(usize),
    /// An `eth_simulateV1` was refused (each reason has its code, see [`simulate`]).
    #[error(transparent)]
    Simulation(#[from] SimulationError),
    /// Anything else the server failed at.
    #[error("{0}")]
    Internal(String),
}

impl RpcError {
    /// An internal error from anything printable.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::Internal(error.to_string())
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(error: RpcError) -> Self {
        let message = error.to_string();
        match error {
            RpcError::InvalidParams(_) => {
                ErrorObjectOwned::owned(INVALID_PARAMS, message, None::<()>)
            }
            RpcError::Reverted { data, .. } => {
                ErrorObjectOwned::owned(EXECUTION_REVERTED, message, Some(data))
            }
            RpcError::LimitExceeded(_) | RpcError::Busy(_) => {
                ErrorObjectOwned::owned(LIMIT_EXCEEDED, message, None::<()>)
            }
            RpcError::Simulation(error) => {
                ErrorObjectOwned::owned(simulation_code(&error), message, None::<()>)
            }
            RpcError::Pool(_) | RpcError::View(_) | RpcError::Internal(_) => {
                ErrorObjectOwned::owned(SERVER_ERROR, message, None::<()>)
            }
        }
    }
}

/// The code of an `eth_simulateV1` refusal.
fn simulation_code(error: &SimulationError) -> i32 {
    match error {
        SimulationError::Empty | SimulationError::Override(_) => INVALID_PARAMS,
        SimulationError::TooManyBlocks | SimulationError::TooManyCalls { .. } => {
            simulate::CLIENT_LIMIT_EXCEEDED
        }
        SimulationError::BlockNumber { .. } => simulate::BLOCK_NUMBER_INVALID,
        SimulationError::BlockTimestamp { .. } => simulate::BLOCK_TIMESTAMP_INVALID,
        SimulationError::BlockGasLimit { .. } => simulate::BLOCK_GAS_LIMIT_REACHED,
        SimulationError::InvalidCall { kind, .. } => match kind {
            InvalidCall::NonceTooLow => simulate::NONCE_TOO_LOW,
            InvalidCall::NonceTooHigh => simulate::NONCE_TOO_HIGH,
            InvalidCall::FeeCapTooLow => simulate::BASE_FEE_TOO_LOW,
            InvalidCall::IntrinsicGas => simulate::INTRINSIC_GAS,
            InvalidCall::InsufficientFunds => simulate::INSUFFICIENT_FUNDS,
            InvalidCall::InitCodeTooLarge => simulate::MAX_INIT_CODE_SIZE_EXCEEDED,
            InvalidCall::FeeFields => INVALID_PARAMS,
            _ => INTERNAL_ERROR,
        },
        _ => SERVER_ERROR,
    }
}

/// The `Error(string)` reason in revert data, if that is what it holds.
pub fn revert_reason(data: &[u8]) -> Option<String> {
    // selector of Error(string), then offset, length, bytes
    const ERROR_SELECTOR: [u8; 4] = [0x08, 0xc3, 0x79, 0xa0];
    let body = data.strip_prefix(&ERROR_SELECTOR)?;
    let word = |i: usize| body.get(i * 32..(i + 1) * 32);
    let offset = usize::try_from(alloy_primitives::U256::from_be_slice(word(0)?)).ok()?;
    let len_word = body.get(offset..offset.checked_add(32)?)?;
    let len = usize::try_from(alloy_primitives::U256::from_be_slice(len_word)).ok()?;
    let start = offset.checked_add(32)?;
    let text = body.get(start..start.checked_add(len)?)?;
    String::from_utf8(text.to_vec()).ok()
}
