//! `simulate`: calls run as the transactions of simulated blocks (`eth_simulateV1`), each
//! on the state the calls and blocks before it left.

use std::time::{Duration, Instant};

use alloy_consensus::Transaction as _;
use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_rpc_types_eth::{
    BlockOverrides,
    simulate::{SimBlock, SimulatePayload},
};
use stave_exec::{
    AccountOverride, CallOutcome, InvalidCall, MemoryState, SimBounds, SimCall, SimFee,
    SimulatedBlock, SimulationError, StateOverride, StateReader, TIME_STEP, TRANSFER_LOG_EMITTER,
    TRANSFER_TOPIC, simulate,
};
use stave_primitives::{Header, dev::dev_account};
use stave_sdk::workload_genesis;

const CHAIN: u64 = 1337;
const BASE_FEE: u64 = 1_000_000_000;

/// A contract that stores its first calldata word in slot 0 when given one, then returns
/// slot 0.
const STORE_AND_READ: &str = "3615600b576000356000555b60005460005260206000f3";
/// Returns NUMBER and TIMESTAMP.
const NUMBER_AND_TIME: &str = "436000524260205260406000f3";
/// Reverts with the four bytes 0xdeadbeef.
const REVERTS: &str = "63deadbeef6000526004601cfd";
/// Returns the hash of the block before its own.
const PREVIOUS_HASH: &str = "600143034060005260206000f3";

fn code(hex: &str) -> Bytes {
    Bytes::from(hex::decode(hex).expect("hex"))
}

fn setup() -> (MemoryState, Header) {
    let state = MemoryState::from_genesis(&workload_genesis(CHAIN, 2, None));
    let parent = Header {
        number: 10,
        timestamp: 1_000,
        gas_limit: 30_000_000,
        base_fee_per_gas: BASE_FEE,
        proposer: Address::repeat_byte(0xc0),
        ..Header::default()
    };
    (state, parent)
}

fn bounds() -> SimBounds {
    SimBounds {
        max_blocks: 256,
        max_calls: 1_000,
        gas_cap: 50_000_000,
        deadline: Instant::now() + Duration::from_secs(30),
    }
}

/// `code` installed at `address`, as a state override.
fn with_code(address: Address, hex: &str) -> StateOverride {
    let mut overrides = StateOverride::default();
    overrides.insert(
        address,
        AccountOverride {
            code: Some(code(hex)),
            ..AccountOverride::default()
        },
    );
    overrides
}

fn call(to: Address, input: Bytes) -> SimCall {
    SimCall {
        to: Some(to),
        input,
        ..SimCall::default()
    }
}

fn word(value: u64) -> Bytes {
    Bytes::from(U256::from(value).to_be_bytes::<32>())
}

fn payload(blocks: Vec<SimBlock<SimCall>>) -> SimulatePayload<SimCall> {
    SimulatePayload {
        block_state_calls: blocks,
        ..SimulatePayload::default()
    }
}

fn run(
    state: &MemoryState,
    parent: &Header,
    payload: &SimulatePayload<SimCall>,
) -> Result<Vec<SimulatedBlock>, SimulationError> {
    simulate(state, parent, CHAIN, payload, bounds())
}

fn output(block: &SimulatedBlock, index: usize) -> &Bytes {
    match &block.calls[index].outcome {
        CallOutcome::Success { output, .. } => output,
        other => panic!("call {index} did not succeed: {other:?}"),
    }
}

