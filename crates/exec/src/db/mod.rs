//! The state a transaction sees while a block executes: the block's changes so far
//! ([`Changes`], sorted into a [`StateDiff`] when the block is done) over the state before
//! the block ([`StateReader`]).
//!
//! Each diff sits behind a `RwLock`: [`BlockDb`] (the serial executor's and the parallel
//! committer's database) writes each transaction's changes into the block's diff;
//! [`RecordingDb`] (a speculating thread's) reads its own chunk's diff, to which that thread
//! applies each run's writes, and logs every value it hands out, so the parallel executor
//! can check a speculative run against the state it should have seen. The locks are
//! parking_lot's, which spin briefly before parking; the committed diff is only ever
//! sampled by speculators with `try_read`, so they never make its writer park.

mod changes;
mod log;

use std::{
    ops::Range,
    sync::atomic::{AtomicU64, Ordering as AtomicOrdering},
};

use alloy_primitives::{Address, B256, Bytes, U256};
use parking_lot::RwLock;
use revm::{
    bytecode::JumpTable,
    database_interface::{Database, DatabaseRef},
    primitives::{KECCAK_EMPTY, StorageKey, StorageValue},
    state::{AccountInfo, Bytecode},
};
use stave_primitives::{AccountState, RecoveredTx, StateDiff, StateError, StateReader};

use self::changes::apply_writes;
pub(crate) use self::{
    changes::{AccountChange, Changes, Committed, Reusable, SortedChanges, Spare, credit},
    log::{ChunkLogs, Read, WriteLog},
};

/// The block's overlay: the diff so far (behind its lock) over the base state.
#[derive(Clone, Copy)]
pub(crate) struct Overlay<'a> {
    base: &'a dyn StateReader,
    diff: &'a RwLock<Changes>,
    /// Account and slot reads the diff served (L1 hits).
    hits: &'a AtomicU64,
}

impl<'a> Overlay<'a> {
    /// Hints to the state below that the sender and recipient of `txs[index + 1]` (if
    /// any) are read next, while `txs[index]` runs, so that the state layers load their
    /// bloom lines meanwhile (`stave bench pipeline` measured execution faster with the
    /// hint, serial and parallel alike).
    pub(crate) fn prefetch_next(&self, txs: &[RecoveredTx], index: usize) {
        let Some(tx) = txs.get(index + 1) else {
            return;
        };
        self.base.prefetch_account(tx.sender);
        if let Some(to) = alloy_consensus::Transaction::to(tx.tx.envelope()) {
            self.base.prefetch_account(to);
        }
    }

    pub(crate) fn new(
        base: &'a dyn StateReader,
        diff: &'a RwLock<Changes>,
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

    /// Runs `f` on the changes so far if no one is writing them right now; `None`
    /// instead of waiting for the writer.
    pub(crate) fn try_with_changes<R>(&self, f: impl FnOnce(&Changes) -> R) -> Option<R> {
        let guard = self.diff.try_read()?;
        Some(f(&guard))
    }

    /// Runs `f` on the changes so far.
    pub(crate) fn with_changes<R>(&self, f: impl FnOnce(&Changes) -> R) -> R {
        f(&self.diff.read())
    }

    /// Replaces the changes so far with `changes`.
    pub(crate) fn replace(&self, changes: Changes) {
        *self.diff.write() = changes;
    }

    /// Tells the base state how many reads the block's own changes served.
    pub(crate) fn report_hits(&self) {
        self.base
            .note_block_reads(self.hits.load(AtomicOrdering::Relaxed));
    }

    /// Applies one transaction's writes, `range` of `log`, to the diff.
    pub(crate) fn apply(&self, log: &WriteLog, range: Range<usize>) {
        apply_writes(&mut self.diff.write(), log, range);
    }

    /// Credits `amount` wei of fees to `address` as a transaction's end does (touching it:
    /// an account left empty is deleted, EIP-161).
    pub(crate) fn credit(&self, address: Address, amount: U256) -> Result<(), StateError> {
        let before = self.with_view(|view| view.account(address))?;
        let mut log = WriteLog::default();
        let range = log.credit(address, before, amount);
        self.apply(&log, range);
        Ok(())
    }

    /// Takes the changes out in address order, leaving none, with `room` more in their list.
    pub(crate) fn take_diff(&self, room: usize) -> StateDiff {
        self.diff.write().take_diff(room)
    }
}

/// Read-only view of the overlay: the diff first, then the base state.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    base: &'a dyn StateReader,
    diff: &'a Changes,
    hits: &'a AtomicU64,
}

