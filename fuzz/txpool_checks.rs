//! The property the txpool fuzz target checks, shared with
//! `crates/txpool/tests/fuzz_corpus.rs`, which replays the checked-in corpus under
//! `cargo test`: any sequence of pool operations (admissions from a few senders with
//! arbitrary nonces, fees and values; selections; blocks that include selected
//! transactions and other spends; discards) leaves the pool consistent. After every
//! operation: nothing panicked, the pool's own invariants hold (indexes and counts agree,
//! caps hold), each sender's pending transactions are consecutive from its account nonce
//! and its balance covers them together, and a selection holds only pending transactions.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use stave_primitives::{
    AccountDiff, AccountState, Address, ChainSpec, DEFAULT_BASE_FEE, MemoryState, RecoveredTx,
    SignedTx, StateDiff, StateReader, U256, dev::dev_account,
};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_txpool::{DropReason, PoolConfig, TxPool};
use stave_verify::SenderCache;

const CHAIN: u64 = 1337;
const SENDERS: u64 = 4;
const GAS: u64 = 21_000;
const MAX_TXS: usize = 12;
const MAX_PER_SENDER: usize = 6;

/// What a transfer's gas may cost at the base fee: the unit fees, values and balances are
/// counted in, so that a few transactions exhaust a balance.
fn unit() -> U256 {
    U256::from(GAS) * U256::from(DEFAULT_BASE_FEE)
}

/// The pool under test, the committed state it reads and the senders' keys.
struct Harness {
    pool: TxPool,
    state: MemoryState,
    signers: Vec<LocalSigner>,
}

impl Harness {
    fn new() -> Self {
        let mut config = PoolConfig::new(CHAIN, GAS * 8);
        config.max_txs = MAX_TXS;
        config.max_per_sender = MAX_PER_SENDER;
        config.max_nonce_gap = 4;
        // Expiry reads the clock; an hour keeps every run of an input the same.
        config.queued_lifetime = Duration::from_secs(3600);
        let pool = TxPool::new(config, Arc::new(SenderCache::new(256)));
        let mut state = MemoryState::from_genesis(&ChainSpec::dev(CHAIN, SENDERS));
        let signers = (0..SENDERS)
            .map(|i| LocalSigner::from_secret(&dev_account(i).secret).expect("dev key"))
            .collect::<Vec<_>>();
        for signer in &signers {
            set(&mut state, signer.address(), 0, unit() * U256::from(8));
        }
        Self {
            pool,
            state,
            signers,
        }
    }

    fn account(&self, address: Address) -> AccountState {
        self.state
            .account(address)
            .expect("memory state")
            .unwrap_or(AccountState::EMPTY)
    }

    /// A transfer from sender `from % SENDERS` with nonce `nonce(account nonce)`: fee cap
    /// 1-4 base fees, tip 0-3 wei, value 0-3 units.
    fn transfer(
        &self,
        from: u8,
        nonce: impl FnOnce(u64) -> u64,
        fee: u8,
        value: u8,
    ) -> (Address, SignedTx) {
        let signer = &self.signers[usize::from(from) % self.signers.len()];
        let base = u128::from(DEFAULT_BASE_FEE);
        let nonce = nonce(self.account(signer.address()).nonce);
        let builder = TxBuilder::eip1559(
            CHAIN,
            base * (1 + u128::from(fee % 4)),
            u128::from(fee / 4 % 4),
        );
        let value = unit() * U256::from(value % 4);
        let tx = builder.transfer(nonce, Address::repeat_byte(0xee), value);
        (signer.address(), signer.sign_tx(tx))
    }

