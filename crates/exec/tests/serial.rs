//! The serial executor on real transactions: transfers, the repo's ERC-20, reverts,
//! out-of-gas, self-destruct, contracts creating contracts, reads of state another tx in
//! the block changed, nonce order, the block gas limit, and the hints it gives the state
//! ahead of its reads.

mod support;

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use stave_exec::{
    AccountState, BlockEnv, BlockInput, ExecError, ExecutionOutcome, MemoryState, Mode, StateError,
    StateReader, execute_serial,
};
use stave_primitives::{RecoveredTx, dev::dev_account};
use stave_sdk::{
    contracts::{ERC20_TRANSFER_TOPIC, stave_token_balance_slot},
    erc20_transfer_calldata,
};
use support::*;

fn run(state: &MemoryState, txs: &[RecoveredTx]) -> ExecutionOutcome {
    execute_serial(input(state, &header(30_000_000), txs, Mode::Validate)).expect("valid block")
}

fn balance(state: &MemoryState, outcome: &ExecutionOutcome, address: Address) -> U256 {
    match outcome.diff.accounts.get(&address) {
        Some(change) => change.info.map_or(U256::ZERO, |info| info.balance),
        None => state
            .account(address)
            .expect("read")
            .map_or(U256::ZERO, |a| a.balance),
    }
}

#[test]
fn a_transfer_moves_value_charges_gas_and_credits_the_proposer_once() {
    let state = state();
    let to = Address::repeat_byte(0x55);
    let outcome = run(
        &state,
        &[
            tx(0, 0, TxKind::Call(to), ETH, 21_000, Bytes::new()),
            tx(1, 0, TxKind::Call(to), 2, 21_000, Bytes::new()),
        ],
    );
    assert_eq!(outcome.gas_used, 42_000);
    assert_eq!(outcome.receipts.len(), 2);
    assert_eq!(outcome.receipts[1].receipt.cumulative_gas_used, 42_000);
    assert_eq!(balance(&state, &outcome, to), U256::from(ETH + 2));
    let paid = U256::from(21_000 * (BASE_FEE + 1));
    assert_eq!(
        balance(&state, &outcome, dev_account(0).address),
        U256::from(99 * ETH) - paid
    );
    assert_eq!(outcome.fees, U256::from(42_000));
    assert_eq!(balance(&state, &outcome, PROPOSER), U256::from(42_000));
    let sender = outcome.diff.accounts[&dev_account(0).address]
        .info
        .expect("exists");
    assert_eq!(sender.nonce, 1);
}

fn erc20_transfer(to: Address, amount: u64) -> Bytes {
    erc20_transfer_calldata(to, U256::from(amount))
}

#[test]
fn an_erc20_transfer_moves_tokens_and_logs_it_and_an_overdraft_reverts() {
    let state = state();
    let to = Address::repeat_byte(0x66);
    let outcome = run(
        &state,
        &[
            tx(
                0,
                0,
                TxKind::Call(TOKEN),
                0,
                100_000,
                erc20_transfer(to, 30),
            ),
            // Account 1 holds 100 tokens: sending 101 reverts, the tx is still included.
            tx(
                1,
                0,
                TxKind::Call(TOKEN),
                0,
                100_000,
                erc20_transfer(to, 101),
            ),
        ],
    );
    let token = &outcome.diff.accounts[&TOKEN];
    let slot = |holder: Address| U256::from_be_bytes(stave_token_balance_slot(holder).0);
    assert_eq!(token.storage[&slot(dev_account(0).address)], U256::from(70));
    assert_eq!(token.storage[&slot(to)], U256::from(30));
    let first = &outcome.receipts[0];
    assert!(first.receipt.status.coerce_status());
    assert_eq!(first.receipt.logs.len(), 1);
    assert_eq!(first.receipt.logs[0].topics()[0], ERC20_TRANSFER_TOPIC);
    let second = &outcome.receipts[1];
    assert!(!second.receipt.status.coerce_status(), "overdraft reverts");
    assert!(second.receipt.logs.is_empty());
    assert_eq!(
        outcome.diff.accounts[&dev_account(1).address]
            .info
            .expect("exists")
            .nonce,
        1
    );
}