impl View<'_> {
    fn hit(&self) {
        self.hits.fetch_add(1, AtomicOrdering::Relaxed);
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
        match self
            .diff
            .accounts
            .get(&address)
            .and_then(|change| change.slot(&slot))
        {
            Some(value) => {
                self.hit();
                Ok(value)
            }
            None => self.base.storage(address, slot),
        }
    }

    /// The code under `code_hash`, analysed (not the empty code: [`CodeCache`] has it).
    fn code(&self, code_hash: B256) -> Result<Bytecode, StateError> {
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

/// revm's account for what state holds at an address. An account without code gets
/// `empty` (its database's [`CodeCache::empty`]) as its code, so revm neither asks for it
/// nor makes its own.
///
/// An address state does not hold is handed over as an empty account, not as `None`: for
/// `None` revm makes a not-existing account around its process-wide empty code, whose
/// count the two executing threads would bounce again for every fresh recipient (its
/// load, its call frame, its drop). revm tells such an account from an empty one only
/// under pre-Spurious Dragon rules and for EIP-7702 refunds; this chain runs neither, and
/// since EIP-161 every rule it does run (call and self-destruct costs, `EXTCODEHASH`,
/// deletion of touched empty accounts) looks at emptiness alone.
fn account_info(account: Option<AccountState>, empty: &Bytecode) -> AccountInfo {
    let account = account.unwrap_or(AccountState::EMPTY);
    let info = AccountInfo::new(
        account.balance,
        account.nonce,
        account.code_hash,
        empty.clone(),
    );
    if account.code_hash == KECCAK_EMPTY {
        info
    } else {
        // Loaded on demand through `code_by_hash`.
        info.without_code()
    }
}

/// Analysed contract code by hash, kept by each database for the block: analysing code
/// (its jump table) costs more than a token transfer's whole execution, and revm asks for
/// the code of every called contract in every transaction. Code never changes under a
/// hash, so the cache cannot go stale.
pub(crate) struct CodeCache {
    analysed: alloy_primitives::map::B256Map<Bytecode>,
    /// The empty code, this database's own. revm's `Bytecode::default()` is one `Arc` for
    /// the whole process, which every account load without code cloned and dropped: two
    /// executing threads bounced its count between their cores, and a transfer ran much
    /// slower beside another chunk than alone (in memory, `bench exec`).
    empty: Bytecode,
}

impl Default for CodeCache {
    fn default() -> Self {
        // SAFETY: the very parts revm's `Bytecode::default()` is made of: a lone STOP, so
        // no immediate can be read past the end, original length 0, an empty jump table.
        let empty =
            unsafe { Bytecode::new_analyzed(Bytes::from_static(&[0x00]), 0, JumpTable::default()) };
        Self {
            analysed: Default::default(),
            empty,
        }
    }
}

impl CodeCache {
    fn get(&mut self, overlay: Overlay<'_>, code_hash: B256) -> Result<Bytecode, StateError> {
        if code_hash == KECCAK_EMPTY {
            return Ok(self.empty.clone());
        }
        if let Some(code) = self.analysed.get(&code_hash) {
            return Ok(code.clone());
        }
        let code = overlay.with_view(|view| view.code(code_hash))?;
        self.analysed.insert(code_hash, code.clone());
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
}

impl Database for BlockDb<'_> {
    type Error = StateError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        let account = self.overlay.with_view(|view| view.account(address))?;
        Ok(Some(account_info(account, &self.codes.empty)))
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

/// The overlay as revm's read-only database: what a tracer reads as the state before
/// the transaction it traced (geth's prestate tracer, Parity's state diff).
pub(crate) struct OverlayRef<'a>(pub(crate) Overlay<'a>);

impl DatabaseRef for OverlayRef<'_> {
    type Error = StateError;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        let account = self.0.with_view(|view| view.account(address))?;
        Ok(Some(account_info(account, &Bytecode::default())))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, StateError> {
        if code_hash == KECCAK_EMPTY {
            return Ok(Bytecode::default());
        }
        self.0.with_view(|view| view.code(code_hash))
    }

    fn storage_ref(&self, address: Address, slot: StorageKey) -> Result<StorageValue, StateError> {
        self.0.with_view(|view| view.storage(address, slot))
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, StateError> {
        self.0.base.block_hash(number)
    }
}

/// Reads the overlay and logs what it hands out.
pub(crate) struct RecordingDb<'a> {
    pub(crate) overlay: Overlay<'a>,
    codes: CodeCache,
    pub(crate) reads: Vec<Read>,
}

