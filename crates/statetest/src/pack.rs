//! Packed state tests: cases of many fixtures as the transactions of one block over their
//! merged pre-states, through the serial executor and the parallel one, which must agree
//! byte for byte, with every transaction doing in the block what it does alone.
//!
//! The fixtures reuse a handful of addresses (2,829 of the 3,098 Cancun tests send from
//! `0xa94f…0b`, 815 hold a contract at `0x095e…87`), so cases can share a block only on
//! addresses of their own: each case's pre-state accounts move to fresh addresses (all
//! but the coinbase, which the block fixes, and the precompiles, which code names by
//! number), and its transaction's sender, target and access list move with them. An
//! executor runs a transaction from the sender it is given (the signature was checked
//! when the sender was recovered), so the signed transaction keeps its signature. A case
//! is packed only if, run alone so moved and in the pack's environment, its post-state
//! moved back gives the fixture's state root and its logs the fixture's logs hash: a case
//! whose code names an address of its pre-state, stores its caller, or reads the pack's
//! (larger) gas limit is left out, as [`Exclusion::Differs`].
//!
//! Cases share a pack when their environments and coinbase accounts are equal and nothing
//! one of them touches alone (reads, writes, or holds in its pre-state; the coinbase
//! aside) is touched by another, bar accounts both hold alike and neither writes.
//! [`Pack::check`] then runs the block and compares it with the cases run alone.

use std::{
    collections::{BTreeMap, BTreeSet},
    str::FromStr,
    sync::Mutex,
};

use alloy_consensus::{SignableTransaction as _, Transaction as _, TxEnvelope};
use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256, Bytes, Log, TxKind, U256, keccak256};
use revm::primitives::hardfork::SpecId;
use stave_exec::{BlockInput, ExecError, ExecutionOutcome, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{
    AccountState, Receipt, RecoveredTx, SignedTx, StateDiff, StateError, StateReader,
};

use crate::{
    fixture::{Case, Env, PreAccount, StateTest},
    runner::{block_env, header, logs_hash, transaction},
    skip::skip_for,
    world::World,
};

/// The gas limit of a pack's block unless its fixtures' is larger: room for hundreds of
/// transactions. Every case is checked alone under it too, so one that reads `GASLIMIT`
/// is left out rather than run under a limit its fixture did not set.
const PACK_GAS_LIMIT: u64 = 1_000_000_000;

/// Wei added to the coinbase's balance to see whether a case depends on it (one ether):
/// in a pack the coinbase holds the fees of the transactions before each.
const COINBASE_BUMP: u64 = 1_000_000_000_000_000_000;

/// Why a case is not in any pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exclusion {
    /// On the skip list ([`crate::SKIPS`]).
    Skipped,
    /// Its transaction must be refused: a pack's transactions are all included.
    Invalid,
    /// The chain refuses its transaction before execution (or its type names its
    /// addresses where they cannot be moved: none the chain accepts).
    Refused,
    /// Its sender is the coinbase, which every case of a pack shares.
    CoinbaseSends,
    /// Run alone with more wei at the coinbase, it changes other accounts otherwise: its
    /// code reads the coinbase's balance, which in a pack holds the fees before it.
    ReadsCoinbase,
    /// Run alone on moved addresses, it does not give the fixture's state root and logs
    /// hash: its code depends on the addresses of its accounts or on the gas limit.
    Differs,
}

/// Why packing or checking a pack failed: every variant but `Executor` and
/// `UnknownFork` is a difference the pack's block shows against its cases run alone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The fork is not one revm knows.
    #[error("unknown fork {0:?}")]
    UnknownFork(String),
    /// An executor failed to run a block.
    #[error("{executor} executor: {source}")]
    Executor {
        /// Which executor, on which block.
        executor: String,
        /// Its error.
        source: ExecError,
    },
    /// The serial executor left transactions of the pack out.
    #[error("the pack left out transactions {0:?}")]
    LeftOut(Vec<usize>),
    /// The parallel executor's outcome (included transactions, receipts, gas, fees or
    /// state changes) is not the serial one's.
    #[error("on {threads} threads the parallel executor's outcome differs from the serial one's")]
    ExecutorsDiffer {
        /// The parallel executor's threads.
        threads: usize,
    },
    /// A transaction's receipt in the pack is not the one it has alone.
    #[error("{case}: its {what} in the pack differs from its run alone")]
    Receipt {
        /// The case (`test [index]`).
        case: String,
        /// Status, gas used or logs.
        what: &'static str,
    },
    /// The pack's post-state is not its pre-state with every case's own changes
    /// (compared without the coinbase).
    #[error("the pack's post-state differs from the union of its cases' at {0:?}")]
    Union(Vec<Address>),
    /// The pack's post-state is not that of its transactions run as one-transaction
    /// blocks in turn (compared with the coinbase).
    #[error("the pack's post-state differs from its transactions run a block each at {0:?}")]
    Chain(Vec<Address>),
}

