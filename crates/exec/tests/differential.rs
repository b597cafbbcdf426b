//! The widened differential test: random blocks of up to 2,500 transactions from up to
//! 500 senders (legacy, EIP-2930 and EIP-1559), through the serial executor and the
//! parallel one on 2 and 8 threads, which must give the same outcome byte for byte.
//!
//! The blocks mix what makes speculation go wrong: senders too poor for their
//! transactions, nonce gaps, fees below the base fee, contracts reading `COINBASE` and
//! `BALANCE(COINBASE)` (the proposer's balance grows with every transaction's fee),
//! payments to the proposer and a proposer that is itself a sender, self-destruct of a
//! contract deployed before the block, contracts creating contracts, deep call chains
//! that revert at alternate depths, and one storage slot every counter call writes.
//!
//! CI runs `PROPTEST_CASES` cases (256 by default) of blocks up to 250 transactions from
//! up to 100 senders. The long run, with the full sizes:
//!
//! ```text
//! STAVE_WIDE_BLOCKS=1 PROPTEST_CASES=100000 cargo test --release -p stave-exec --test differential
//! ```

mod support;

use std::{collections::BTreeMap, sync::OnceLock};

use alloy_consensus::{TxEip1559, TxEip2930, TxLegacy, TypedTransaction};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_genesis::GenesisAccount;
use alloy_primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use proptest::prelude::*;
use stave_exec::{BlockEnv, BlockInput, MemoryState, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{Header, RecoveredTx};
use stave_sdk::LocalSigner;
use support::{BASE_FEE, CHAIN_ID, ETH, PROPOSER, genesis_state};

/// Reads `COINBASE` into slot 1 and `BALANCE(COINBASE)` into slot 0.
const COINBASE_PROBE: Address = Address::repeat_byte(0xc0);
/// Adds one to slot 0: the storage slot every call writes.
const COUNTER: Address = Address::repeat_byte(0xc1);
/// Self-destructs to its caller (deployed before the block, funded).
const DESTRUCTIBLE: Address = Address::repeat_byte(0xc2);
/// Creates an empty child contract on every call.
const FACTORY: Address = Address::repeat_byte(0xc3);
/// Calls itself to the depth its calldata says; writes slot 0 and counts slot 1 at
/// every depth; the frames of even depth revert.
const DEEP: Address = Address::repeat_byte(0xc4);

/// Senders of the largest blocks.
const MAX_SENDERS: usize = 500;

/// Whether the long run's full sizes are asked for.
fn wide() -> bool {
    std::env::var_os("STAVE_WIDE_BLOCKS").is_some()
}

/// Most transactions and senders of a block.
fn sizes() -> (usize, usize) {
    if wide() {
        (2_500, MAX_SENDERS)
    } else {
        (250, 100)
    }
}

/// The senders' signers, derived once.
fn signers() -> &'static [LocalSigner] {
    static SIGNERS: OnceLock<Vec<LocalSigner>> = OnceLock::new();
    SIGNERS.get_or_init(|| {
        (0..MAX_SENDERS as u64)
            .map(|i| {
                let secret =
                    keccak256([b"stave-differential".as_slice(), &i.to_be_bytes()].concat());
                LocalSigner::from_secret(&secret).expect("a keccak digest is a valid key")
            })
            .collect()
    })
}

/// A sender too poor for more than a transfer or two, one in seven.
fn poor(sender: usize) -> bool {
    sender % 7 == 3
}

/// The state before every block: the senders and the contracts.
fn state() -> &'static MemoryState {
    static STATE: OnceLock<MemoryState> = OnceLock::new();
    STATE.get_or_init(|| {
        let mut alloc = BTreeMap::new();
        for (i, signer) in signers().iter().enumerate() {
            let balance = if poor(i) { U256::from(60_000_000u64) } else { U256::from(100 * ETH) };
            alloc.insert(signer.address(), GenesisAccount::default().with_balance(balance));
        }
        let code = |hex: &str| Some(Bytes::from(hex::decode(hex).expect("hex")));
        // COINBASE BALANCE PUSH1 0 SSTORE COINBASE PUSH1 1 SSTORE STOP
        alloc.insert(COINBASE_PROBE, GenesisAccount::default().with_code(code("41316000554160015500")));
        // PUSH1 0 SLOAD PUSH1 1 ADD PUSH1 0 SSTORE STOP
        alloc.insert(COUNTER, GenesisAccount::default().with_code(code("60005460010160005500")));
        // CALLER SELFDESTRUCT
        alloc.insert(
            DESTRUCTIBLE,
            GenesisAccount::default()
                .with_code(code("33ff"))
                .with_balance(U256::from(ETH)),
        );
        // PUSH1 0 PUSH1 0 PUSH1 0 CREATE POP STOP
        alloc.insert(FACTORY, GenesisAccount::default().with_code(code("600060006000f05000")));
        alloc.insert(
            DEEP,
            GenesisAccount::default().with_code(code(
                "6000358060005580600e576030565b6001900360005260006000602060006000305af1506001546001016001556000355b600116603c5760006000fd5b00",
            )),
        );
        genesis_state(alloc)
    })
}

