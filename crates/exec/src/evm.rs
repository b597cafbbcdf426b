//! Building revm for a block: Stave's chain rules on top of mainnet's Prague.
//!
//! One rule differs from Ethereum: priority fees are not credited to the proposer
//! (`COINBASE`) transaction by transaction but once, at the end of the block. Crediting
//! per transaction would make every transaction write the proposer's account, so no two
//! could run in parallel. A contract reading `BALANCE(COINBASE)` mid-block therefore sees
//! the balance without this block's fees.

use std::{marker::PhantomData, ops::Range};

use alloy_consensus::Transaction as _;
use alloy_primitives::{Bloom, Log, logs_bloom};
use revm::{
    Context, MainBuilder, MainContext,
    context::{BlockEnv as RevmBlockEnv, TxEnv},
    context_interface::{
        ContextTr, JournalTr,
        block::BlobExcessGasAndPrice,
        result::{EVMError, HaltReason, InvalidTransaction},
    },
    handler::{EthFrame, EvmTr, FrameTr, Handler, MainnetContext, MainnetEvm},
    interpreter::interpreter::EthInterpreter,
    primitives::{U256, eip4844::BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE},
    state::EvmState,
};
use revm::{
    ExecuteEvm,
    context::result::ExecutionResult,
    context_interface::{ContextSetters, Transaction as _},
};
use stave_primitives::{B256, RecoveredTx, SPEC, StateError};

use crate::{db::WriteLog, env::BlockEnv, error::ExecError};

/// The EVM a block runs in, over database `DB`.
pub(crate) type BlockEvm<DB> = MainnetEvm<MainnetContext<DB>>;

/// Builds the EVM for `env` over `db`.
pub(crate) fn block_evm<DB: revm::Database>(db: DB, env: BlockEnv<'_>) -> BlockEvm<DB> {
    let BlockEnv { chain_id, header } = env;
    Context::mainnet()
        .with_db(db)
        .modify_cfg_chained(|cfg| {
            cfg.set_spec_and_mainnet_gas_params(SPEC);
            cfg.chain_id = chain_id;
        })
        .with_block(RevmBlockEnv {
            number: U256::from(header.number),
            timestamp: U256::from(header.timestamp),
            beneficiary: header.proposer,
            gas_limit: header.gas_limit,
            basefee: header.base_fee_per_gas,
            difficulty: U256::ZERO,
            // No beacon randomness on a BFT chain: PREVRANDAO is zero.
            prevrandao: Some(B256::ZERO),
            // No blobs: the blob base fee stays at its minimum.
            blob_excess_gas_and_price: Some(BlobExcessGasAndPrice::new(
                0,
                BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE,
            )),
            ..Default::default()
        })
        .build_mainnet()
}

/// revm's transaction environment for a recovered transaction.
pub(crate) fn tx_env(tx: &RecoveredTx) -> TxEnv {
    let envelope = tx.tx.envelope();
    TxEnv {
        tx_type: tx.tx.tx_type(),
        caller: tx.sender,
        gas_limit: envelope.gas_limit(),
        // For legacy and EIP-2930 this is the gas price; for EIP-1559 the fee cap.
        gas_price: envelope.max_fee_per_gas(),
        kind: envelope.kind(),
        value: envelope.value(),
        data: envelope.input().clone(),
        nonce: envelope.nonce(),
        chain_id: envelope.chain_id(),
        access_list: envelope.access_list().cloned().unwrap_or_default(),
        gas_priority_fee: envelope.max_priority_fee_per_gas(),
        ..Default::default()
    }
}

/// Mainnet's handler minus the per-transaction beneficiary reward (see the module docs).
pub(crate) struct DeferredRewardHandler<EVM>(PhantomData<EVM>);

impl<EVM> Default for DeferredRewardHandler<EVM> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<EVM> Handler for DeferredRewardHandler<EVM>
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

    fn reward_beneficiary(
        &self,
        _evm: &mut Self::Evm,
        _result: &mut <<Self::Evm as EvmTr>::Frame as FrameTr>::FrameResult,
    ) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// What running one transaction produced.
pub(crate) enum TxRun {
    /// It executed (successfully or not).
    Executed {
        /// Where what it wrote, to apply to the block's diff, sits in the log it ran into.
        writes: Range<usize>,
        /// True unless it reverted or halted.
        success: bool,
        /// Gas charged (after refunds and the EIP-7623 floor).
        gas_used: u64,
        /// Priority fee it owes the proposer, in wei.
        fee: U256,
        /// Logs it emitted.
        logs: Vec<Log>,
        /// Their bloom, computed where the tx ran rather than by the committer; none
        /// without logs. Boxed: a speculator's runs cross to the committing core, and a
        /// 256-byte bloom inline in every run made each speculated transfer (which logs
        /// nothing) cost measurably more, while a transaction with logs pays only a small
        /// allocation.
        bloom: Option<Box<Bloom>>,
    },
    /// It cannot be included (nonce, balance, fee, gas); the reason.
    Invalid(String),
}

/// Runs transaction `index` on `evm` without applying its state anywhere: what it wrote
/// goes to the end of `writes`.
pub(crate) fn run_tx<DB>(
    evm: &mut BlockEvm<DB>,
    handler: &mut DeferredRewardHandler<BlockEvm<DB>>,
    tx: &RecoveredTx,
    index: usize,
    writes: &mut WriteLog,
) -> Result<TxRun, ExecError>
where
    DB: revm::Database<Error = StateError>,
{
    evm.ctx.set_tx(tx_env(tx));
    let outcome = handler.run(evm);
    // Always empty the journal, even after a failure: accounts a refused tx loaded would
    // otherwise serve the next tx from the journal, unseen by the database (and so by
    // the parallel executor's read log).
    let state = evm.finalize();
    let result = match outcome {
        Ok(result) => result,
        Err(EVMError::Transaction(invalid)) => return Ok(TxRun::Invalid(invalid.to_string())),
        Err(EVMError::Database(error)) => return Err(error.into()),
        Err(other) => {
            return Err(ExecError::Evm {
                index,
                reason: other.to_string(),
            });
        }
    };
    let base_fee = u128::from(evm.ctx.block.basefee);
    let tip = evm
        .ctx
        .tx
        .effective_gas_price(base_fee)
        .saturating_sub(base_fee);
    let gas_used = result.tx_gas_used();
    let success = matches!(result, ExecutionResult::Success { .. });
    let logs = result.into_logs();
    Ok(TxRun::Executed {
        writes: writes.append(state),
        success,
        gas_used,
        fee: U256::from(tip) * U256::from(gas_used),
        bloom: (!logs.is_empty()).then(|| Box::new(logs_bloom(&logs))),
        logs,
    })
}
