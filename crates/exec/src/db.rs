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

use std::{
    collections::BTreeMap,
    ops::Range,
    sync::atomic::{AtomicU64, Ordering as AtomicOrdering},
};

use alloy_primitives::{
    Address, B256, Bytes, U256,
    map::{AddressHashMap, HashMap},
};
use parking_lot::RwLock;
use revm::{
    bytecode::JumpTable,
    database_interface::Database,
    primitives::{KECCAK_EMPTY, StorageKey, StorageValue},
    state::{AccountInfo, Bytecode, EvmState},
};
use stave_primitives::{
    AccountDiff, AccountDiffs, AccountState, RecoveredTx, SlotDiffs, SlotsHint, StateDiff,
};

use crate::{error::StateError, state::StateReader};

/// A block's changes while it executes: a hash map of accounts (with a randomly seeded
/// hasher, so crafted addresses cannot make it slow), for the executor's many random
/// reads and writes; sorted into a [`StateDiff`] once, when the block or chunk is done.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    accounts: AddressHashMap<ChangedAccount>,
    codes: BTreeMap<B256, Bytes>,
    /// Where the accounts are sorted from, kept with its room from block to block: a
    /// new list for each sort (~340 KB for a chunk of 1,250 transfers) was faulted in
    /// afresh every time.
    unsorted: Vec<(Address, AccountDiff)>,
    /// Slot maps of earlier blocks, emptied with their room, for the accounts that write
    /// slots next: a token's map grew to thousands of slots in every block, on pages
    /// faulted in afresh.
    spare_slots: Vec<SlotMap>,
}

/// The slots an account wrote so far in an executing block.
type SlotMap = HashMap<U256, U256>;

/// Slot maps a [`Changes`] keeps for later blocks, at most: one per account that writes
/// slots in a block, as most blocks call few contracts.
const SPARE_SLOT_MAPS: usize = 16;

impl Changes {
    /// Takes the changes out in address order, leaving none but keeping the map's room;
    /// their list has room for `room` more (see [`AccountDiffs::with_room`]), and with any
    /// room, each account's slots have room for as many again (see
    /// [`ChangedAccount::into_diff`]).
    pub(crate) fn take_diff(&mut self, room: usize) -> StateDiff {
        let spare = &mut self.spare_slots;
        self.unsorted.extend(
            self.accounts
                .drain()
                .map(|(address, change)| (address, change.into_diff(spare, room > 0))),
        );
        StateDiff {
            accounts: AccountDiffs::with_room(&mut self.unsorted, room),
            codes: std::mem::take(&mut self.codes),
        }
    }

    /// The changes of a sorted diff, to execute on top of.
    pub(crate) fn from_diff(diff: StateDiff) -> Self {
        Self {
            accounts: diff
                .accounts
                .into_iter()
                .map(|(address, change)| (address, ChangedAccount::from_diff(change)))
                .collect(),
            codes: diff.codes,
            unsorted: Vec::new(),
            spare_slots: Vec::new(),
        }
    }
}

/// How one account changed so far in a block that is executing: an [`AccountDiff`] whose
/// slots are in a hash map, for the executor's random writes and reads, and are sorted
/// once, when the block or chunk is done ([`ChangedAccount::into_diff`]). A block of
/// token transfers writes thousands of the token's slots: into a tree, one at a time, they
/// cost the serial executor ~7% of an ERC-20 block, and merging the chunks' trees built a
/// third.
#[derive(Debug, Default)]
pub(crate) struct ChangedAccount {
    info: Option<AccountState>,
    storage_cleared: bool,
    /// The slots written; boxed, since most changed accounts (a transfer's) write none, and
    /// every change of a block is moved when it is sorted.
    storage: Option<Box<SlotMap>>,
}

impl ChangedAccount {
    /// The change of an account gone (self-destructed, or emptied): no storage either.
    fn deleted() -> Self {
        Self {
            info: None,
            storage_cleared: true,
            storage: None,
        }
    }

