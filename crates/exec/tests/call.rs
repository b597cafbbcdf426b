//! `call`: unsigned message calls that read state and keep nothing.

use alloy_primitives::{Address, Bytes, U256};
use stave_exec::{CallOutcome, CallRequest, MemoryState, StateReader, call};
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
        CHAIN,
        &header,
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
        call(&state, CHAIN, &header, &send),
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
        call(&state, CHAIN, &header, &too_much),
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
        call(&state, CHAIN, &header, &broke),
        Ok(CallOutcome::Invalid(_))
    ));

    // Too little gas halts.
    let starved = CallRequest {
        gas: 30_000,
        ..send
    };
    assert!(matches!(
        call(&state, CHAIN, &header, &starved),
        Ok(CallOutcome::Halt { .. })
    ));
}
