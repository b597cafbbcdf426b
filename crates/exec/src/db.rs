//! The state a transaction sees while a block executes: the block's changes so far
//! ([`StateDiff`]) over the state before the block ([`StateReader`]).
//!
//! The diff sits behind a `RwLock` shared for the whole block: [`BlockDb`] (the serial
//! executor's and the parallel committer's database) writes each transaction's changes
//! into it; [`RecordingDb`] (a speculating thread's) reads it while no one writes and logs
//! every value it hands out, so the parallel executor can check a speculative run against
//! the state it should have seen. Each access takes the lock once: parking_lot's, which
//! spins briefly before parking, because std's parks at once and the committer's short
//! writes then cost speculators a futex round trip each.

use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{Address, B256, Bytes, U256};
use parking_lot::RwLock;
use revm::{
    database_interface::Database,
    primitives::{KECCAK_EMPTY, StorageKey, StorageValue},
    state::{AccountInfo, Bytecode, EvmState},
};
use stave_primitives::{AccountDiff, AccountState, StateDiff};

use crate::{error::StateError, state::StateReader};

/// The block's overlay: the diff so far (behind its lock) over the base state.
#[derive(Clone, Copy)]
pub(crate) struct Overlay<'a> {
    base: &'a dyn StateReader,
    diff: &'a RwLock<StateDiff>,
    /// Account and slot reads the diff served (L1 hits).
    hits: &'a AtomicU64,
}

impl<'a> Overlay<'a> {
    pub(crate) fn new(
        base: &'a dyn StateReader,
        diff: &'a RwLock<StateDiff>,
        hits: &'a AtomicU64,
    ) -> Self {
        Self { base, diff, hits }
    }

    /// Runs `f` on a consistent view of the overlay.
    pub(crate) fn with_view<R>(&self, f: impl FnOnce(View<'_>) -> R) -> R {
        let guard = self.diff.read();
        f(View {
            base: self.base,
            diff: &guard,
            hits: self.hits,
        })
    }

    /// Tells the base state how many reads the block's own changes served.
    pub(crate) fn report_hits(&self) {
        self.base
            .note_block_reads(self.hits.load(Ordering::Relaxed));
    }

    /// Takes the diff out, leaving an empty one.
    pub(crate) fn take_diff(&self) -> StateDiff {
        std::mem::take(&mut *self.diff.write())
    }
}

/// Read-only view of the overlay: the diff first, then the base state.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    base: &'a dyn StateReader,
    diff: &'a StateDiff,
    hits: &'a AtomicU64,
}

impl View<'_> {
    fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// The account as the next transaction will see it.
    pub(crate) fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        match self.diff.accounts.get(&address) {
            Some(change) => {
                self.hit();
                Ok(change.info)
            }
            None => self.base.account(address),
        }
    }

    /// A storage slot as the next transaction will see it.
    pub(crate) fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        match self.diff.accounts.get(&address) {
            Some(change) => match change.storage.get(&slot) {
                Some(value) => {
                    self.hit();
                    Ok(*value)
                }
                None if change.storage_cleared || change.info.is_none() => {
                    self.hit();
                    Ok(U256::ZERO)
                }
                None => self.base.storage(address, slot),
            },
            None => self.base.storage(address, slot),
        }
    }

    fn code(&self, code_hash: B256) -> Result<Bytecode, StateError> {
        if code_hash == KECCAK_EMPTY {
            return Ok(Bytecode::default());
        }
        let bytes: Bytes = match self.diff.codes.get(&code_hash) {
            Some(code) => code.clone(),
            None => self
                .base
                .code(code_hash)?
                .ok_or_else(|| StateError(format!("code {code_hash} missing from state")))?,
        };
        Bytecode::new_raw_checked(bytes)
            .map_err(|e| StateError(format!("stored code {code_hash} is malformed: {e:?}")))
    }
}

fn account_info(account: AccountState) -> AccountInfo {
    AccountInfo {
        balance: account.balance,
        nonce: account.nonce,
        code_hash: account.code_hash,
        // Loaded on demand through `code_by_hash`.
        code: None,
        ..Default::default()
    }
}

/// Analysed contract code by hash, kept by each database for the block: analysing code
/// (its jump table) costs more than a token transfer's whole execution, and revm asks for
/// the code of every called contract in every transaction. Code never changes under a
/// hash, so the cache cannot go stale.
#[derive(Default)]
pub(crate) struct CodeCache(alloy_primitives::map::B256Map<Bytecode>);

impl CodeCache {
    fn get(&mut self, overlay: Overlay<'_>, code_hash: B256) -> Result<Bytecode, StateError> {
        if let Some(code) = self.0.get(&code_hash) {
            return Ok(code.clone());
        }
        let code = overlay.with_view(|view| view.code(code_hash))?;
        self.0.insert(code_hash, code.clone());
        Ok(code)
    }
}

/// The database that writes: each transaction's changes go into the overlay's diff.
pub(crate) struct BlockDb<'a> {
    pub(crate) overlay: Overlay<'a>,
    codes: CodeCache,
}

impl<'a> BlockDb<'a> {
    pub(crate) fn new(overlay: Overlay<'a>) -> Self {
        Self {
            overlay,
            codes: CodeCache::default(),
        }
    }