/// What [`pack`] made of the cases: the packs, and how many cases it left out, by why.
#[derive(Debug)]
pub struct Packing {
    /// The packs, in the order they were opened.
    pub packs: Vec<Pack>,
    /// Cases left out, counted by reason.
    pub excluded: BTreeMap<Exclusion, usize>,
}

/// A case moved to addresses of its own, with what it did alone there.
#[derive(Debug)]
struct Packable {
    /// `test [index]`, for messages.
    name: String,
    /// The fixture's environment with the pack's gas limit.
    env: Env,
    /// The coinbase's account in the pre-state, if it has one.
    coinbase: Option<PreAccount>,
    /// The pre-state at the moved addresses, the coinbase's account aside.
    pre: BTreeMap<Address, PreAccount>,
    /// The transaction from the moved sender.
    tx: RecoveredTx,
    /// Its receipt alone (its cumulative gas is its own gas).
    receipt: Receipt,
    /// Its changes alone, the coinbase's credit included.
    diff: StateDiff,
    /// What it reads, writes or holds, the coinbase aside.
    touched: BTreeSet<Address>,
    /// What it writes, the coinbase aside.
    written: BTreeSet<Address>,
}

/// Cases run as one block: their merged pre-state, environment and transactions.
#[derive(Debug)]
pub struct Pack {
    spec: SpecId,
    cases: Vec<Packable>,
    /// Every case's pre-state account, by address.
    pre: BTreeMap<Address, PreAccount>,
    /// Everything the cases touch.
    touched: BTreeSet<Address>,
    /// What the cases write: no other case may touch it.
    written: BTreeSet<Address>,
    /// The sum of the transactions' gas limits.
    gas: u64,
}

/// Packs the cases of fork `fork` of `tests` into blocks of at most `max_txs`
/// transactions, each case into the first pack that admits it. Cases go in round by
/// round (the first case of every test, then the second, ...), so a pack mixes tests.
pub fn pack(tests: &[StateTest], fork: &str, max_txs: usize) -> Result<Packing, PackError> {
    let spec = SpecId::from_str(fork).map_err(|_| PackError::UnknownFork(fork.to_owned()))?;
    let mut rounds: Vec<(usize, &StateTest, &Case)> = tests
        .iter()
        .flat_map(|test| {
            test.cases
                .iter()
                .filter(|case| case.fork == fork)
                .enumerate()
                .map(move |(round, case)| (round, test, case))
        })
        .collect();
    // Stable: within a round, the tests keep their order.
    rounds.sort_by_key(|(round, ..)| *round);
    let mut packing = Packing {
        packs: Vec::new(),
        excluded: BTreeMap::new(),
    };
    let mut fresh = 0u64;
    for (_, test, case) in rounds {
        let case = match prepare(test, case, spec, &mut fresh)? {
            Ok(case) => case,
            Err(exclusion) => {
                *packing.excluded.entry(exclusion).or_default() += 1;
                continue;
            }
        };
        match packing
            .packs
            .iter_mut()
            .find(|pack| pack.admits(&case, max_txs))
        {
            Some(pack) => pack.add(case),
            None => {
                let mut pack = Pack {
                    spec,
                    cases: Vec::new(),
                    pre: BTreeMap::new(),
                    touched: BTreeSet::new(),
                    written: BTreeSet::new(),
                    gas: 0,
                };
                pack.add(case);
                packing.packs.push(pack);
            }
        }
    }
    Ok(packing)
}

/// A fresh address for the `n`th moved account.
fn fresh_address(n: &mut u64) -> Address {
    *n += 1;
    Address::from_word(keccak256(
        [b"stave-statetest-pack".as_slice(), &n.to_be_bytes()].concat(),
    ))
}