/// What a transaction does.
#[derive(Debug, Clone)]
enum Op {
    /// ETH to a fresh address.
    Transfer { to: u16 },
    /// ETH to the block's proposer.
    PayProposer,
    /// Reads the proposer and its balance.
    CoinbaseProbe,
    /// Writes the hot slot.
    Counter,
    /// Calls the contract that self-destructs.
    Destroy,
    /// Calls the factory.
    Factory,
    /// Deploys a contract whose constructor creates a child.
    CreateCreator,
    /// A call chain `depth` deep.
    Deep { depth: u8 },
}

/// The transaction's type and price.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Gas price, possibly below the base fee.
    Legacy { price: u8 },
    /// Gas price, with an access list naming the callee.
    Eip2930 { price: u8 },
    /// Priority fee (the fee cap is ample).
    Eip1559 { tip: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u16>().prop_map(|to| Op::Transfer { to }),
        1 => Just(Op::PayProposer),
        2 => Just(Op::CoinbaseProbe),
        2 => Just(Op::Counter),
        1 => Just(Op::Destroy),
        1 => Just(Op::Factory),
        1 => Just(Op::CreateCreator),
        1 => (0u8..24).prop_map(|depth| Op::Deep { depth }),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    let base = BASE_FEE as u8;
    prop_oneof![
        1 => (base - 1..base + 4).prop_map(|price| Kind::Legacy { price }),
        1 => (base..base + 4).prop_map(|price| Kind::Eip2930 { price }),
        2 => (0u8..4).prop_map(|tip| Kind::Eip1559 { tip }),
    ]
}

/// One transaction of a random block: its sender (an index), op, type, and whether the
/// sender skips a nonce before it.
type Planned = (usize, Op, Kind, bool);

fn block_strategy() -> impl Strategy<Value = (usize, bool, Vec<Planned>)> {
    let (txs, senders) = sizes();
    (1..=senders, any::<bool>()).prop_flat_map(move |(senders, proposer_sends)| {
        (
            Just(senders),
            Just(proposer_sends),
            prop::collection::vec(
                (0..senders, op(), kind(), prop::bool::weighted(0.02)),
                0..txs,
            ),
        )
    })
}

/// Signs the planned transactions, in order, for a block proposed by `proposer`.
fn sign(planned: &[Planned], proposer: Address) -> Vec<RecoveredTx> {
    let signers = signers();
    let mut nonces = vec![0u64; signers.len()];
    planned
        .iter()
        .map(|(sender, op, kind, skip)| {
            let nonce = &mut nonces[*sender];
            *nonce += u64::from(*skip);
            let n = *nonce;
            *nonce += 1;
            let (to, value, gas, input): (TxKind, u64, u64, Bytes) = match op {
                Op::Transfer { to } => {
                    let to = Address::with_last_byte(0xee).create(u64::from(*to));
                    (TxKind::Call(to), 1_000, 21_000, Bytes::new())
                }
                Op::PayProposer => (TxKind::Call(proposer), 5_000, 21_000, Bytes::new()),
                Op::CoinbaseProbe => (TxKind::Call(COINBASE_PROBE), 0, 100_000, Bytes::new()),
                Op::Counter => (TxKind::Call(COUNTER), 0, 60_000, Bytes::new()),
                Op::Destroy => (TxKind::Call(DESTRUCTIBLE), 0, 60_000, Bytes::new()),
                Op::Factory => (TxKind::Call(FACTORY), 0, 100_000, Bytes::new()),
                Op::CreateCreator => (
                    TxKind::Create,
                    0,
                    200_000,
                    Bytes::from_static(&[0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0xf0, 0x50, 0x00]),
                ),
                Op::Deep { depth } => (
                    TxKind::Call(DEEP),
                    0,
                    1_500_000,
                    B256::with_last_byte(*depth).0.to_vec().into(),
                ),
            };
            let value = U256::from(value);
            let unsigned = match *kind {
                Kind::Legacy { price } => TypedTransaction::Legacy(TxLegacy {
                    chain_id: Some(CHAIN_ID),
                    nonce: n,
                    gas_price: u128::from(price),
                    gas_limit: gas,
                    to,
                    value,
                    input,
                }),
                Kind::Eip2930 { price } => TypedTransaction::Eip2930(TxEip2930 {
                    chain_id: CHAIN_ID,
                    nonce: n,
                    gas_price: u128::from(price),
                    gas_limit: gas + 2_400,
                    to,
                    value,
                    access_list: AccessList(
                        to.to()
                            .map(|address| AccessListItem {
                                address: *address,
                                storage_keys: Vec::new(),
                            })
                            .into_iter()
                            .collect(),
                    ),
                    input,
                }),
                Kind::Eip1559 { tip } => TypedTransaction::Eip1559(TxEip1559 {
                    chain_id: CHAIN_ID,
                    nonce: n,
                    gas_limit: gas,
                    max_fee_per_gas: 1_000,
                    max_priority_fee_per_gas: u128::from(tip),
                    to,
                    value,
                    access_list: AccessList::default(),
                    input,
                }),
            };
            let signer = &signers[*sender];
            RecoveredTx {
                tx: signer.sign_tx(unsigned),
                sender: signer.address(),
            }
        })
        .collect()
}

