//! Building revm for a block: mainnet's rules of the block's fork (the chain's Prague, or
//! the fork a state test names), with the proposer as `COINBASE`.
//!
//! Priority fees are credited to the proposer after each transaction, as Ethereum does:
//! a contract reading `BALANCE(COINBASE)` sees the fees of the transactions before it,
//! and a touched empty proposer account is deleted (EIP-161). A transaction run for real
//! credits its fee itself ([`FeeHandler::crediting`]); a speculative run
//! ([`FeeHandler::deferring`]) only reports it, so that speculated transactions do not
//! all write the proposer's account, and the parallel committer credits it in block
//! order (see `parallel`'s module docs for why that stays exact).

use std::{marker::PhantomData, ops::Range};

use revm::primitives::{eip4844::BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN, hardfork::SpecId};

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
    handler::{EthFrame, EvmTr, FrameTr, Handler, MainnetContext, MainnetEvm, post_execution},
    interpreter::interpreter::EthInterpreter,
    primitives::{U256, eip4844::BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE},
    state::EvmState,
};
use revm::{
    ExecuteEvm,
    context::result::ExecutionResult,
    context_interface::{ContextSetters, Transaction as _},
};
use stave_primitives::{RecoveredTx, StateError};

use crate::{db::WriteLog, env::BlockEnv, error::ExecError};

/// The EVM a block runs in, over database `DB`.
pub(crate) type BlockEvm<DB> = MainnetEvm<MainnetContext<DB>>;

/// Builds the EVM for `env` over `db`.
pub(crate) fn block_evm<DB: revm::Database>(db: DB, env: BlockEnv<'_>) -> BlockEvm<DB> {
    let BlockEnv {
        chain_id,
        header,
        spec,
        prevrandao,
        excess_blob_gas,
    } = env;
    let blob_fraction = if spec.is_enabled_in(SpecId::PRAGUE) {
        BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE
    } else {
        BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN
    };
    Context::mainnet()
        .with_db(db)
        .modify_cfg_chained(|cfg| {
            cfg.set_spec_and_mainnet_gas_params(spec);
            cfg.chain_id = chain_id;
        })
        .with_block(RevmBlockEnv {
            number: U256::from(header.number),
            timestamp: U256::from(header.timestamp),
            beneficiary: header.proposer,
            gas_limit: header.gas_limit,
            basefee: header.base_fee_per_gas,
            difficulty: U256::ZERO,
            // Zero on this chain (no beacon randomness, no blobs): see `BlockEnv`.
            prevrandao: Some(prevrandao),
            blob_excess_gas_and_price: Some(BlobExcessGasAndPrice::new(
                excess_blob_gas,
                blob_fraction,
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

/// Mainnet's handler, crediting each transaction's priority fee to the proposer as it
/// ends, or only reporting it (see the module docs).
pub(crate) struct FeeHandler<EVM> {
    /// True when the fee is credited by the run itself.
    credits: bool,
    evm: PhantomData<EVM>,
}

impl<EVM> FeeHandler<EVM> {
    /// Credits each fee as Ethereum does: for runs whose writes are the block's.
    pub(crate) fn crediting() -> Self {
        Self {
            credits: true,
            evm: PhantomData,
        }
    }

    /// Leaves the proposer's account alone: for speculative runs, whose fees the
    /// committer credits in block order.
    pub(crate) fn deferring() -> Self {
        Self {
            credits: false,
            evm: PhantomData,
        }
    }
}

impl<EVM> Handler for FeeHandler<EVM>
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
        evm: &mut Self::Evm,
        result: &mut <<Self::Evm as EvmTr>::Frame as FrameTr>::FrameResult,
    ) -> Result<(), Self::Error> {
        if self.credits {
            post_execution::reward_beneficiary(evm.ctx(), result.gas())?;
        }
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
        /// True when the run credited `fee` to the proposer among its writes; false for
        /// a speculative run, whose fee the committer credits.
        credited: bool,
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
    handler: &mut FeeHandler<BlockEvm<DB>>,
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
        credited: handler.credits,
        bloom: (!logs.is_empty()).then(|| Box::new(logs_bloom(&logs))),
        logs,
    })
}
