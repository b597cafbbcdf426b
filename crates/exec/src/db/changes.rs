//! A block's changes while it executes ([`Changes`], a hash map for random reads and
//! writes), the same changes sorted with filters for checking speculations against them
//! ([`SortedChanges`]), and the buffers kept from block to block ([`Spare`]).

use std::{collections::BTreeMap, ops::Range};

use alloy_primitives::{
    Address, B256, Bytes, U256,
    map::{AddressHashMap, HashMap},
};
use stave_primitives::{
    AccountDiff, AccountDiffs, AccountState, SlotDiffs, SlotsHint, StateDiff, StateError,
    StateReader,
};

use super::log::{AccountWrite, WriteKind, WriteLog};

/// A block's changes while it executes: a hash map of accounts (with a randomly seeded
/// hasher, so crafted addresses cannot make it slow), for the executor's many random
/// reads and writes; sorted into a [`StateDiff`] once, when the block or chunk is done.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// The accounts changed so far.
    pub(super) accounts: AddressHashMap<ChangedAccount>,
    /// The code deployed so far.
    pub(super) codes: BTreeMap<B256, Bytes>,
    /// Where the accounts are sorted from, kept with its room from block to block: a
    /// new list for each sort (a chunk's worth of accounts) was faulted in afresh every
    /// time.
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
/// cost the serial executor a noticeable share of an ERC-20 block, and merging the
/// chunks' trees built a third.
#[derive(Debug, Default)]
pub(crate) struct ChangedAccount {
    /// The account after the changes so far; `None` when it is gone.
    pub(super) info: Option<AccountState>,
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
    /// in the merge moved it onto new pages, and made the merge of a block of token
    /// transfers markedly slower (`bench pipeline`).
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
///   doubling rehashed it into newly faulted memory (`perf` showed an executing thread
///   spend a visible share of its time in `reserve_rehash` from `Overlay::apply`).
/// - A speculator's logs ([`ChunkLogs`](super::ChunkLogs)), which grow as long as its chunk.
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

/// A set of 16-bit filter keys; a chunk of transfers sets few of them.
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
/// (creating the account if needed, deleting it if it is left empty, EIP-161): fees of
/// speculated transactions committed whole, credited once the block's transactions are
/// done (see `parallel`'s module docs).
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
    let change = if info == AccountState::EMPTY {
        if current.is_none() {
            return Ok(());
        }
        AccountDiff::deleted()
    } else {
        // A new account is "created": no storage from before survives, as for any write.
        AccountDiff {
            info: Some(info),
            storage_cleared: current.is_none(),
            storage: SlotDiffs::default(),
        }
    };
    match diff.accounts.get_mut(&address) {
        Some(earlier) => earlier.then(change),
        None => {
            diff.accounts.insert(address, change);
        }
    }
    Ok(())
}

/// Applies the writes `range` of `log` (one transaction's) to `diff`, as Ethereum commits
/// a transaction's state.
pub(super) fn apply_writes(diff: &mut Changes, log: &WriteLog, range: Range<usize>) {
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