#[test]
fn a_call_sees_the_storage_the_call_before_it_wrote_and_a_block_the_block_before() {
    let (state, parent) = setup();
    let contract = Address::repeat_byte(0x51);
    let blocks = vec![
        SimBlock {
            state_overrides: Some(with_code(contract, STORE_AND_READ)),
            calls: vec![
                call(contract, word(42)),
                call(contract, Bytes::new()),
                call(contract, word(43)),
            ],
            ..SimBlock::default()
        },
        SimBlock {
            calls: vec![call(contract, Bytes::new())],
            ..SimBlock::default()
        },
    ];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    assert_eq!(simulated.len(), 2);
    assert_eq!(output(&simulated[0], 0), &word(42));
    assert_eq!(
        output(&simulated[0], 1),
        &word(42),
        "the second call sees the first's write"
    );
    assert_eq!(output(&simulated[0], 2), &word(43));
    assert_eq!(
        output(&simulated[1], 0),
        &word(43),
        "block 2 sees block 1's state"
    );
    // Nothing is written to the state simulated on.
    assert_eq!(state.account(contract).expect("reads"), None);

    // The blocks chain: numbers and timestamps step, hashes link, gas adds up.
    let (first, second) = (&simulated[0].header, &simulated[1].header);
    assert_eq!((first.number, second.number), (11, 12));
    assert_eq!(first.timestamp, parent.timestamp + TIME_STEP);
    assert_eq!(second.timestamp, first.timestamp + TIME_STEP);
    assert_eq!(first.parent_hash, parent.hash_slow());
    assert_eq!(second.parent_hash, simulated[0].hash);
    assert_eq!(simulated[0].hash, first.hash_slow());
    assert_eq!(first.proposer, parent.proposer);
    assert_eq!(first.gas_limit, parent.gas_limit);
    assert_eq!(first.base_fee_per_gas, 0, "no base fee without validation");
    let used: u64 = simulated[0]
        .calls
        .iter()
        .map(|call| match call.outcome {
            CallOutcome::Success { gas_used, .. } => gas_used,
            _ => unreachable!(),
        })
        .sum();
    assert_eq!(first.gas_used, used);
    assert_eq!(
        simulated[0].receipts[2].receipt.cumulative_gas_used, used,
        "receipts count the block's gas"
    );
    assert_eq!(simulated[0].txs.len(), 3);
    assert_ne!(
        simulated[0].txs[0].0.hash(),
        simulated[0].txs[1].0.hash(),
        "each call is its own transaction"
    );
    assert_ne!(first.state_root, parent.state_root);
}

#[test]
fn block_overrides_set_number_and_time_and_gaps_are_filled() {
    let (state, parent) = setup();
    let probe = Address::repeat_byte(0x52);
    let blocks = vec![SimBlock {
        block_overrides: Some(BlockOverrides {
            number: Some(U256::from(parent.number + 4)),
            time: Some(5_000),
            coinbase: Some(Address::repeat_byte(0xcb)),
            ..BlockOverrides::default()
        }),
        state_overrides: Some(with_code(probe, NUMBER_AND_TIME)),
        calls: vec![call(probe, Bytes::new())],
    }];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    // Three empty blocks fill the gap, each TIME_STEP after the one before.
    assert_eq!(simulated.len(), 4);
    for (i, block) in simulated[..3].iter().enumerate() {
        assert_eq!(block.header.number, parent.number + 1 + i as u64);
        assert_eq!(
            block.header.timestamp,
            parent.timestamp + TIME_STEP * (1 + i as u64)
        );
        assert!(block.calls.is_empty() && block.txs.is_empty());
    }
    let last = &simulated[3];
    assert_eq!(
        (last.header.number, last.header.timestamp),
        (parent.number + 4, 5_000)
    );
    assert_eq!(last.header.proposer, Address::repeat_byte(0xcb));
    let mut expected = word(parent.number + 4).to_vec();
    expected.extend_from_slice(&word(5_000));
    assert_eq!(output(last, 0).as_ref(), expected.as_slice());
}

#[test]
fn blockhash_reads_the_simulated_blocks_and_overrides_replace_earlier_blocks_state() {
    let (state, parent) = setup();
    let (probe, store) = (Address::repeat_byte(0x53), Address::repeat_byte(0x54));
    let mut first = with_code(probe, PREVIOUS_HASH);
    first.extend(with_code(store, STORE_AND_READ));
    let mut replaced = StateOverride::default();
    replaced.insert(
        store,
        AccountOverride {
            state_diff: Some(
                [(B256::ZERO, B256::from(U256::from(7)))]
                    .into_iter()
                    .collect(),
            ),
            ..AccountOverride::default()
        },
    );
    let blocks = vec![
        SimBlock {
            state_overrides: Some(first),
            calls: vec![call(store, word(5))],
            ..SimBlock::default()
        },
        SimBlock {
            state_overrides: Some(replaced),
            calls: vec![call(probe, Bytes::new()), call(store, Bytes::new())],
            ..SimBlock::default()
        },
    ];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    assert_eq!(
        output(&simulated[1], 0).as_ref(),
        simulated[0].hash.as_slice()
    );
    assert_eq!(
        output(&simulated[1], 1),
        &word(7),
        "block 2's override wins over block 1's write"
    );
}

