//! The executor's logs: what transactions wrote ([`WriteLog`], applied to a block's
//! changes by the thread that commits them) and what a speculative run read ([`Read`],
//! checked against the changes committed before it).

use std::ops::Range;

use alloy_primitives::{Address, Bytes, U256};
use revm::{primitives::KECCAK_EMPTY, state::EvmState};
use stave_primitives::AccountState;

use super::changes::{AccountChange, Committed, Reusable};

/// What transactions wrote, one after another, in the form the block's diff takes it;
/// each run knows its range of [`WriteLog::accounts`]. A speculator appends its whole
/// chunk to one log, kept from block to block: a vector per transaction, held until the
/// chunk was committed, made a speculated transfer's run measurably slower; a vector
/// dropped as soon as it is applied, as the first chunk's are, cost little.
#[derive(Debug, Default)]
pub(crate) struct WriteLog {
    /// Every account write, in order.
    pub(super) accounts: Vec<AccountWrite>,
    /// The slots every [`WriteKind::Updated`] wrote, each holding its range.
    pub(super) slots: Vec<(U256, U256)>,
    /// The code each deploying [`WriteKind::Updated`] deployed, each holding its index.
    /// Kept apart, so that no write owns memory and the log empties at once, without
    /// visiting every write, which the committing thread would otherwise do for a
    /// speculator's whole log.
    pub(super) codes: Vec<Bytes>,
}

impl Reusable for WriteLog {
    fn clear(&mut self) {
        self.accounts.clear();
        self.slots.clear();
        self.codes.clear();
    }
}

impl WriteLog {
    /// Appends the writes of revm's post-transaction `state`, with Ethereum's commit rules:
    /// untouched accounts are skipped, self-destructed ones go with their storage, created
    /// ones start from empty storage, touched empty ones are deleted (EIP-161). Done where
    /// the transaction ran, so a parallel committer only has to apply the result. Returns
    /// where they sit in the log.
    pub(crate) fn append(&mut self, state: EvmState) -> Range<usize> {
        let start = self.accounts.len();
        for (address, account) in state {
            if !account.is_touched() {
                continue;
            }
            let change = if account.is_selfdestructed() || account.is_empty() {
                WriteKind::Deleted
            } else {
                let code = account
                    .info
                    .code
                    .as_ref()
                    .filter(|_| account.is_created() && account.info.code_hash != KECCAK_EMPTY)
                    .map(|code| {
                        self.codes.push(code.original_bytes());
                        self.codes.len() - 1
                    });
                let first_slot = self.slots.len();
                self.slots.extend(
                    account
                        .storage
                        .iter()
                        .filter(|(_, slot)| slot.is_changed())
                        .map(|(key, slot)| (*key, slot.present_value)),
                );
                WriteKind::Updated {
                    info: AccountState {
                        nonce: account.info.nonce,
                        balance: account.info.balance,
                        code_hash: account.info.code_hash,
                    },
                    created: account.is_created(),
                    code,
                    storage: first_slot..self.slots.len(),
                }
            };
            self.accounts.push(AccountWrite { address, change });
        }
        start..self.accounts.len()
    }

    /// Appends the proposer's fee credit as revm's reward writes it: `amount` wei added to
    /// `address`, which held `before`, touching it, so that an account left empty is
    /// deleted (EIP-161). Returns where it sits in the log.
    pub(crate) fn credit(
        &mut self,
        address: Address,
        before: Option<AccountState>,
        amount: U256,
    ) -> Range<usize> {
        let start = self.accounts.len();
        let mut info = before.unwrap_or(AccountState::EMPTY);
        info.balance = info.balance.saturating_add(amount);
        let change = if info != AccountState::EMPTY {
            WriteKind::Updated {
                info,
                created: false,
                code: None,
                storage: self.slots.len()..self.slots.len(),
            }
        } else if before.is_some() {
            WriteKind::Deleted
        } else {
            // Deleting an account that does not exist writes nothing.
            return start..start;
        };
        self.accounts.push(AccountWrite { address, change });
        start..self.accounts.len()
    }

    /// The accounts written in `range`.
    pub(crate) fn addresses(&self, range: Range<usize>) -> impl Iterator<Item = Address> {
        self.accounts[range].iter().map(|write| write.address)
    }
}

/// How one transaction changed one account.
#[derive(Debug)]
pub(super) struct AccountWrite {
    /// The account.
    pub(super) address: Address,
    /// What happened to it.
    pub(super) change: WriteKind,
}

/// What a transaction did to an account.
#[derive(Debug)]
pub(super) enum WriteKind {
    /// Self-destructed, or touched while empty (EIP-161): gone with its storage.
    Deleted,
    /// Written.
    Updated {
        info: AccountState,
        /// Created by this transaction: storage from before it is gone.
        created: bool,
        /// Code deployed by this transaction (rare), as its index in [`WriteLog::codes`].
        code: Option<usize>,
        /// Where the slots written, with their new values, sit in [`WriteLog::slots`].
        storage: Range<usize>,
    },
}

/// A speculator's logs: the values its chunk read and what it wrote. Kept from one block
/// to the next (see [`WriteLog`]).
#[derive(Debug, Default)]
pub(crate) struct ChunkLogs {
    /// Every value read, in order; each speculation knows its range.
    pub(crate) reads: Vec<Read>,
    /// Every write, in order.
    pub(crate) writes: WriteLog,
}

impl Reusable for ChunkLogs {
    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
}

/// One value a speculative run read. Code (content-addressed) and block hashes (fixed for
/// the block) cannot change under a transaction, so they are not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// `basic(address)` returned this.
    Account(Address, Option<AccountState>),
    /// `storage(address, slot)` returned this.
    Storage(Address, U256, U256),
}

impl Read {
    /// The account read (or whose slot was read).
    pub(crate) fn address(&self) -> Address {
        match *self {
            Self::Account(address, _) | Self::Storage(address, _, _) => address,
        }
    }

    /// True when the state after the `committed` changes still gives the value read.
    ///
    /// The base state never changes, so a key `committed` does not hold was never
    /// written by the transactions committed before: the value read (from the base, or
    /// from a transaction earlier in the reader's own chunk, whose reads are checked
    /// first) still stands, provided that earlier transaction was committed as
    /// speculated (the committer checks that separately). Only keys the committed
    /// transactions wrote are compared, and the base is never read again.
    pub(crate) fn holds(&self, committed: &impl Committed) -> bool {
        match *self {
            Self::Account(address, seen) => committed
                .change(&address)
                .is_none_or(|change| change.info() == seen),
            Self::Storage(address, slot, _) if !committed.may_change_slot(&address, &slot) => true,
            Self::Storage(address, slot, seen) => committed
                .change(&address)
                .and_then(|change| change.slot(&slot))
                .is_none_or(|value| value == seen),
        }
    }
}