#[test]
fn running_out_of_gas_fails_the_tx_and_consumes_its_gas() {
    let state = state();
    let outcome = run(
        &state,
        &[tx(0, 0, TxKind::Call(SPINNER), 0, 50_000, Bytes::new())],
    );
    assert!(!outcome.receipts[0].receipt.status.coerce_status());
    assert_eq!(outcome.gas_used, 50_000);
}

#[test]
fn a_contract_self_destructing_in_its_creation_leaves_nothing_and_pays_out() {
    let state = state();
    let heir = Address::repeat_byte(0x77);
    // Initcode: PUSH20 heir, SELFDESTRUCT.
    let mut initcode = vec![0x73];
    initcode.extend_from_slice(heir.as_slice());
    initcode.push(0xff);
    let outcome = run(
        &state,
        &[tx(0, 0, TxKind::Create, 5, 100_000, initcode.into())],
    );
    assert!(outcome.receipts[0].receipt.status.coerce_status());
    let created = dev_account(0).address.create(0);
    assert!(
        outcome
            .diff
            .accounts
            .get(&created)
            .is_none_or(|c| c.info.is_none())
    );
    assert_eq!(balance(&state, &outcome, heir), U256::from(5));
}

#[test]
fn a_contract_can_create_a_contract() {
    let state = state();
    // Initcode: CREATE(value 0, offset 0, size 0), POP, STOP: a child with empty code.
    let initcode = Bytes::from_static(&[0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0xf0, 0x50, 0x00]);
    let outcome = run(&state, &[tx(0, 0, TxKind::Create, 0, 200_000, initcode)]);
    let parent = dev_account(0).address.create(0);
    let child = parent.create(1);
    assert_eq!(
        outcome.diff.accounts[&parent].info.expect("parent").nonce,
        2
    );
    assert_eq!(outcome.diff.accounts[&child].info.expect("child").nonce, 1);
}

#[test]
fn a_tx_reads_a_balance_an_earlier_tx_in_the_block_changed() {
    let state = state();
    let outcome = run(
        &state,
        &[
            tx(0, 0, TxKind::Call(TARGET), 12_345, 21_000, Bytes::new()),
            tx(1, 0, TxKind::Call(PROBE), 0, 100_000, Bytes::new()),
        ],
    );
    assert_eq!(
        outcome.diff.accounts[&PROBE].storage[&U256::ZERO],
        U256::from(12_345)
    );
}

#[test]
fn one_senders_txs_run_in_nonce_order_and_a_gap_is_invalid() {
    let state = state();
    let to = Address::repeat_byte(0x55);
    let in_order: Vec<_> = (0..3)
        .map(|n| tx(2, n, TxKind::Call(to), 1, 21_000, Bytes::new()))
        .collect();
    let outcome = run(&state, &in_order);
    assert_eq!(
        outcome.diff.accounts[&dev_account(2).address]
            .info
            .expect("exists")
            .nonce,
        3
    );

    let gap = [
        tx(2, 0, TxKind::Call(to), 1, 21_000, Bytes::new()),
        tx(2, 2, TxKind::Call(to), 1, 21_000, Bytes::new()),
    ];
    let err =
        execute_serial(input(&state, &header(30_000_000), &gap, Mode::Validate)).expect_err("gap");
    assert!(
        matches!(err, ExecError::InvalidTx { index: 1, .. }),
        "{err}"
    );
    let built =
        execute_serial(input(&state, &header(30_000_000), &gap, Mode::Build)).expect("builds");
    assert_eq!(built.included, vec![0]);
    assert_eq!(built.skipped[0].index, 1);
}

#[test]
fn the_block_gas_limit_is_enforced() {
    let state = state();
    let to = Address::repeat_byte(0x55);
    let txs: Vec<_> = (0..3)
        .map(|i| tx(i, 0, TxKind::Call(to), 1, 21_000, Bytes::new()))
        .collect();
    let err = execute_serial(input(&state, &header(50_000), &txs, Mode::Validate))
        .expect_err("over the limit");
    assert!(
        matches!(err, ExecError::InvalidTx { index: 2, .. }),
        "{err}"
    );
    let built = execute_serial(input(&state, &header(50_000), &txs, Mode::Build)).expect("builds");
    assert_eq!(built.included, vec![0, 1]);
}