    /// The change as the block's diff holds it, its slots sorted; its slot map, emptied,
    /// goes to `spare`. With `room`, the slots' list has room for as many again, for a
    /// later chunk writing the same contract's slots to merge into in place: growing it
    /// in the merge moved it onto new pages, and the merge of a block of token transfers
    /// took 0.42–0.44 ms a block, 0.15–0.28 with the room (medians, `bench pipeline`).
    fn into_diff(self, spare: &mut Vec<SlotMap>, room: bool) -> AccountDiff {
        let storage = match self.storage {
            Some(mut slots) => {
                let mut writes = Vec::with_capacity(slots.len() * if room { 2 } else { 1 });
                // Moved out, not collected: that would size the list to the slots alone.
                writes.extend(slots.drain());
                let sorted = SlotDiffs::from_distinct(writes);
                if spare.len() < SPARE_SLOT_MAPS {
                    spare.push(*slots);
                }
                sorted
            }
            None => SlotDiffs::default(),
        };
        AccountDiff {
            info: self.info,
            storage_cleared: self.storage_cleared,
            storage,
        }
    }

    /// The change `diff`, to execute on top of.
    fn from_diff(diff: AccountDiff) -> Self {
        let storage =
            (!diff.storage.is_empty()).then(|| Box::new(diff.storage.into_iter().collect()));
        Self {
            info: diff.info,
            storage_cleared: diff.storage_cleared,
            storage,
        }
    }
}

/// How an account changed, as reads are served from it and checked against it.
pub(crate) trait AccountChange {
    /// The account after the change; `None` when it is gone.
    fn info(&self) -> Option<AccountState>;

    /// The value `slot` has after the change when the change decides it: the value
    /// written, or zero when the storage from before is gone (the account was created
    /// again, or deleted). `None` when the value from before the block stands.
    fn slot(&self, slot: &U256) -> Option<U256>;
}

/// The value a slot has after a change that wrote `written` to it (or did not), and
/// `cleared` the storage from before or left the account `gone`: see
/// [`AccountChange::slot`].
fn slot_after(written: Option<&U256>, cleared: bool, gone: bool) -> Option<U256> {
    written
        .copied()
        .or_else(|| (cleared || gone).then_some(U256::ZERO))
}

impl AccountChange for ChangedAccount {
    fn info(&self) -> Option<AccountState> {
        self.info
    }

    fn slot(&self, slot: &U256) -> Option<U256> {
        let written = self.storage.as_ref().and_then(|slots| slots.get(slot));
        slot_after(written, self.storage_cleared, self.info.is_none())
    }
}

impl AccountChange for AccountDiff {
    fn info(&self) -> Option<AccountState> {
        self.info
    }

    fn slot(&self, slot: &U256) -> Option<U256> {
        slot_after(
            self.storage.get(slot),
            self.storage_cleared,
            self.info.is_none(),
        )
    }
}

/// Emptied buffers kept from one block to the next.
/// - Change maps: a block's map grows from empty to thousands of accounts, and each
///   doubling rehashed it into newly faulted memory (~5% of an executing thread's time
///   in `reserve_rehash` from `Overlay::apply`, `perf`).
/// - A speculator's logs ([`ChunkLogs`]), which grow as long as its chunk.
#[derive(Debug, Default)]
pub(crate) struct Spare<T>(parking_lot::Mutex<Vec<T>>);

/// A buffer that can be emptied for reuse, keeping its room.
pub(crate) trait Reusable: Default {
    /// Empties it, keeping its room.
    fn clear(&mut self);
}

impl<T: Reusable> Spare<T> {
    /// An empty buffer, with room from an earlier block if one is kept.
    pub(crate) fn take(&self) -> T {
        self.0.lock().pop().unwrap_or_default()
    }

    /// Keeps `buffer`, emptied, for a later block.
    pub(crate) fn keep(&self, mut buffer: T) {
        buffer.clear();
        self.0.lock().push(buffer);
    }
}

impl Reusable for Changes {
    fn clear(&mut self) {
        self.accounts.clear();
        self.codes.clear();
    }
}

