//! A genesis with funded dev accounts, the repo's ERC-20 and a few probe contracts, and a
//! signer for test transactions.
#![allow(dead_code)] // each test binary uses its own part of the fixture

use std::collections::BTreeMap;

use alloy_consensus::{TxEip1559, TypedTransaction};
use alloy_genesis::{ChainConfig, Genesis, GenesisAccount};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use stave_exec::{BlockEnv, BlockInput, MemoryState, Mode, StateReader};
use stave_primitives::{ChainSpec, Header, RecoveredTx, dev::dev_account};
use stave_sdk::{
    LocalSigner,
    contracts::{stave_token_balance_slot, stave_token_runtime},
};

pub const CHAIN_ID: u64 = 1337;
pub const BASE_FEE: u64 = 7;
pub const PROPOSER: Address = Address::repeat_byte(0xb0);
pub const TOKEN: Address = Address::repeat_byte(0x70);
/// Stores BALANCE(TARGET) into slot 0 when called.
pub const PROBE: Address = Address::repeat_byte(0x91);
pub const TARGET: Address = Address::repeat_byte(0x42);
/// Loops forever.
pub const SPINNER: Address = Address::repeat_byte(0x92);
/// Funded dev accounts 0..SENDERS.
pub const SENDERS: u64 = 8;
pub const ETH: u128 = 1_000_000_000_000_000_000;

/// `txs` as a block under `header` on `state`, on the test chain.
pub fn input<'a>(
    state: &'a dyn StateReader,
    header: &'a Header,
    txs: &'a [RecoveredTx],
    mode: Mode,
) -> BlockInput<'a> {
    BlockInput::new(state, BlockEnv::new(CHAIN_ID, header), txs, mode)
}

pub fn probe_code() -> Bytes {
    // PUSH20 TARGET, BALANCE, PUSH1 0, SSTORE, STOP
    let mut code = vec![0x73];
    code.extend_from_slice(TARGET.as_slice());
    code.extend_from_slice(&[0x31, 0x60, 0x00, 0x55, 0x00]);
    code.into()
}

pub fn state() -> MemoryState {
    let mut alloc = BTreeMap::new();
    for i in 0..SENDERS {
        alloc.insert(
            dev_account(i).address,
            GenesisAccount::default().with_balance(U256::from(100 * ETH)),
        );
    }
    let token_storage = (0..SENDERS)
        .map(|i| {
            (
                stave_token_balance_slot(dev_account(i).address),
                B256::with_last_byte(100),
            )
        })
        .collect();
    alloc.insert(
        TOKEN,
        GenesisAccount::default()
            .with_code(Some(stave_token_runtime()))
            .with_storage(Some(token_storage)),
    );
    alloc.insert(
        PROBE,
        GenesisAccount::default().with_code(Some(probe_code())),
    );
    alloc.insert(
        SPINNER,
        GenesisAccount::default().with_code(Some(Bytes::from_static(&[0x5b, 0x60, 0x00, 0x56]))),
    );
    genesis_state(alloc)
}

/// The state of a test-chain genesis allocating `alloc`.
pub fn genesis_state(alloc: BTreeMap<Address, GenesisAccount>) -> MemoryState {
    let genesis = Genesis {
        config: ChainConfig {
            chain_id: CHAIN_ID,
            ..Default::default()
        },
        gas_limit: 30_000_000,
        alloc,
        ..Default::default()
    };
    MemoryState::from_genesis(&ChainSpec::from_genesis(genesis).expect("valid genesis"))
}

pub fn header(gas_limit: u64) -> Header {
    Header {
        number: 1,
        timestamp: 1_700_000_000,
        proposer: PROPOSER,
        gas_limit,
        base_fee_per_gas: BASE_FEE,
        ..Header::default()
    }
}

/// Signs an EIP-1559 tx from dev account `from` (tip 1 wei/gas).
pub fn tx(
    from: u64,
    nonce: u64,
    to: TxKind,
    value: u128,
    gas_limit: u64,
    input: Bytes,
) -> RecoveredTx {
    let signer = LocalSigner::from_secret(&dev_account(from).secret).expect("key");
    let unsigned = TypedTransaction::Eip1559(TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit,
        max_fee_per_gas: 1_000,
        max_priority_fee_per_gas: 1,
        to,
        value: U256::from(value),
        access_list: Default::default(),
        input,
    });
    RecoveredTx {
        tx: signer.sign_tx(unsigned),
        sender: signer.address(),
    }
}