    /// Applies one transaction's writes to the block's diff.
    pub(crate) fn apply(&mut self, writes: Vec<AccountWrite>) {
        let mut block = self.overlay.diff.write();
        for AccountWrite { address, change } in writes {
            let diff = block.accounts.entry(address).or_default();
            match change {
                WriteKind::Deleted => {
                    *diff = AccountDiff {
                        info: None,
                        storage_cleared: true,
                        ..Default::default()
                    };
                }
                WriteKind::Updated {
                    info,
                    created,
                    code,
                    storage,
                } => {
                    if created {
                        diff.storage_cleared = true;
                        diff.storage.clear();
                    }
                    diff.info = Some(info);
                    diff.storage.extend(storage);
                    if let Some((hash, bytes)) = code {
                        block.codes.entry(hash).or_insert(bytes);
                    }
                }
            }
        }
    }

    /// Adds `amount` wei to `address` (creating it if needed): the proposer's fee credit.
    pub(crate) fn credit(&mut self, address: Address, amount: U256) -> Result<(), StateError> {
        let current = self.overlay.with_view(|view| view.account(address))?;
        let mut info = current.unwrap_or(AccountState {
            nonce: 0,
            balance: U256::ZERO,
            code_hash: KECCAK_EMPTY,
        });
        info.balance = info.balance.saturating_add(amount);
        // A new account is "created": no storage from before survives, as for any write.
        let change = WriteKind::Updated {
            info,
            created: current.is_none(),
            code: None,
            storage: Vec::new(),
        };
        self.apply(vec![AccountWrite { address, change }]);
        Ok(())
    }
}

impl Database for BlockDb<'_> {
    type Error = StateError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        Ok(self
            .overlay
            .with_view(|view| view.account(address))?
            .map(account_info))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, StateError> {
        self.codes.get(self.overlay, code_hash)
    }

    fn storage(&mut self, address: Address, slot: StorageKey) -> Result<StorageValue, StateError> {
        self.overlay.with_view(|view| view.storage(address, slot))
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, StateError> {
        self.overlay.base.block_hash(number)
    }
}

/// How one transaction changed one account, in the form the block's diff takes it.
pub(crate) struct AccountWrite {
    address: Address,
    change: WriteKind,
}

enum WriteKind {
    /// Self-destructed, or touched while empty (EIP-161): gone with its storage.
    Deleted,
    /// Written.
    Updated {
        info: AccountState,
        /// Created by this transaction: storage from before it is gone.
        created: bool,
        /// Code deployed by this transaction.
        code: Option<(B256, Bytes)>,
        /// Slots written, with their new values.
        storage: Vec<(U256, U256)>,
    },
}

/// Turns revm's post-transaction state into writes, with Ethereum's commit rules:
/// untouched accounts are skipped, self-destructed ones go with their storage, created
/// ones start from empty storage, touched empty ones are deleted (EIP-161). Done where the
/// transaction ran, so a parallel committer only has to apply the result.
pub(crate) fn writes_of(state: EvmState) -> Vec<AccountWrite> {
    state
        .into_iter()
        .filter(|(_, account)| account.is_touched())
        .map(|(address, account)| {
            if account.is_selfdestructed() || account.is_empty() {
                return AccountWrite {
                    address,
                    change: WriteKind::Deleted,
                };
            }
            let code = account
                .info
                .code
                .as_ref()
                .filter(|_| account.is_created() && account.info.code_hash != KECCAK_EMPTY)
                .map(|code| (account.info.code_hash, code.original_bytes()));
            let storage = account
                .storage
                .iter()
                .filter(|(_, slot)| slot.is_changed())
                .map(|(key, slot)| (*key, slot.present_value))
                .collect();
            let change = WriteKind::Updated {
                info: AccountState {
                    nonce: account.info.nonce,
                    balance: account.info.balance,
                    code_hash: account.info.code_hash,
                },
                created: account.is_created(),
                code,
                storage,
            };
            AccountWrite { address, change }
        })
        .collect()
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
    /// True when `view` still gives the value that was read.
    ///
    /// The block's diff only grows while the block runs and the base state never changes,
    /// so a key the diff does not hold now was read from the base and still has that
    /// value: only keys the block wrote are compared, and the base is never read again.
    pub(crate) fn holds(&self, view: View<'_>) -> Result<bool, StateError> {
        Ok(match *self {
            Self::Account(address, seen) => view
                .diff
                .accounts
                .get(&address)
                .is_none_or(|change| change.info == seen),
            Self::Storage(address, slot, seen) => match view.diff.accounts.get(&address) {
                None => true,
                Some(change) => match change.storage.get(&slot) {
                    Some(value) => *value == seen,
                    None if change.storage_cleared || change.info.is_none() => seen.is_zero(),
                    None => true,
                },
            },
        })
    }
}

/// Reads the overlay (while no one writes it) and logs what it hands out.
pub(crate) struct RecordingDb<'a> {
    overlay: Overlay<'a>,
    codes: CodeCache,
    pub(crate) reads: Vec<Read>,
}

impl<'a> RecordingDb<'a> {
    pub(crate) fn new(overlay: Overlay<'a>) -> Self {
        Self {
            overlay,
            codes: CodeCache::default(),
            reads: Vec::new(),
        }
    }
}

impl Database for RecordingDb<'_> {
    type Error = StateError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        let account = self.overlay.with_view(|view| view.account(address))?;
        self.reads.push(Read::Account(address, account));
        Ok(account.map(account_info))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, StateError> {
        self.codes.get(self.overlay, code_hash)
    }

    fn storage(&mut self, address: Address, slot: StorageKey) -> Result<StorageValue, StateError> {
        let value = self.overlay.with_view(|view| view.storage(address, slot))?;
        self.reads.push(Read::Storage(address, slot, value));
        Ok(value)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, StateError> {
        self.overlay.base.block_hash(number)
    }
}