#[test]
fn a_revert_keeps_its_data_and_the_next_call_still_runs() {
    let (state, parent) = setup();
    let (reverts, store) = (Address::repeat_byte(0x55), Address::repeat_byte(0x56));
    let mut overrides = with_code(reverts, REVERTS);
    overrides.extend(with_code(store, STORE_AND_READ));
    let blocks = vec![SimBlock {
        state_overrides: Some(overrides),
        calls: vec![call(reverts, Bytes::new()), call(store, word(9))],
        ..SimBlock::default()
    }];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    let block = &simulated[0];
    let CallOutcome::Revert {
        output: data,
        gas_used,
    } = &block.calls[0].outcome
    else {
        panic!("{:?}", block.calls[0].outcome);
    };
    assert_eq!(data.as_ref(), [0xde, 0xad, 0xbe, 0xef]);
    assert!(*gas_used > 21_000);
    assert!(block.calls[0].logs.is_empty());
    assert!(!block.receipts[0].receipt.status.coerce_status());
    assert!(block.receipts[1].receipt.status.coerce_status());
    assert_eq!(output(block, 1), &word(9));

    // A halt: out of gas, in go-ethereum's words.
    let starved = SimCall {
        gas: Some(25_000),
        ..call(store, word(1))
    };
    let blocks = vec![SimBlock {
        state_overrides: Some(with_code(store, STORE_AND_READ)),
        calls: vec![starved],
        ..SimBlock::default()
    }];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    assert_eq!(
        simulated[0].calls[0].outcome,
        CallOutcome::Halt {
            reason: "out of gas".into(),
            gas_used: 25_000
        }
    );
}

#[test]
fn validation_checks_nonces_fees_and_funds_and_without_it_calls_are_free() {
    let (state, parent) = setup();
    let sender = dev_account(0).address;
    let broke = Address::repeat_byte(0x99);
    let to = Address::repeat_byte(0x57);
    let send = |from, nonce, fee| SimCall {
        from,
        to: Some(to),
        nonce,
        fee,
        value: U256::from(1),
        ..SimCall::default()
    };
    let paying = SimFee::Dynamic {
        max_fee: 2 * u128::from(BASE_FEE),
        priority_fee: 5,
    };
    let one = |call: SimCall, validation: bool| {
        let payload = SimulatePayload {
            validation,
            ..payload(vec![SimBlock {
                calls: vec![call],
                ..SimBlock::default()
            }])
        };
        run(&state, &parent, &payload)
    };
    let kind = |result: Result<Vec<SimulatedBlock>, SimulationError>| match result {
        Err(SimulationError::InvalidCall { kind, message }) => (kind, message),
        other => panic!("not refused: {other:?}"),
    };

    // Without validation: any nonce, no fee, at a base fee of zero.
    let free = one(send(sender, Some(77), SimFee::default()), false).expect("simulates");
    assert!(matches!(
        free[0].calls[0].outcome,
        CallOutcome::Success { .. }
    ));
    assert_eq!(free[0].txs[0].0.envelope().nonce(), 77);
    // The sender still needs the value it sends.
    let (refused, message) = kind(one(send(broke, None, SimFee::default()), false));
    assert_eq!(refused, InvalidCall::InsufficientFunds);
    assert!(
        message.starts_with("insufficient funds for gas * price + value"),
        "{message}"
    );

    // With validation: the base fee is the parent's and must be paid.
    let (refused, message) = kind(one(send(sender, None, SimFee::default()), true));
    assert_eq!(refused, InvalidCall::FeeCapTooLow);
    assert!(
        message.contains("max fee per gas less than block base fee"),
        "{message}"
    );
    let (refused, message) = kind(one(send(sender, Some(3), paying), true));
    assert_eq!(refused, InvalidCall::NonceTooHigh);
    assert!(message.starts_with("nonce too high"), "{message}");
    let (refused, _) = kind(one(send(broke, None, paying), true));
    assert_eq!(refused, InvalidCall::InsufficientFunds);
    let paid = one(send(sender, None, paying), true).expect("simulates");
    assert_eq!(paid[0].header.base_fee_per_gas, BASE_FEE);
    assert!(matches!(
        paid[0].calls[0].outcome,
        CallOutcome::Success {
            gas_used: 21_000,
            ..
        }
    ));
    // The nonce advances from call to call, and a repeated one is refused.
    let twice = SimulatePayload {
        validation: true,
        ..payload(vec![SimBlock {
            calls: vec![send(sender, None, paying), send(sender, None, paying)],
            ..SimBlock::default()
        }])
    };
    let ran = run(&state, &parent, &twice).expect("simulates");
    assert_eq!(ran[0].txs[1].0.envelope().nonce(), 1);
    let stale = SimulatePayload {
        validation: true,
        ..payload(vec![SimBlock {
            calls: vec![send(sender, Some(0), paying), send(sender, Some(0), paying)],
            ..SimBlock::default()
        }])
    };
    let (refused, _) = kind(run(&state, &parent, &stale));
    assert_eq!(refused, InvalidCall::NonceTooLow);
    // Too little gas to start is refused, not halted.
    let (refused, _) = kind(one(
        SimCall {
            gas: Some(20_000),
            ..send(sender, None, SimFee::default())
        },
        false,
    ));
    assert_eq!(refused, InvalidCall::IntrinsicGas);
}