/// Changes a speculation's reads are checked against (those committed before it): the
/// committer's hash map, or a block's sorted diff.
pub(crate) trait Committed {
    /// How a committed account change is held.
    type Change: AccountChange;

    /// The committed change of `address`, if there is one.
    fn change(&self, address: &Address) -> Option<&Self::Change>;

    /// False only when no committed change can give `slot` of `address` another value
    /// than before (a quick answer, before [`Committed::change`]); true when it may.
    fn may_change_slot(&self, _address: &Address, _slot: &U256) -> bool {
        true
    }
}

impl Committed for Changes {
    type Change = ChangedAccount;

    fn change(&self, address: &Address) -> Option<&ChangedAccount> {
        self.accounts.get(address)
    }
}

/// A block's changes so far in address order, with filters over the changed accounts and
/// slots: most reads of a speculated chunk are of accounts, or of a token's slots, that
/// no earlier chunk wrote, and the filters answer those without a binary search. A key
/// that shares its filter bit with a written one (crafted or not) only costs that search.
pub(crate) struct SortedChanges {
    diff: StateDiff,
    /// The changed accounts.
    accounts: Bits,
    /// The changed slots.
    slots: Bits,
    /// Accounts whose change drops their storage from before (created, self-destructed,
    /// emptied): every slot of theirs may have changed.
    wiped: Bits,
}

/// A set of 16-bit filter keys; ~4% of them are set by a 2,500-transfer chunk.
struct Bits(Box<[u64; 1 << 10]>);

impl Bits {
    fn new() -> Self {
        Self(Box::new([0; 1 << 10]))
    }

    fn insert(&mut self, key: u16) {
        self.0[usize::from(key / 64)] |= 1 << (key % 64);
    }

    fn contains(&self, key: u16) -> bool {
        self.0[usize::from(key / 64)] & (1 << (key % 64)) != 0
    }
}

/// The filter key of `address`: its last two bytes.
fn account_key(address: &Address) -> u16 {
    u16::from_be_bytes([address[18], address[19]])
}

/// The filter key of `slot` of `address`: the slot's low 16 bits (random for mapping
/// entries, which are hashes) mixed with the address's.
fn slot_key(address: &Address, slot: &U256) -> u16 {
    // Truncation intended: the low 16 bits.
    account_key(address) ^ (slot.as_limbs()[0] as u16)
}

impl SortedChanges {
    /// The sorted changes `diff`, with their filters.
    pub(crate) fn new(diff: StateDiff) -> Self {
        let mut sorted = Self {
            diff: StateDiff::default(),
            accounts: Bits::new(),
            slots: Bits::new(),
            wiped: Bits::new(),
        };
        sorted.append(diff, true);
        sorted
    }

    /// Applies `later`, the changes of transactions after these, on top of them; adds
    /// them to the filters only when reads are `checked_after` against the result (not
    /// after a block's last chunk: a pass over its changes for nothing).
    pub(crate) fn append(&mut self, later: StateDiff, checked_after: bool) {
        if checked_after {
            self.filter(&later);
        }
        self.diff.append(later);
    }

    /// Adds the changes `later` to the filters.
    fn filter(&mut self, later: &StateDiff) {
        for (address, change) in later.accounts.iter() {
            self.accounts.insert(account_key(address));
            if change.storage_cleared || change.info.is_none() {
                self.wiped.insert(account_key(address));
            }
            for slot in change.storage.keys() {
                self.slots.insert(slot_key(address, slot));
            }
        }
    }

    /// What these changes say of their slots (a pass over them).
    pub(crate) fn slots(&self) -> SlotsHint {
        SlotsHint::of(&self.diff)
    }

    /// The changes, without their filter.
    pub(crate) fn into_diff(self) -> StateDiff {
        self.diff
    }
}

impl Committed for SortedChanges {
    type Change = AccountDiff;

    fn change(&self, address: &Address) -> Option<&AccountDiff> {
        if !self.accounts.contains(account_key(address)) {
            return None;
        }
        self.diff.accounts.get(address)
    }

    fn may_change_slot(&self, address: &Address, slot: &U256) -> bool {
        self.slots.contains(slot_key(address, slot)) || self.wiped.contains(account_key(address))
    }
}