/// Cancun's precompiles, 0x01 to 0x0a: code calls them by number, so they stay put.
fn precompile(address: Address) -> bool {
    address.0[..19].iter().all(|byte| *byte == 0) && (1..=10).contains(&address.0[19])
}

/// `case` of `test` moved to fresh addresses and run alone, or why it cannot be packed;
/// an error when an executor fails.
fn prepare(
    test: &StateTest,
    case: &Case,
    spec: SpecId,
    fresh: &mut u64,
) -> Result<Result<Packable, Exclusion>, PackError> {
    if skip_for(test, case).is_some() {
        return Ok(Err(Exclusion::Skipped));
    }
    if case.expect_exception.is_some() {
        return Ok(Err(Exclusion::Invalid));
    }
    let Ok(tx) = transaction(case) else {
        return Ok(Err(Exclusion::Refused));
    };
    let coinbase = test.env.coinbase;
    if tx.sender == coinbase {
        return Ok(Err(Exclusion::CoinbaseSends));
    }
    // Where each moved account goes, and back.
    let mut moved: BTreeMap<Address, Address> = BTreeMap::new();
    for (address, _) in &test.pre {
        if *address != coinbase && !precompile(*address) {
            moved.insert(*address, fresh_address(fresh));
        }
    }
    let sender = tx.sender;
    moved.entry(sender).or_insert_with(|| fresh_address(fresh));
    let to = |address: Address| moved.get(&address).copied().unwrap_or(address);
    let Some(signed) = moved_tx(&tx.tx, to) else {
        return Ok(Err(Exclusion::Refused));
    };
    let tx = RecoveredTx {
        sender: to(tx.sender),
        tx: signed,
    };
    let mut back: BTreeMap<Address, Address> =
        moved.iter().map(|(from, to)| (*to, *from)).collect();
    if tx.tx.envelope().kind().is_create() {
        // The contract the transaction creates lands where the moved sender's nonce says.
        let nonce = tx.tx.envelope().nonce();
        back.insert(tx.sender.create(nonce), sender.create(nonce));
    }
    let env = Env {
        gas_limit: test.env.gas_limit.max(PACK_GAS_LIMIT),
        ..test.env
    };
    let pre: BTreeMap<Address, PreAccount> = test
        .pre
        .iter()
        .filter(|(address, _)| *address != coinbase)
        .map(|(address, account)| (to(*address), account.clone()))
        .collect();
    let coinbase_pre = test
        .pre
        .iter()
        .find(|(address, _)| *address == coinbase)
        .map(|(_, account)| account.clone());
    let world = World::from_pre(&pre_list(&pre, coinbase, coinbase_pre.as_ref()));
    let reader = Recording::new(&world);
    let outcome = run(
        &reader,
        &env,
        spec,
        std::slice::from_ref(&tx),
        "serial (alone)",
    )?;
    let (Some(receipt), true) = (outcome.receipts.first(), outcome.skipped.is_empty()) else {
        return Ok(Err(Exclusion::Differs));
    };
    // Moved back, the run must be the fixture's.
    let mut post = world.clone();
    post.apply(&outcome.diff);
    let all_back = back.iter().all(|(from, to)| post.relocate(*from, *to));
    let logs: Vec<Log> = receipt
        .receipt
        .logs
        .iter()
        .map(|log| Log {
            address: back.get(&log.address).copied().unwrap_or(log.address),
            data: log.data.clone(),
        })
        .collect();
    if !all_back || post.root() != case.state_root || logs_hash(&logs) != case.logs_hash {
        return Ok(Err(Exclusion::Differs));
    }
    // A case must do the same with more wei at the coinbase; one that passes this and
    // still depends on the balance fails the pack's check, which compares the coinbase
    // exactly.
    let bumped = PreAccount {
        balance: coinbase_pre
            .as_ref()
            .map_or(U256::ZERO, |account| account.balance)
            + U256::from(COINBASE_BUMP),
        ..coinbase_pre.clone().unwrap_or_default()
    };
    let richer = World::from_pre(&pre_list(&pre, coinbase, Some(&bumped)));
    let richer = run(
        &richer,
        &env,
        spec,
        std::slice::from_ref(&tx),
        "serial (alone)",
    )?;
    let others = |diff: &StateDiff| {
        diff.accounts
            .iter()
            .filter(|(address, _)| **address != coinbase)
            .map(|(address, change)| (*address, change.clone()))
            .collect::<Vec<_>>()
    };
    if richer.receipts != outcome.receipts
        || richer.diff.codes != outcome.diff.codes
        || others(&richer.diff) != others(&outcome.diff)
    {
        return Ok(Err(Exclusion::ReadsCoinbase));
    }
    let written: BTreeSet<Address> = outcome
        .diff
        .accounts
        .iter()
        .map(|(address, _)| *address)
        .filter(|address| *address != coinbase)
        .collect();
    let mut touched = reader.into_read();
    touched.extend(written.iter().copied());
    touched.extend(pre.keys().copied());
    touched.remove(&coinbase);
    Ok(Ok(Packable {
        name: format!("{} [{}]", test.name, case.index),
        env,
        coinbase: coinbase_pre,
        pre,
        receipt: receipt.clone(),
        diff: outcome.diff,
        tx,
        touched,
        written,
    }))
}