    /// Runs one operation read from the front of `data`; returns the bytes it used.
    fn step(&mut self, data: &[u8]) -> usize {
        let byte = |i: usize| data.get(i).copied().unwrap_or_default();
        match byte(0) % 6 {
            0..=2 => {
                // From one below the account nonce to six above it.
                let offset = u64::from(byte(2) % 8);
                let nonce = |next: u64| (next + offset).saturating_sub(1);
                let (_, tx) = self.transfer(byte(1), nonce, byte(3), byte(4));
                let _ = self
                    .pool
                    .add(&[tx.encoded()], &self.state, DEFAULT_BASE_FEE);
                5
            }
            3 => {
                let selected =
                    self.pool
                        .select(DEFAULT_BASE_FEE, GAS * 8, usize::from(byte(1) % 8));
                self.check_selection(&selected);
                2
            }
            4 => {
                self.block(byte(1), byte(2), byte(3));
                4
            }
            _ => {
                let held: Vec<_> = self
                    .pool
                    .content()
                    .into_values()
                    .flat_map(|content| content.pending.into_iter().chain(content.queued))
                    .collect();
                if !held.is_empty() {
                    let hash = held[usize::from(byte(1)) % held.len()].hash;
                    self.pool.discard(&[hash], DropReason::FailedExecution);
                }
                2
            }
        }
    }

    /// A block: the first `take % 6` selected transactions, and (if `other` has bit 4 set)
    /// one more spend from a sender, as another node's block would carry.
    fn block(&mut self, take: u8, other: u8, value: u8) {
        let mut included = self
            .pool
            .select(DEFAULT_BASE_FEE, GAS * 8, usize::from(take % 6));
        self.check_selection(&included);
        for tx in &included {
            let pooled = self
                .pool
                .get(&tx.tx.hash())
                .expect("selected from the pool");
            let mut account = self.account(tx.sender);
            account.nonce += 1;
            account.balance = account.balance.saturating_sub(pooled.cost);
            set(&mut self.state, tx.sender, account.nonce, account.balance);
        }
        if other & 0x10 != 0 {
            let (sender, tx) = self.transfer(other, |next| next, 0, value);
            let mut account = self.account(sender);
            let cost = unit() + unit() * U256::from(value % 4);
            if account.balance >= cost {
                account.nonce += 1;
                account.balance -= cost;
                set(&mut self.state, sender, account.nonce, account.balance);
                included.push(RecoveredTx { tx, sender });
            }
        }
        self.pool
            .on_block(&included, &self.state)
            .expect("memory state");
    }

    /// A selection holds, per sender, consecutive nonces from its account nonce.
    fn check_selection(&self, selected: &[RecoveredTx]) {
        let mut next: BTreeMap<Address, u64> = BTreeMap::new();
        for tx in selected {
            let nonce = self.pool.get(&tx.tx.hash()).expect("selected").nonce;
            let expected = next
                .entry(tx.sender)
                .or_insert_with(|| self.account(tx.sender).nonce);
            assert_eq!(nonce, *expected, "selection skips a nonce of {}", tx.sender);
            *expected += 1;
        }
    }

    fn check(&self) {
        if let Err(broken) = self.pool.check_invariants() {
            panic!("txpool invariant: {broken}");
        }
        let status = self.pool.status();
        assert_eq!(status.pending + status.queued, self.pool.len());
        assert!(self.pool.len() <= MAX_TXS);
        let mut pending = 0;
        for (sender, content) in self.pool.content() {
            assert!(content.pending.len() + content.queued.len() <= MAX_PER_SENDER);
            let account = self.account(sender);
            let mut cost = U256::ZERO;
            for (i, tx) in content.pending.iter().enumerate() {
                assert_eq!(tx.nonce, account.nonce + i as u64, "{sender}: pending gap");
                cost += tx.cost;
            }
            assert!(cost <= account.balance, "{sender}: pending overdraws");
            pending += content.pending.len();
        }
        assert_eq!(pending, status.pending);
    }
}

fn set(state: &mut MemoryState, address: Address, nonce: u64, balance: U256) {
    let mut diff = StateDiff::default();
    diff.accounts.insert(
        address,
        AccountDiff {
            info: Some(AccountState {
                nonce,
                balance,
                ..AccountState::EMPTY
            }),
            ..AccountDiff::default()
        },
    );
    state.apply(&diff);
}

/// Interprets `data` as pool operations and checks the pool after each (at most 256
/// operations, so one input stays quick).
pub fn txpool_ops(data: &[u8]) {
    let mut harness = Harness::new();
    let mut rest = data;
    for _ in 0..256 {
        if rest.is_empty() {
            break;
        }
        let used = harness.step(rest);
        harness.check();
        rest = &rest[used.min(rest.len())..];
    }
}