/// Adds `amount` wei to `address` in `diff`, the changes of a block over `base`
/// (creating the account if needed): the proposer's fee credit, made once the block's
/// transactions are done.
pub(crate) fn credit(
    diff: &mut StateDiff,
    base: &dyn StateReader,
    address: Address,
    amount: U256,
) -> Result<(), StateError> {
    let current = match diff.accounts.get(&address) {
        Some(change) => change.info,
        None => base.account(address)?,
    };
    let mut info = current.unwrap_or(AccountState::EMPTY);
    info.balance = info.balance.saturating_add(amount);
    // A new account is "created": no storage from before survives, as for any write.
    let change = AccountDiff {
        info: Some(info),
        storage_cleared: current.is_none(),
        storage: SlotDiffs::default(),
    };
    match diff.accounts.get_mut(&address) {
        Some(earlier) => earlier.then(change),
        None => {
            diff.accounts.insert(address, change);
        }
    }
    Ok(())
}

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
    /// any) are read next, while `txs[index]` runs. With the state layers' bloom lines
    /// loaded meanwhile, `stave bench pipeline` (transfers, 12 interleaved runs, one
    /// binary) took 25.3 ms serial / 14.1 ms staged to execute, against 27.0 / 15.1
    /// without.
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
    /// executing threads bounced its count between their cores, and a transfer ran
    /// 60–80% slower beside another chunk than alone (in memory, `bench exec`).
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

/// Applies the writes `range` of `log` (one transaction's) to `diff`, as Ethereum commits
/// a transaction's state.
fn apply_writes(diff: &mut Changes, log: &WriteLog, range: Range<usize>) {
    for AccountWrite { address, change } in &log.accounts[range] {
        let account = diff.accounts.entry(*address).or_default();
        let spare = &mut diff.spare_slots;
        match change {
            WriteKind::Deleted => *account = ChangedAccount::deleted(),
            WriteKind::Updated {
                info,
                created,
                code,
                storage,
            } => {
                if *created {
                    account.storage_cleared = true;
                    account.storage = None;
                }
                account.info = Some(*info);
                let slots = &log.slots[storage.clone()];
                if !slots.is_empty() {
                    account
                        .storage
                        .get_or_insert_with(|| Box::new(spare.pop().unwrap_or_default()))
                        .extend(slots.iter().copied());
                }
                if let Some(code) = code {
                    diff.codes
                        .entry(info.code_hash)
                        .or_insert_with(|| log.codes[*code].clone());
                }
            }
        }
    }
}

/// What transactions wrote, one after another, in the form the block's diff takes it;
/// each run knows its range of [`WriteLog::accounts`]. A speculator appends its whole
/// chunk to one log, kept from block to block. With a vector per transaction, held
/// until the chunk was committed, a speculated transfer's run cost 3.75 µs against 3.41
/// µs with the log (medians of 65 blocks, 2,500 transfers, 2 threads, bench-fast); a
/// vector dropped as soon as it is applied, as the first chunk's are, cost little.
#[derive(Debug, Default)]
pub(crate) struct WriteLog {
    accounts: Vec<AccountWrite>,
    /// The slots every [`WriteKind::Updated`] wrote, each holding its range.
    slots: Vec<(U256, U256)>,
    /// The code each deploying [`WriteKind::Updated`] deployed, each holding its index.
    /// Kept apart, so that no write owns memory and the log empties at once, without
    /// visiting every write: emptying a speculator's log of 2,500 transfers' writes, on
    /// the committing thread, took ~20 µs when each write held its code.
    codes: Vec<Bytes>,
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

    /// The accounts written in `range`.
    pub(crate) fn addresses(&self, range: Range<usize>) -> impl Iterator<Item = Address> {
        self.accounts[range].iter().map(|write| write.address)
    }
}

/// How one transaction changed one account.
#[derive(Debug)]
struct AccountWrite {
    address: Address,
    change: WriteKind,
}

#[derive(Debug)]
enum WriteKind {
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