/// `tx` with every address it names (target, access list) as `to` moves it, signed as
/// before; `None` for a type that names none this way (none the chain accepts).
fn moved_tx(tx: &SignedTx, to: impl Fn(Address) -> Address) -> Option<SignedTx> {
    let kind = |kind: TxKind| match kind {
        TxKind::Call(address) => TxKind::Call(to(address)),
        TxKind::Create => TxKind::Create,
    };
    let list = |list: &mut AccessList| {
        for item in &mut list.0 {
            item.address = to(item.address);
        }
    };
    let envelope = match tx.envelope().clone() {
        TxEnvelope::Legacy(signed) => {
            let (mut inner, signature, _) = signed.into_parts();
            inner.to = kind(inner.to);
            TxEnvelope::Legacy(inner.into_signed(signature))
        }
        TxEnvelope::Eip2930(signed) => {
            let (mut inner, signature, _) = signed.into_parts();
            inner.to = kind(inner.to);
            list(&mut inner.access_list);
            TxEnvelope::Eip2930(inner.into_signed(signature))
        }
        TxEnvelope::Eip1559(signed) => {
            let (mut inner, signature, _) = signed.into_parts();
            inner.to = kind(inner.to);
            list(&mut inner.access_list);
            TxEnvelope::Eip1559(inner.into_signed(signature))
        }
        _ => return None,
    };
    Some(SignedTx::from_envelope(envelope))
}

/// A pre-state as [`World::from_pre`] takes it: `pre`, and the coinbase's account.
fn pre_list(
    pre: &BTreeMap<Address, PreAccount>,
    coinbase: Address,
    account: Option<&PreAccount>,
) -> Vec<(Address, PreAccount)> {
    pre.iter()
        .map(|(address, account)| (*address, account.clone()))
        .chain(account.map(|account| (coinbase, account.clone())))
        .collect()
}

/// Runs `txs` as one block on `state` in `env` with the serial executor.
fn run(
    state: &dyn StateReader,
    env: &Env,
    spec: SpecId,
    txs: &[RecoveredTx],
    executor: &str,
) -> Result<ExecutionOutcome, PackError> {
    let header = header(env);
    execute_serial(BlockInput::new(
        state,
        block_env(env, &header, spec),
        txs,
        Mode::Build,
    ))
    .map_err(|source| PackError::Executor {
        executor: executor.to_owned(),
        source,
    })
}

impl Pack {
    /// True when `case` can join: same environment and coinbase account, room for its
    /// transaction, and every address it touches that the pack touches too is one that
    /// neither writes and both hold alike, or neither holds (a precompile both call).
    fn admits(&self, case: &Packable, max_txs: usize) -> bool {
        let Some(first) = self.cases.first() else {
            return true;
        };
        let shared_alike = |address: &Address| {
            !self.touched.contains(address)
                || (!self.written.contains(address)
                    && !case.written.contains(address)
                    && case.pre.get(address) == self.pre.get(address))
        };
        first.env == case.env
            && first.coinbase == case.coinbase
            && self.cases.len() < max_txs
            && self.gas.saturating_add(case.tx.tx.envelope().gas_limit()) <= case.env.gas_limit
            && case.touched.iter().all(shared_alike)
    }