#[test]
fn a_sender_with_code_may_call() {
    let (state, parent) = setup();
    let wallet = Address::repeat_byte(0x58);
    let mut overrides = with_code(wallet, STORE_AND_READ);
    overrides.get_mut(&wallet).expect("there").balance = Some(U256::from(10));
    let blocks = vec![SimBlock {
        state_overrides: Some(overrides),
        calls: vec![SimCall {
            from: wallet,
            value: U256::from(3),
            ..call(Address::repeat_byte(0x59), Bytes::new())
        }],
        ..SimBlock::default()
    }];
    let simulated = run(&state, &parent, &payload(blocks)).expect("simulates");
    assert!(matches!(
        simulated[0].calls[0].outcome,
        CallOutcome::Success { .. }
    ));
}

#[test]
fn transfers_are_traced_as_logs_where_they_happen_and_dropped_with_a_reverted_frame() {
    let (state, parent) = setup();
    let sender = dev_account(0).address;
    let (forwarder, sink, reverter, guarded) = (
        Address::repeat_byte(0x61),
        Address::repeat_byte(0x62),
        Address::repeat_byte(0x63),
        Address::repeat_byte(0x64),
    );
    // PUSH1 0 x4, CALLVALUE, PUSH20 target, GAS, CALL, POP, STOP: passes its value on.
    let forward_to =
        |target: Address| format!("60006000600060003473{}5af15000", hex::encode(target));
    let mut overrides = with_code(forwarder, &forward_to(sink));
    overrides.extend(with_code(reverter, "60006000fd"));
    overrides.extend(with_code(guarded, &forward_to(reverter)));
    let value = U256::from(1_000);
    let blocks = vec![SimBlock {
        state_overrides: Some(overrides),
        calls: vec![
            SimCall {
                from: sender,
                value,
                ..call(forwarder, Bytes::new())
            },
            SimCall {
                from: sender,
                value,
                ..call(guarded, Bytes::new())
            },
        ],
        ..SimBlock::default()
    }];
    let traced = SimulatePayload {
        trace_transfers: true,
        ..payload(blocks.clone())
    };
    let simulated = run(&state, &parent, &traced).expect("simulates");
    let transfer = |from: Address, to: Address| {
        (
            TRANSFER_LOG_EMITTER,
            vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
            Bytes::from(value.to_be_bytes::<32>()),
        )
    };
    let logs = |index: usize| {
        simulated[0].calls[index]
            .logs
            .iter()
            .map(|log| (log.address, log.topics().to_vec(), log.data.data.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        logs(0),
        vec![transfer(sender, forwarder), transfer(forwarder, sink)]
    );
    // The inner call reverted: its transfer is gone, the outer one stays.
    assert_eq!(logs(1), vec![transfer(sender, guarded)]);
    // Receipts hold the EVM's logs only.
    assert!(simulated[0].receipts[0].receipt.logs.is_empty());
    // Untraced, the same calls log nothing.
    let plain = run(&state, &parent, &payload(blocks)).expect("simulates");
    assert!(plain[0].calls.iter().all(|call| call.logs.is_empty()));
    assert_eq!(plain[0].hash, simulated[0].hash, "tracing changes no block");
}

#[test]
fn hostile_chains_and_oversized_requests_are_refused() {
    let (state, parent) = setup();
    let at = |number: Option<u64>, time: Option<u64>| SimBlock::<SimCall> {
        block_overrides: Some(BlockOverrides {
            number: number.map(U256::from),
            time,
            ..BlockOverrides::default()
        }),
        ..SimBlock::default()
    };
    let refused = |blocks: Vec<SimBlock<SimCall>>| {
        run(&state, &parent, &payload(blocks)).expect_err("refused")
    };
    assert!(matches!(refused(vec![]), SimulationError::Empty));
    assert!(matches!(
        refused(vec![at(Some(parent.number), None)]),
        SimulationError::BlockNumber { parent: 10, .. }
    ));
    assert!(matches!(
        refused(vec![at(Some(20), None), at(Some(15), None)]),
        SimulationError::BlockNumber { parent: 20, .. }
    ));
    assert!(matches!(
        refused(vec![at(None, Some(parent.timestamp))]),
        SimulationError::BlockTimestamp {
            got: 1_000,
            parent: 1_000
        }
    ));
    // A number far ahead would mean millions of filler blocks: refused before any is made.
    assert!(matches!(
        refused(vec![at(Some(u64::MAX), None)]),
        SimulationError::TooManyBlocks
    ));
    let huge = SimBlock::<SimCall> {
        block_overrides: Some(BlockOverrides {
            number: Some(U256::MAX),
            ..BlockOverrides::default()
        }),
        ..SimBlock::default()
    };
    assert!(matches!(
        refused(vec![huge]),
        SimulationError::TooManyBlocks
    ));
    assert!(matches!(
        refused(vec![at(Some(parent.number + 257), None)]),
        SimulationError::TooManyBlocks
    ));
    assert_eq!(
        run(
            &state,
            &parent,
            &payload(vec![at(Some(parent.number + 256), None)])
        )
        .expect("at the limit")
        .len(),
        256
    );
    assert!(matches!(
        refused(vec![SimBlock::default(); 257]),
        SimulationError::TooManyBlocks
    ));
    let many_calls = SimBlock {
        calls: vec![SimCall::default(); 1_001],
        ..SimBlock::default()
    };
    assert!(matches!(
        refused(vec![many_calls]),
        SimulationError::TooManyCalls {
            calls: 1_001,
            max: 1_000
        }
    ));
    // A call asking for more gas than the block has.
    let greedy = SimBlock {
        calls: vec![SimCall {
            gas: Some(parent.gas_limit + 1),
            ..SimCall::default()
        }],
        ..SimBlock::default()
    };
    assert!(matches!(
        refused(vec![greedy]),
        SimulationError::BlockGasLimit { .. }
    ));
    // Overrides the chain has no field for.
    let blobs = SimBlock::<SimCall> {
        block_overrides: Some(BlockOverrides {
            blob_base_fee: Some(U256::from(1)),
            ..BlockOverrides::default()
        }),
        ..SimBlock::default()
    };
    assert!(matches!(refused(vec![blobs]), SimulationError::Override(_)));
}

#[test]
fn the_gas_budget_and_the_deadline_bound_the_whole_simulation() {
    let (state, parent) = setup();
    // JUMPDEST PUSH1 0 JUMP: loops until out of gas.
    let looping = Address::repeat_byte(0x65);
    let blocks = vec![
        SimBlock {
            state_overrides: Some(with_code(looping, "5b600056")),
            calls: vec![call(looping, Bytes::new())],
            ..SimBlock::default()
        },
        SimBlock {
            calls: vec![call(looping, Bytes::new())],
            ..SimBlock::default()
        },
    ];
    let tight = SimBounds {
        gas_cap: 1_000_000,
        ..bounds()
    };
    let simulated = simulate(
        &state,
        &parent,
        CHAIN,
        &payload(blocks[..1].to_vec()),
        tight,
    )
    .expect("simulates");
    // The call's gas is cut to the budget, and it spends it all.
    let CallOutcome::Halt { reason, gas_used } = &simulated[0].calls[0].outcome else {
        panic!("{:?}", simulated[0].calls[0].outcome);
    };
    assert_eq!(*gas_used, 1_000_000);
    assert_eq!(
        reason,
        "out of gas (gas limit was capped by the RPC server's global gas cap)"
    );
    // The budget is for all blocks together: a later call gets none, too little to start.
    assert!(matches!(
        simulate(&state, &parent, CHAIN, &payload(blocks.clone()), tight),
        Err(SimulationError::InvalidCall {
            kind: InvalidCall::IntrinsicGas,
            ..
        })
    ));

    // A deadline already past stops it before any call runs.
    let late = SimBounds {
        deadline: Instant::now(),
        ..bounds()
    };
    assert!(matches!(
        simulate(&state, &parent, CHAIN, &payload(blocks), late),
        Err(SimulationError::TimedOut)
    ));
}