/// Executors kept across cases, so each block starts on the spare maps of the ones
/// before.
fn executors() -> &'static [ParallelExecutor] {
    static EXECUTORS: OnceLock<Vec<ParallelExecutor>> = OnceLock::new();
    EXECUTORS.get_or_init(|| {
        [2, 8]
            .into_iter()
            .map(|threads| ParallelExecutor::new(threads).expect("threads"))
            .collect()
    })
}

fn check(proposer_sends: bool, planned: &[Planned]) {
    let proposer = if proposer_sends {
        signers()[planned.first().map_or(0, |(sender, ..)| *sender)].address()
    } else {
        PROPOSER
    };
    let txs = sign(planned, proposer);
    // Some blocks exceed it, so the block gas rule is exercised too.
    let header = Header {
        number: 1,
        timestamp: 1_700_000_000,
        proposer,
        gas_limit: 8_000_000 + 4_000 * planned.len() as u64,
        base_fee_per_gas: BASE_FEE,
        ..Header::default()
    };
    let env = BlockEnv::new(CHAIN_ID, &header);
    let input = |txs, mode| BlockInput::new(state(), env, txs, mode);
    let serial = execute_serial(input(&txs, Mode::Build)).expect("serial");
    let built: Vec<RecoveredTx> = serial.included.iter().map(|&i| txs[i].clone()).collect();
    let validated = execute_serial(input(&built, Mode::Validate)).expect("a built block is valid");
    assert_eq!(validated.diff, serial.diff);
    // The random block itself, received: refused (or not) alike.
    let received = execute_serial(input(&txs, Mode::Validate));
    for executor in executors() {
        let threads = executor.threads();
        let parallel = executor
            .execute(input(&txs, Mode::Build))
            .expect("parallel");
        assert_eq!(parallel, serial, "{threads} threads: building");
        let parallel = executor
            .execute(input(&built, Mode::Validate))
            .expect("valid");
        assert_eq!(parallel, validated, "{threads} threads: validating");
        let parallel = executor.execute(input(&txs, Mode::Validate));
        assert_eq!(parallel, received, "{threads} threads: the received block");
    }
}

proptest! {
    // `PROPTEST_CASES` (256 unless set) cases: see the module docs for the long run.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn parallel_equals_serial_on_wide_random_blocks(
        (_senders, proposer_sends, planned) in block_strategy()
    ) {
        check(proposer_sends, &planned);
    }
}

#[test]
fn contracts_see_the_fees_of_the_transactions_before_them_in_the_proposer_s_balance() {
    // Transfers paying tips, then probes of the proposer's balance: Ethereum credits each
    // fee as its transaction ends, so each probe sees every fee before it.
    let planned: Vec<Planned> = (0..200)
        .map(|i| {
            let op = if i % 50 == 49 {
                Op::CoinbaseProbe
            } else {
                Op::Transfer { to: i }
            };
            // Senders that are not poor.
            (usize::from(i % 40) * 7, op, Kind::Eip1559 { tip: 2 }, false)
        })
        .collect();
    check(false, &planned);
    let txs = sign(&planned, PROPOSER);
    let header = Header {
        number: 1,
        proposer: PROPOSER,
        gas_limit: 30_000_000,
        base_fee_per_gas: BASE_FEE,
        ..Header::default()
    };
    let outcome = execute_serial(BlockInput::new(
        state(),
        BlockEnv::new(CHAIN_ID, &header),
        &txs,
        Mode::Validate,
    ))
    .expect("valid");
    let probe = &outcome.diff.accounts[&COINBASE_PROBE];
    // The last probe (transaction 199) saw the fees of the 199 before it.
    let before = outcome.receipts[198].receipt.cumulative_gas_used;
    assert_eq!(
        probe.storage.get(&U256::ZERO),
        Some(&U256::from(2 * before))
    );
    assert_eq!(
        probe.storage.get(&U256::from(1)),
        Some(&U256::from_be_slice(PROPOSER.as_slice()))
    );
}

#[test]
fn a_probe_after_a_first_chunk_that_executed_nothing_sees_every_fee_before_it() {
    // The first chunk (run for real) executes nothing: its sender skipped a nonce, so it
    // never touches the proposer. The later chunks' transfers pay tips, and the probes
    // among them must see each of those fees, though the chunks' own runs left them to
    // the committer.
    let mut planned: Vec<Planned> = (0..150)
        .map(|i| (1, Op::Transfer { to: i }, Kind::Eip1559 { tip: 1 }, i == 0))
        .collect();
    planned.extend((0..150u16).map(|i| {
        let op = if i % 10 == 9 {
            Op::CoinbaseProbe
        } else {
            Op::Transfer { to: 1_000 + i }
        };
        (usize::from(i % 60) * 7, op, Kind::Eip1559 { tip: 3 }, false)
    }));
    for _ in 0..20 {
        check(false, &planned);
    }
}
