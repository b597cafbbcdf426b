//! What a block executes in and on, as one parameter list: [`BlockEnv`] (the chain and the
//! header, which fix the EVM's environment; all a call needs) and [`BlockInput`] (that
//! environment with the state before the block, its transactions and what to do with an
//! invalid one: all an executor needs).

use alloy_primitives::B256;
use revm::primitives::hardfork::SpecId;
use stave_primitives::{Header, RecoveredTx, SPEC, StateReader};

/// What to do with a transaction that cannot be included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Executing a received block: any invalid transaction makes the block invalid.
    Validate,
    /// Building a block: invalid transactions are left out (and reported).
    Build,
}

/// The environment a block, or a call, runs in: the chain's id, the block's header
/// (number, timestamp, proposer, gas limit, base fee) and the rules it runs under.
#[derive(Debug, Clone, Copy)]
pub struct BlockEnv<'a> {
    /// The chain's id (EIP-155), from its genesis.
    pub chain_id: u64,
    /// The block's header.
    pub header: &'a Header,
    /// The fork whose rules apply: the chain's [`SPEC`] unless set otherwise (the
    /// Ethereum state tests run Cancun fixtures).
    pub spec: SpecId,
    /// `PREVRANDAO` (and `DIFFICULTY`): zero on this chain, which has no beacon
    /// randomness; a state test's fixture sets it.
    pub prevrandao: B256,
    /// The excess blob gas the blob base fee follows (EIP-4844): zero on this chain,
    /// which carries no blobs; a state test's fixture sets it.
    pub excess_blob_gas: u64,
}

impl<'a> BlockEnv<'a> {
    /// Block `header` on chain `chain_id`, under the chain's rules.
    pub fn new(chain_id: u64, header: &'a Header) -> Self {
        Self {
            chain_id,
            header,
            spec: SPEC,
            prevrandao: B256::ZERO,
            excess_blob_gas: 0,
        }
    }

    /// This environment under fork `spec`'s rules.
    pub fn with_spec(self, spec: SpecId) -> Self {
        Self { spec, ..self }
    }

    /// This environment with `PREVRANDAO` `prevrandao` and excess blob gas
    /// `excess_blob_gas`, as an Ethereum block (a state test's) sets them.
    pub fn with_randomness(self, prevrandao: B256, excess_blob_gas: u64) -> Self {
        Self {
            prevrandao,
            excess_blob_gas,
            ..self
        }
    }
}

/// One block to execute: the state before it, its environment, its transactions with
/// their senders, and whether an invalid one fails the block or is left out.
#[derive(Clone, Copy)]
pub struct BlockInput<'a> {
    /// The state before the block.
    pub state: &'a dyn StateReader,
    /// The chain and the header.
    pub env: BlockEnv<'a>,
    /// The transactions, in block order.
    pub txs: &'a [RecoveredTx],
    /// What an invalid transaction does.
    pub mode: Mode,
}

impl<'a> BlockInput<'a> {
    /// `txs` in `env` on `state`, invalid ones treated as `mode` says.
    pub fn new(
        state: &'a dyn StateReader,
        env: BlockEnv<'a>,
        txs: &'a [RecoveredTx],
        mode: Mode,
    ) -> Self {
        Self {
            state,
            env,
            txs,
            mode,
        }
    }
}
