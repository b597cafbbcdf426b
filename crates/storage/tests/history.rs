//! The state history against LMDB: values read at past blocks are the values those blocks
//! left, flushes add to it atomically with the state, pruning and dropping remove it.
use alloy_primitives::{Address, U256};
use stave_primitives::{AccountDiff, AccountState, StateDiff};
use stave_storage::{
    KvStore, LmdbStore, Table, WriteBatch,
    commit::{TxPositions, flush_state, state_ops},
    history::{
        self, HistoryWindow, PriorValues, account_at, prune, storage_at, stored_slots, window,
    },
    read::{account, storage},
};

fn funded(balance: u64) -> AccountState {
    AccountState {
        balance: U256::from(balance),
        ..AccountState::EMPTY
    }
}

fn change(balance: u64, slots: &[(u64, u64)]) -> AccountDiff {
    AccountDiff {
        info: Some(funded(balance)),
        storage_cleared: false,
        storage: slots
            .iter()
            .map(|(slot, value)| (U256::from(*slot), U256::from(*value)))
            .collect(),
    }
}

/// Flushes block `number`, which sets `address` to `diff`, recording `prior` (the values
/// before it) as a node keeping history does.
fn flush(store: &LmdbStore, number: u64, address: Address, diff: AccountDiff, prior: PriorValues) {
    let diff = StateDiff {
        accounts: [(address, diff)].into_iter().collect(),
        ..StateDiff::default()
    };
    let positions = TxPositions::default();
    flush_state(
        store,
        &[&diff],
        &[(number, &positions)],
        Some(&prior),
        number,
        true,
    )
    .expect("flushes");
}

#[test]
fn every_past_block_reads_the_values_it_left_and_pruning_keeps_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = LmdbStore::open(dir.path(), 1 << 26).expect("opens");
    let alice = Address::with_last_byte(0xa1);
    let bob = Address::with_last_byte(0xb0);
    // Genesis: alice holds 100 with slot 1 = 7; bob does not exist.
    let mut genesis = WriteBatch::new();
    genesis.append(state_ops(
        &StateDiff {
            accounts: [(alice, change(100, &[(1, 7)]))].into_iter().collect(),
            ..StateDiff::default()
        },
        false,
    ));
    store.write(genesis).expect("writes");
    history::start(&store, 0).expect("starts");
    // Block 1: alice 90, slot 1 = 8; block 2: bob created with 10; block 4: alice 50,
    // slot 1 = 0 (deleted), slot 2 = 3.
    flush(
        &store,
        1,
        alice,
        change(90, &[(1, 8)]),
        PriorValues {
            accounts: vec![(alice, 1, Some(funded(100)))],
            slots: vec![(alice, U256::from(1), 1, U256::from(7))],
        },
    );
    flush(
        &store,
        2,
        bob,
        change(10, &[]),
        PriorValues {
            accounts: vec![(bob, 2, None)],
            slots: vec![],
        },
    );
    flush(
        &store,
        4,
        alice,
        change(50, &[(1, 0), (2, 3)]),
        PriorValues {
            accounts: vec![(alice, 4, Some(funded(90)))],
            slots: vec![
                (alice, U256::from(1), 4, U256::from(8)),
                (alice, U256::from(2), 4, U256::ZERO),
            ],
        },
    );
    let balance = |address, number| {
        account_at(&store, address, number)
            .expect("reads")
            .map(|account| account.balance.to::<u64>())
    };
    let slot = |slot: u64, number| {
        storage_at(&store, alice, U256::from(slot), number)
            .expect("reads")
            .to::<u64>()
    };
    assert_eq!(
        (0..=5).map(|n| balance(alice, n)).collect::<Vec<_>>(),
        [100, 90, 90, 90, 50, 50].map(Some)
    );
    assert_eq!(
        (0..=5).map(|n| balance(bob, n)).collect::<Vec<_>>(),
        [None, None, Some(10), Some(10), Some(10), Some(10)]
    );
    assert_eq!(
        (0..=5).map(|n| slot(1, n)).collect::<Vec<_>>(),
        [7, 8, 8, 8, 0, 0]
    );
    assert_eq!(
        (0..=5).map(|n| slot(2, n)).collect::<Vec<_>>(),
        [0, 0, 0, 0, 3, 3]
    );
    // A neighbouring address's entries are not this one's.
    assert_eq!(balance(Address::with_last_byte(0xa2), 0), None);
    assert_eq!(
        stored_slots(&store, alice).expect("reads"),
        [(U256::from(2), U256::from(3))]
    );

    // Pruned up to block 2: every block from 2 on reads as before; block 1's entries,
    // which only reads before block 1 needed, are gone.
    assert_eq!(prune(&store, 2, 1).expect("prunes"), 3);
    assert_eq!(
        window(&store).expect("reads"),
        Some(HistoryWindow { from: 2 })
    );
    assert_eq!(
        (2..=5).map(|n| balance(alice, n)).collect::<Vec<_>>(),
        [90, 90, 50, 50].map(Some)
    );
    assert_eq!(balance(bob, 2), Some(10));
    assert_eq!(
        (2..=5).map(|n| slot(1, n)).collect::<Vec<_>>(),
        [8, 8, 0, 0]
    );
    assert_eq!(
        store
            .seek(Table::AccountHistory, &[])
            .expect("reads")
            .map(|(key, _)| key[19]),
        Some(0xa1)
    );

    history::drop_all(&store).expect("drops");
    assert_eq!(window(&store).expect("reads"), None);
    assert_eq!(store.seek(Table::AccountHistory, &[]).expect("reads"), None);
    assert_eq!(store.seek(Table::StorageHistory, &[]).expect("reads"), None);
    // The state itself is untouched.
    assert_eq!(account(&store, alice).expect("reads"), Some(funded(50)));
    assert_eq!(
        storage(&store, alice, U256::from(2)).expect("reads"),
        U256::from(3)
    );
}

#[test]
fn a_damaged_history_entry_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = LmdbStore::open(dir.path(), 1 << 24).expect("opens");
    let alice = Address::with_last_byte(1);
    let mut batch = WriteBatch::new();
    let mut key = alice.to_vec();
    key.extend_from_slice(&5u64.to_be_bytes());
    batch.put(Table::AccountHistory, &key, [9u8, 1]);
    let mut slot_key = key[..20].to_vec();
    slot_key.extend_from_slice(&[0; 32]);
    slot_key.extend_from_slice(&5u64.to_be_bytes());
    batch.put(Table::StorageHistory, &slot_key, [1u8; 33]);
    batch.put(Table::Meta, b"history-from", [1u8; 3]);
    store.write(batch).expect("writes");
    assert!(account_at(&store, alice, 1).is_err());
    assert!(storage_at(&store, alice, U256::ZERO, 1).is_err());
    assert!(window(&store).is_err());
}
