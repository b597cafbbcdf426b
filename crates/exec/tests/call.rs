//! `call`: unsigned message calls that read state and keep nothing.

use alloy_primitives::{Address, Bytes, U256};
use stave_exec::{BlockEnv, CallOutcome, CallRequest, MemoryState, StateReader, call};
use stave_primitives::{Header, dev::dev_account};
use stave_sdk::{erc20_transfer_calldata, workload_genesis};

const CHAIN: u64 = 1337;

fn setup() -> (MemoryState, Address, Header) {
    let token = Address::repeat_byte(0x70);
    let state = MemoryState::from_genesis(&workload_genesis(CHAIN, 2, Some(token)));
    let header = Header {
        number: 1,
        gas_limit: 30_000_000,
        base_fee_per_gas: 1_000_000_000,
        ..Header::default()
    };
    (state, token, header)
}

fn balance_of_calldata(holder: Address) -> Bytes {
    // balanceOf(address)
    let mut input = vec![0x70, 0xa0, 0x82, 0x31];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(holder.as_slice());
    input.into()
}

#[test]
fn a_view_call_returns_state_and_a_transfer_call_keeps_nothing() {
    let (state, token, header) = setup();
    let holder = dev_account(0).address;
    let read = call(
        &state,
        BlockEnv::new(CHAIN, &header),
        &CallRequest {
            to: Some(token),
            gas: 100_000,
            input: balance_of_calldata(holder),
            ..CallRequest::default()
        },
    )
    .expect("runs");
    let CallOutcome::Success { output, gas_used } = read else {
        panic!("balanceOf failed: {read:?}");
    };
    let thousand_tokens = U256::from(1_000u64) * U256::from(10u64).pow(U256::from(18));
    assert_eq!(U256::from_be_slice(&output), thousand_tokens);
    assert!(gas_used > 21_000 && gas_used < 100_000, "{gas_used}");

    // A transfer from the holder succeeds as a call, and changes nothing.
    let send = CallRequest {
        from: holder,
        to: Some(token),
        gas: 100_000,
        input: erc20_transfer_calldata(Address::repeat_byte(1), U256::from(5)),
        ..CallRequest::default()
    };
    assert!(matches!(
        call(&state, BlockEnv::new(CHAIN, &header), &send),
        Ok(CallOutcome::Success { .. })
    ));
    assert_eq!(
        state.account(holder).expect("reads").expect("exists").nonce,
        0
    );

    // More tokens than the holder has: the contract reverts.
    let too_much = CallRequest {
        input: erc20_transfer_calldata(Address::repeat_byte(1), thousand_tokens + U256::from(1)),
        ..send.clone()
    };
    assert!(matches!(
        call(&state, BlockEnv::new(CHAIN, &header), &too_much),
        Ok(CallOutcome::Revert { .. })
    ));

    // Sending more ETH than the caller has cannot start.
    let broke = CallRequest {
        from: Address::repeat_byte(0x99),
        to: Some(holder),
        gas: 21_000,
        value: U256::from(1),
        ..CallRequest::default()
    };
    assert!(matches!(
        call(&state, BlockEnv::new(CHAIN, &header), &broke),
        Ok(CallOutcome::Invalid(_))
    ));

    // Too little gas halts.
    let starved = CallRequest {
        gas: 30_000,
        ..send
    };
    assert!(matches!(
        call(&state, BlockEnv::new(CHAIN, &header), &starved),
        Ok(CallOutcome::Halt { .. })
    ));
}

/// Installs `code` at `address` in `state`.
fn deploy(state: &mut MemoryState, address: Address, code: Vec<u8>) {
    let code = Bytes::from(code);
    let hash = alloy_primitives::keccak256(&code);
    let mut diff = stave_exec::StateDiff::default();
    diff.accounts.insert(
        address,
        stave_exec::AccountDiff {
            info: Some(stave_exec::AccountState {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: hash,
            }),
            ..Default::default()
        },
    );
    diff.codes.insert(hash, code);
    state.apply(&diff);
}

#[test]
fn a_deadline_stops_a_call_that_gas_would_let_run_for_minutes() {
    use std::time::{Duration, Instant};

    let (mut state, token, header) = setup();
    // JUMPDEST PUSH1 0 JUMP: 12 gas a round, forever.
    let looping = Address::repeat_byte(0x10);
    deploy(&mut state, looping, vec![0x5b, 0x60, 0x00, 0x56]);
    // CALL the looping contract with all gas, then loop itself: the outer frame must stop
    // too once the inner one is cut off.
    let mut outer_code = vec![
        0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0x73,
    ];
    outer_code.extend_from_slice(looping.as_slice());
    outer_code.extend_from_slice(&[0x5a, 0xf1, 0x50]); // GAS CALL POP
    let loop_start = outer_code.len() as u8;
    outer_code.extend_from_slice(&[0x5b, 0x60, loop_start, 0x56]);
    let outer = Address::repeat_byte(0x11);
    deploy(&mut state, outer, outer_code);

    // A trillion gas: minutes of looping without the deadline.
    let endless = |to| CallRequest {
        to: Some(to),
        gas: 1_000_000_000_000,
        ..CallRequest::default()
    };
    for to in [looping, outer] {
        let start = Instant::now();
        let outcome = stave_exec::call_until(
            &state,
            BlockEnv::new(CHAIN, &header),
            &endless(to),
            Instant::now() + Duration::from_millis(200),
        )
        .expect("runs");
        assert_eq!(outcome, CallOutcome::TimedOut, "{to}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
    // Without a deadline the gas limit still ends it.
    let bounded = CallRequest {
        to: Some(looping),
        gas: 100_000,
        ..CallRequest::default()
    };
    assert!(matches!(
        call(&state, BlockEnv::new(CHAIN, &header), &bounded).expect("runs"),
        CallOutcome::Halt { .. }
    ));
    // A call well within its deadline answers as usual, and the thread carries nothing
    // over to the next call.
    let read = CallRequest {
        to: Some(token),
        gas: 100_000,
        input: balance_of_calldata(dev_account(0).address),
        ..CallRequest::default()
    };
    let far = Instant::now() + Duration::from_secs(60);
    let outcome =
        stave_exec::call_until(&state, BlockEnv::new(CHAIN, &header), &read, far).expect("runs");
    assert!(
        matches!(outcome, CallOutcome::Success { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        call(&state, BlockEnv::new(CHAIN, &header), &read).expect("runs"),
        outcome
    );
}