#[test]
fn insufficient_balance_and_wrong_chain_id_are_invalid() {
    let state = state();
    let to = Address::repeat_byte(0x55);
    let rich = tx(0, 0, TxKind::Call(to), 1_000 * ETH, 21_000, Bytes::new());
    let err = execute_serial(input(&state, &header(30_000_000), &[rich], Mode::Validate))
        .expect_err("too poor");
    assert!(err.is_invalid_block());
    let ok = tx(0, 0, TxKind::Call(to), 1, 21_000, Bytes::new());
    let err = execute_serial(BlockInput::new(
        &state,
        BlockEnv::new(1, &header(30_000_000)),
        &[ok],
        Mode::Validate,
    ))
    .expect_err("other chain");
    assert!(matches!(err, ExecError::InvalidTx { index: 0, .. }));
}

/// A state that remembers what the executor told it: how many reads its block served, and
/// which accounts it hinted, among the accounts it read, in order (`true` for a hint).
#[derive(Default)]
struct Noting {
    state: MemoryState,
    noted: std::sync::atomic::AtomicU64,
    accounts: std::sync::Mutex<Vec<(bool, Address)>>,
}

impl Noting {
    fn on(state: MemoryState) -> Self {
        Self {
            state,
            ..Self::default()
        }
    }

    fn log(&self, hinted: bool, address: Address) {
        self.accounts
            .lock()
            .expect("not poisoned")
            .push((hinted, address));
    }
}

impl StateReader for Noting {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        self.log(false, address);
        self.state.account(address)
    }
    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        self.state.storage(address, slot)
    }
    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        self.state.code(code_hash)
    }
    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        self.state.block_hash(number)
    }
    fn note_block_reads(&self, reads: u64) {
        self.noted
            .fetch_add(reads, std::sync::atomic::Ordering::Relaxed);
    }
    fn prefetch_account(&self, address: Address) {
        self.log(true, address);
    }
}

#[test]
fn reads_the_block_itself_served_are_reported_to_the_state() {
    let noting = Noting::on(state());
    let to = Address::repeat_byte(0x56);
    let one = [tx(2, 0, TxKind::Call(to), 1, 21_000, Bytes::new())];
    // Three txs of one sender: the second and third read the sender (and the recipient)
    // as the first left them.
    let three: Vec<_> = (0..3)
        .map(|n| tx(2, n, TxKind::Call(to), 1, 21_000, Bytes::new()))
        .collect();
    let noted = |txs: &[RecoveredTx], parallel: bool| {
        noting.noted.store(0, std::sync::atomic::Ordering::Relaxed);
        let header = header(30_000_000);
        if parallel {
            stave_exec::ParallelExecutor::new(2)
                .expect("threads")
                .execute(input(&noting, &header, txs, Mode::Validate))
                .expect("runs");
        } else {
            execute_serial(input(&noting, &header, txs, Mode::Validate)).expect("runs");
        }
        noting.noted.load(std::sync::atomic::Ordering::Relaxed)
    };
    for parallel in [false, true] {
        let (alone, together) = (noted(&one, parallel), noted(&three, parallel));
        assert!(
            together >= alone + 2,
            "parallel {parallel}: {alone} then {together}"
        );
    }
}

#[test]
fn the_next_transaction_s_sender_and_recipient_are_hinted_before_they_are_read() {
    let state = Noting::on(state());
    let recipient = |i: u8| Address::repeat_byte(0x70 + i);
    let txs: Vec<RecoveredTx> = (0..3)
        .map(|i| {
            tx(
                i,
                0,
                TxKind::Call(recipient(i as u8)),
                1,
                21_000,
                Bytes::new(),
            )
        })
        .collect();
    execute_serial(input(&state, &header(30_000_000), &txs, Mode::Validate)).expect("valid block");
    let events = state.accounts.into_inner().expect("not poisoned");
    let first = |event: (bool, Address)| events.iter().position(|e| *e == event);
    for (i, tx) in txs.iter().enumerate().skip(1) {
        for address in [tx.sender, recipient(i as u8)] {
            let hinted = first((true, address)).expect("hinted");
            let read = first((false, address)).expect("read");
            assert!(hinted < read, "tx {i}: {address} read before it was hinted");
        }
    }
    // The first transaction runs before anything could be hinted.
    assert_eq!(first((true, txs[0].sender)), None);
}