    fn add(&mut self, case: Packable) {
        self.gas += case.tx.tx.envelope().gas_limit();
        self.touched.extend(case.touched.iter().copied());
        self.written.extend(case.written.iter().copied());
        self.pre.extend(
            case.pre
                .iter()
                .map(|(address, account)| (*address, account.clone())),
        );
        self.cases.push(case);
    }

    /// Transactions in the pack.
    pub fn len(&self) -> usize {
        self.cases.len()
    }

    /// True for a pack of no transactions (never made by [`pack`]).
    pub fn is_empty(&self) -> bool {
        self.cases.is_empty()
    }

    /// The cases in the pack (`test [index]`), in block order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.cases.iter().map(|case| case.name.as_str())
    }

    /// Runs the pack as one block through the serial executor and through each of
    /// `parallel`, and checks that: the serial executor includes every transaction; each
    /// parallel executor's outcome equals the serial one's (included transactions,
    /// receipts, gas, fees and state changes); each transaction's status, gas used and
    /// logs equal its own run alone; the post-state equals the merged pre-state with each
    /// case's own changes applied, the coinbase aside (the pack credits it every fee);
    /// and, the coinbase included, the post-state equals that of the transactions run as
    /// one-transaction blocks in turn.
    pub fn check(&self, parallel: &[ParallelExecutor]) -> Result<(), PackError> {
        let first = &self.cases[0];
        let (env, coinbase) = (&first.env, first.env.coinbase);
        let pre = World::from_pre(&pre_list(&self.pre, coinbase, first.coinbase.as_ref()));
        let txs: Vec<RecoveredTx> = self.cases.iter().map(|case| case.tx.clone()).collect();
        let serial = run(&pre, env, self.spec, &txs, "serial")?;
        if !serial.skipped.is_empty() {
            return Err(PackError::LeftOut(
                serial.skipped.iter().map(|skipped| skipped.index).collect(),
            ));
        }
        let header = header(env);
        for executor in parallel {
            let threads = executor.threads();
            let outcome = executor
                .execute(BlockInput::new(
                    &pre,
                    block_env(env, &header, self.spec),
                    &txs,
                    Mode::Build,
                ))
                .map_err(|source| PackError::Executor {
                    executor: format!("parallel ({threads} threads)"),
                    source,
                })?;
            if outcome != serial {
                return Err(PackError::ExecutorsDiffer { threads });
            }
        }
        let mut cumulative = 0;
        for (case, receipt) in self.cases.iter().zip(&serial.receipts) {
            let differs = |what| PackError::Receipt {
                case: case.name.clone(),
                what,
            };
            let gas = receipt.receipt.cumulative_gas_used - cumulative;
            cumulative = receipt.receipt.cumulative_gas_used;
            if receipt.receipt.status != case.receipt.receipt.status {
                return Err(differs("status"));
            }
            if gas != case.receipt.receipt.cumulative_gas_used {
                return Err(differs("gas used"));
            }
            if receipt.receipt.logs != case.receipt.receipt.logs {
                return Err(differs("logs"));
            }
        }
        let mut post = pre.clone();
        post.apply(&serial.diff);
        let mut union = pre.clone();
        for case in &self.cases {
            union.apply(&case.diff);
        }
        let (mut packed, mut union) = (post.clone(), union);
        packed.remove(coinbase);
        union.remove(coinbase);
        if packed != union {
            return Err(PackError::Union(packed.differing_accounts(&union)));
        }
        let mut chain = pre;
        for tx in &txs {
            let outcome = run(
                &chain,
                env,
                self.spec,
                std::slice::from_ref(tx),
                "serial (chain)",
            )?;
            chain.apply(&outcome.diff);
        }
        if chain != post {
            return Err(PackError::Chain(post.differing_accounts(&chain)));
        }
        Ok(())
    }
}

/// A reader that notes every address read: what a case touches alone.
struct Recording<'a> {
    world: &'a World,
    read: Mutex<BTreeSet<Address>>,
}

impl<'a> Recording<'a> {
    fn new(world: &'a World) -> Self {
        Self {
            world,
            read: Mutex::default(),
        }
    }

    fn note(&self, address: Address) {
        self.read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(address);
    }

    fn into_read(self) -> BTreeSet<Address> {
        self.read
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StateReader for Recording<'_> {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        self.note(address);
        self.world.account(address)
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        self.note(address);
        self.world.storage(address, slot)
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        self.world.code(code_hash)
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        self.world.block_hash(number)
    }
}