impl<'a> RecordingDb<'a> {
    /// Reads `overlay`, logging into `reads` (empty, with room kept from an earlier block).
    pub(crate) fn new(overlay: Overlay<'a>, reads: Vec<Read>) -> Self {
        Self {
            overlay,
            codes: CodeCache::default(),
            reads,
        }
    }
}

impl Database for RecordingDb<'_> {
    type Error = StateError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        let account = self.overlay.with_view(|view| view.account(address))?;
        self.reads.push(Read::Account(address, account));
        Ok(Some(account_info(account, &self.codes.empty)))
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use stave_primitives::AccountDiff;

    use super::*;

    fn account(balance: u64, cleared: bool, slots: &[(u64, u64)]) -> AccountDiff {
        AccountDiff {
            info: Some(AccountState {
                nonce: 1,
                balance: U256::from(balance),
                code_hash: KECCAK_EMPTY,
            }),
            storage_cleared: cleared,
            storage: slots
                .iter()
                .map(|(slot, value)| (U256::from(*slot), U256::from(*value)))
                .collect(),
        }
    }

    #[test]
    fn an_account_without_code_or_absent_gets_its_database_s_empty_code_equal_to_revm_s() {
        let empty = CodeCache::default().empty;
        let revm_s = Bytecode::default();
        assert_eq!(empty, revm_s);
        assert!(empty.is_empty());
        assert_eq!(empty.bytecode(), revm_s.bytecode(), "padded the same");
        assert_eq!(empty.hash_slow(), KECCAK_EMPTY);
        let eoa = AccountState {
            nonce: 3,
            balance: U256::from(7),
            code_hash: KECCAK_EMPTY,
        };
        let info = account_info(Some(eoa), &empty);
        assert_eq!((info.nonce, info.balance), (3, U256::from(7)));
        assert_eq!(info.code, Some(revm_s));
        assert!(!info.code.unwrap().is_default(), "not revm's shared Arc");
        let absent = account_info(None, &empty);
        assert!(absent.is_empty());
        assert!(!absent.code.unwrap().is_default(), "not revm's shared Arc");
        let contract = AccountState {
            code_hash: B256::repeat_byte(1),
            ..eoa
        };
        let info = account_info(Some(contract), &empty);
        assert_eq!(info.code, None, "loaded through code_by_hash");
        assert_eq!(info.code_hash, B256::repeat_byte(1));
    }

    #[test]
    fn the_sorted_changes_filters_answer_as_the_changes_themselves_do() {
        let token = Address::repeat_byte(1);
        let created = Address::repeat_byte(2);
        let gone = Address::repeat_byte(3);
        let untouched = Address::repeat_byte(4);
        let diff = || StateDiff {
            accounts: [
                (token, account(0, false, &[(7, 70), (0x1_0008, 80)])),
                (created, account(5, true, &[(1, 10)])),
                (gone, AccountDiff::deleted()),
            ]
            .into_iter()
            .collect(),
            codes: BTreeMap::new(),
        };
        let sorted = SortedChanges::new(diff());
        let changes = Changes::from_diff(diff());
        let slot = |address, slot: u64, value: u64| {
            Read::Storage(address, U256::from(slot), U256::from(value))
        };
        let reads = [
            // Written slots: hold only with the value written.
            (slot(token, 7, 70), true),
            (slot(token, 7, 1), false),
            (slot(token, 0x1_0008, 80), true),
            (slot(token, 0x1_0008, 0), false),
            // Shares a filter key with slot 7 and 0x1_0008 was not written: still holds.
            (slot(token, 0x2_0007, 9), true),
            (slot(token, 9, 9), true),
            // Storage from before a creation or a deletion reads zero now.
            (slot(created, 2, 4), false),
            (slot(created, 2, 0), true),
            (slot(created, 1, 10), true),
            (slot(gone, 6, 6), false),
            (slot(gone, 6, 0), true),
            (slot(untouched, 7, 3), true),
            (Read::Account(untouched, None), true),
            (Read::Account(gone, None), true),
            (Read::Account(token, None), false),
        ];
        for (read, holds) in reads {
            assert_eq!(read.holds(&changes), holds, "{read:?} on the hash map");
            assert_eq!(read.holds(&sorted), holds, "{read:?} through the filters");
        }
    }
}
