//! The layered state equals the plain state it stands for, at the head and at every kept
//! block, through pushes and flushes, and survives reopening the store.

use std::collections::BTreeMap;

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use proptest::prelude::*;
use stave_primitives::{AccountDiff, AccountState, MemoryState, StateDiff, StateReader};
use stave_state::{FLUSH_BATCH, History, KEPT_LAYERS, Snapshot, StateLayerError, StateLayers};
use stave_storage::{LmdbStore, commit::TxPositions, read};

/// A block's changes over a small key space, so blocks overwrite each other's keys.
fn diff_strategy() -> impl Strategy<Value = StateDiff> {
    let account = (
        0u8..12,
        0u64..5,
        0u64..1000,
        any::<bool>(),
        proptest::collection::btree_map(0u8..4, 0u64..3, 0..3),
    );
    proptest::collection::vec(account, 0..6).prop_map(|changes| {
        let mut diff = StateDiff::default();
        for (who, nonce, balance, delete, slots) in changes {
            let address = Address::with_last_byte(who);
            let info = (!delete).then_some(AccountState {
                nonce,
                balance: U256::from(balance),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            });
            let storage: BTreeMap<U256, U256> = slots
                .into_iter()
                .map(|(slot, value)| (U256::from(slot), U256::from(value)))
                .collect();
            diff.accounts.insert(
                address,
                AccountDiff {
                    info,
                    storage_cleared: delete,
                    storage: if delete {
                        Default::default()
                    } else {
                        storage.into_iter().collect()
                    },
                },
            );
        }
        let code = Bytes::from(vec![0x60, diff.accounts.len() as u8]);
        diff.codes.insert(keccak256(&code), code);
        diff
    })
}

/// Transactions per block in the layer tests.
const TXS_PER_BLOCK: u32 = 3;

/// A stand-in hash for transaction `index` of block `number`.
fn tx_hash(number: u64, index: u32) -> B256 {
    keccak256([number.to_be_bytes().as_slice(), &index.to_be_bytes()].concat())
}

/// Block `number`'s transaction positions.
fn tx_positions(number: u64) -> TxPositions {
    TxPositions::new((0..TXS_PER_BLOCK).map(|index| tx_hash(number, index)))
}

fn assert_same(layered: &dyn StateReader, plain: &MemoryState, context: &str) {
    for who in 0u8..12 {
        let address = Address::with_last_byte(who);
        assert_eq!(
            layered.account(address).expect("reads"),
            plain.account(address).expect("reads"),
            "{context}: account {who}"
        );
        for slot in 0u64..4 {
            assert_eq!(
                layered.storage(address, U256::from(slot)).expect("reads"),
                plain.storage(address, U256::from(slot)).expect("reads"),
                "{context}: account {who} slot {slot}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]
    #[test]
    fn layers_equal_the_plain_state(diffs in proptest::collection::vec(diff_strategy(), 1..24)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
        let layers = StateLayers::new(&store, 0, 64);
        let mut plain = MemoryState::default();
        let mut history = vec![plain.clone()];
        // Repeat the blocks so the run passes the flush threshold.
        let blocks = KEPT_LAYERS + 2 * FLUSH_BATCH + 3;
        for number in 1..=blocks as u64 {
            let diff = diffs[number as usize % diffs.len()].clone();
            plain.apply(&diff);
            history.push(plain.clone());
            layers.push(number, B256::with_last_byte(number as u8), diff, tx_positions(number)).expect("pushes");
            layers.flush(true).expect("flushes");
            assert_same(&layers.latest(), &plain, &format!("head {number}"));
        }
        let flushed = layers.flushed();
        prop_assert!(flushed > 0 && flushed as usize <= blocks - KEPT_LAYERS);
        for number in flushed..=blocks as u64 {
            layers
                .with_state_at(number, |state| assert_same(state, &history[number as usize], &format!("at {number}")))
                .expect("kept");
        }
        let too_old = layers.with_state_at(flushed - 1, |_| ());
        prop_assert!(matches!(too_old, Err(StateLayerError::NotAvailable { .. })), "{:?}", too_old.err());
        prop_assert_eq!(read::flushed_height(&store).expect("reads"), Some(flushed));
        // Every block's transactions are found: the flushed ones' on disk, the others' in
        // their layers.
        for number in 1..=blocks as u64 {
            for index in 0..TXS_PER_BLOCK {
                let hash = tx_hash(number, index);
                prop_assert_eq!(layers.tx_location(hash).expect("reads"), Some((number, index)));
                let on_disk = read::tx_location(&store, hash).expect("reads");
                prop_assert_eq!(on_disk.is_some(), number <= flushed, "block {}", number);
            }
        }
        prop_assert_eq!(layers.tx_location(tx_hash(blocks as u64 + 1, 0)).expect("reads"), None);
        // The disk alone holds the flushed state.
        let reopened = StateLayers::new(&store, flushed, 64);
        assert_same(&reopened.latest(), &history[flushed as usize], "disk after reopening");
        drop(reopened);
        // A clean stop writes every layer: the disk then holds the head's state and index.
        prop_assert_eq!(layers.flush_all(true).expect("flushes"), Some(blocks as u64));
        prop_assert_eq!(layers.flush_all(true).expect("flushes"), None);
        drop(layers);
        let reopened = StateLayers::new(&store, blocks as u64, 64);
        assert_same(&reopened.latest(), &history[blocks], "disk after a full flush");
        prop_assert_eq!(
            read::tx_location(&store, tx_hash(blocks as u64, 1)).expect("reads"),
            Some((blocks as u64, 1))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    #[test]
    fn with_history_every_past_block_reads_as_the_plain_state(
        diffs in proptest::collection::vec(diff_strategy(), 1..24),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
        let mut layers = StateLayers::new(&store, 0, 64);
        layers.keep_history(History::All).expect("starts the history");
        let mut plain = MemoryState::default();
        let mut history = vec![plain.clone()];
        let blocks = KEPT_LAYERS + 3 * FLUSH_BATCH + 5;
        for number in 1..=blocks as u64 {
            let diff = diffs[number as usize % diffs.len()].clone();
            plain.apply(&diff);
            history.push(plain.clone());
            layers.push(number, B256::with_last_byte(number as u8), diff, tx_positions(number)).expect("pushes");
            layers.flush(true).expect("flushes");
        }
        let flushed = layers.flushed();
        prop_assert!(flushed >= 3 * FLUSH_BATCH as u64);
        prop_assert_eq!(layers.oldest(), 0);
        for number in 0..=blocks as u64 {
            layers
                .with_state_at(number, |state| {
                    assert_eq!(state.number(), number);
                    assert_same(state, &history[number as usize], &format!("at {number}"))
                })
                .expect("kept");
        }
        // After a clean stop and a reopening, the history still serves every block.
        layers.flush_all(true).expect("flushes");
        drop(layers);
        let mut reopened = StateLayers::new(&store, blocks as u64, 64);
        reopened.keep_history(History::All).expect("keeps the stored history");
        for number in 0..=blocks as u64 {
            reopened
                .with_state_at(number, |state| assert_same(state, &history[number as usize], &format!("reopened, at {number}")))
                .expect("kept");
        }
        // Turned off, the history is gone: only the disk layer's block is served.
        drop(reopened);
        let mut recent = StateLayers::new(&store, blocks as u64, 64);
        recent.keep_history(History::Recent).expect("drops the history");
        prop_assert_eq!(recent.oldest(), blocks as u64);
        let refused = recent.with_state_at(blocks as u64 - 1, |_| ());
        prop_assert!(matches!(refused, Err(StateLayerError::NotAvailable { .. })), "{:?}", refused.err());
        prop_assert_eq!(stave_storage::history::window(&store).expect("reads"), None);
    }
}

#[test]
fn a_window_of_blocks_moves_with_the_chain_and_serves_what_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let window = KEPT_LAYERS as u64 + 40;
    let mut layers = StateLayers::new(&store, 0, 64);
    layers
        .keep_history(History::Blocks(window))
        .expect("starts");
    let who = |number: u64| (number % 5) as u8;
    let mut balances = vec![[None; 5]];
    for number in 1..=600u64 {
        let mut now = *balances.last().expect("genesis");
        now[who(number) as usize] = Some(U256::from(number));
        balances.push(now);
        layers
            .push(
                number,
                B256::with_last_byte(number as u8),
                change(who(number), number, number),
                tx_positions(number),
            )
            .expect("pushes");
        layers.flush(true).expect("flushes");
    }
    let oldest = layers.oldest();
    assert!(
        oldest > 600 - 2 * window && oldest <= 600 - window,
        "oldest {oldest}"
    );
    for number in oldest..=600 {
        layers
            .with_state_at(number, |state| {
                for account in 0..5u8 {
                    assert_eq!(
                        balance(state, account),
                        balances[number as usize][account as usize],
                        "{number} {account}"
                    );
                }
            })
            .expect("in the window");
    }
    assert!(matches!(
        layers.with_state_at(oldest - 1, |_| ()),
        Err(StateLayerError::NotAvailable { .. })
    ));
}

#[test]
fn a_pinned_block_is_not_flushed_and_the_chain_unwinds_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let push = |number: u64, value: u64| {
        layers
            .push(
                number,
                B256::with_last_byte(number as u8),
                change(1, value, value),
                tx_positions(number),
            )
            .expect("pushes");
        layers.flush(true).expect("flushes");
    };
    push(1, 1);
    push(2, 2);
    layers.pin(2).expect("pins");
    for number in 3..=(KEPT_LAYERS + 3 * FLUSH_BATCH) as u64 {
        push(number, number);
    }
    let flushed = layers.flushed();
    assert!(flushed <= 2, "flushed {flushed}");
    layers.unwind(2).expect("unwinds");
    assert_eq!(layers.head(), 2);
    assert_eq!(balance(&layers.latest(), 1), Some(U256::from(2)));
    // The chain goes on from block 2 with other blocks.
    push(3, 1_000);
    assert_eq!(balance(&layers.latest(), 1), Some(U256::from(1_000)));
    layers.unpin(2);
    for number in 4..=(KEPT_LAYERS + 2 * FLUSH_BATCH) as u64 {
        push(number, number);
    }
    assert!(layers.flushed() > 2);
    assert!(matches!(
        layers.unwind(1),
        Err(StateLayerError::NotAvailable { .. })
    ));
    assert!(matches!(
        layers.pin(1),
        Err(StateLayerError::NotAvailable { .. })
    ));
}

#[test]
fn a_layer_must_follow_the_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 5, 64);
    let error = layers
        .push(7, B256::ZERO, StateDiff::default(), TxPositions::default())
        .expect_err("gap");
    assert!(matches!(
        error,
        StateLayerError::NotChild { number: 7, head: 5 }
    ));
    layers
        .push(
            6,
            B256::repeat_byte(6),
            StateDiff::default(),
            TxPositions::default(),
        )
        .expect("child");
    assert_eq!(layers.head(), 6);
    assert_eq!(
        layers.latest().block_hash(6).expect("reads"),
        B256::repeat_byte(6)
    );
}

/// Pushes block 1, changing account 1, onto `layers` and reads through the head's
/// snapshot once from a diff layer (account 1), then from disk and, once the next layer
/// was prepared (and discarded: no block is pushed), from the origin pool (account 2);
/// returns the snapshot.
fn read_from_diff_disk_and_origin<'l, 's>(layers: &'l StateLayers<'s>) -> Snapshot<'l, 's> {
    let mut diff = StateDiff::default();
    diff.accounts
        .insert(Address::with_last_byte(1), AccountDiff::default());
    layers
        .push(1, B256::ZERO, diff, TxPositions::default())
        .expect("pushes");
    let snapshot = layers.latest();
    snapshot.account(Address::with_last_byte(1)).expect("reads"); // L2
    snapshot.account(Address::repeat_byte(2)).expect("reads"); // disk
    let next = StateDiff::default();
    let prepared = layers
        .prepare(2, &next, TxPositions::default())
        .expect("prepares");
    layers.discard(prepared, &next);
    snapshot.account(Address::repeat_byte(2)).expect("reads"); // L1.5
    snapshot
}

/// The layers' reads so far as (disk, origin pool).
fn disk_and_origin_reads(layers: &StateLayers<'_>) -> (u64, u64) {
    let reads = layers.take_reads();
    (reads.disk, reads.origin)
}

#[test]
fn execution_reads_from_disk_reach_the_origin_pool_when_the_next_layer_is_prepared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    // Two accounts the filter tells apart: one's layer does not hide the other.
    let (kept, written) = (Address::repeat_byte(2), Address::repeat_byte(3));
    let before = layers.latest();
    for address in [kept, written, kept] {
        before.account(address).expect("reads");
    }
    assert_eq!(disk_and_origin_reads(&layers), (3, 0), "not kept mid-block");
    // Block 1 writes one of them: its layer hides the key, so its value from before is
    // not kept; a snapshot below the layer reads it from disk again.
    let mut diff = StateDiff::default();
    diff.accounts.insert(written, AccountDiff::default());
    layers
        .push(1, B256::ZERO, diff, TxPositions::default())
        .expect("pushes");
    before.account(kept).expect("reads");
    before.account(written).expect("reads");
    assert_eq!(disk_and_origin_reads(&layers), (1, 1));
    // A value read before a flush is dropped: the flush may have written its key.
    let other = Address::repeat_byte(4);
    layers.latest().account(other).expect("reads");
    layers.flush_all(false).expect("flushes");
    layers
        .push(2, B256::ZERO, StateDiff::default(), TxPositions::default())
        .expect("pushes");
    layers.latest().account(other).expect("reads");
    assert_eq!(disk_and_origin_reads(&layers), (2, 0));
    // Read again after the flush, it is kept.
    layers
        .push(3, B256::ZERO, StateDiff::default(), TxPositions::default())
        .expect("pushes");
    layers.latest().account(other).expect("reads");
    assert_eq!(disk_and_origin_reads(&layers), (0, 1));
}

#[test]
fn reads_are_counted_per_layer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let snapshot = read_from_diff_disk_and_origin(&layers);
    // What the executing block served itself (L1) is reported by the executor.
    snapshot.note_block_reads(3);
    // A value read from disk is kept by the origin pool alone: once the pool is
    // emptied, it comes from disk again.
    layers.clear_origin();
    snapshot.account(Address::repeat_byte(2)).expect("reads"); // disk
    // The clean cache gets what a flush writes.
    layers.flush_all(false).expect("flushes");
    layers
        .latest()
        .account(Address::with_last_byte(1))
        .expect("reads"); // L3
    let reads = layers.take_reads();
    assert_eq!(
        (
            reads.block,
            reads.diff,
            reads.disk,
            reads.origin,
            reads.clean
        ),
        (3, 1, 2, 1, 1)
    );
    assert_eq!(reads.total(), 8);
    assert_eq!(layers.take_reads().total(), 0);
}

/// `stave_state_reads_total` gets each block's reads per layer when the next block's
/// layer is pushed, not one metrics call per read.
#[test]
fn reads_reach_the_metrics_per_layer_once_a_block() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let reads_total = || {
        let mut counts: Vec<(String, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "stave_state_reads_total")
            .map(|(key, _, _, value)| {
                let layer = key
                    .key()
                    .labels()
                    .next()
                    .expect("layer")
                    .value()
                    .to_string();
                let DebugValue::Counter(count) = value else {
                    panic!("a counter")
                };
                (layer, count)
            })
            .filter(|(_, count)| *count > 0)
            .collect();
        counts.sort();
        counts
    };
    metrics::with_local_recorder(&recorder, || {
        let snapshot = read_from_diff_disk_and_origin(&layers);
        snapshot.note_block_reads(3);
        assert_eq!(
            reads_total(),
            Vec::<(String, u64)>::new(),
            "not before the next block"
        );
        layers
            .push(2, B256::ZERO, StateDiff::default(), TxPositions::default())
            .expect("pushes");
    });
    let expected = [("disk", 1), ("l1", 3), ("l15", 1), ("l2", 1)]
        .map(|(layer, count)| (layer.to_string(), count));
    assert_eq!(reads_total(), expected);
    // Taking the reads for a bench leaves the metrics' count alone, and the other way round.
    assert_eq!(layers.take_reads().total(), 6);
}

#[test]
fn a_wiped_account_reads_zero_even_where_its_slots_left_every_layer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let owner = Address::with_last_byte(0x33);
    let info = Some(AccountState {
        nonce: 1,
        balance: U256::ZERO,
        code_hash: alloy_primitives::KECCAK256_EMPTY,
    });
    let mut first = StateDiff::default();
    first.accounts.insert(
        owner,
        AccountDiff {
            info,
            storage_cleared: false,
            storage: [(U256::from(7), U256::from(70))].into_iter().collect(),
        },
    );
    layers
        .push(1, B256::ZERO, first, TxPositions::default())
        .expect("pushes");
    // Enough empty blocks that block 1 is flushed and out of every bloom.
    let quiet = 2 * KEPT_LAYERS as u64 + 1;
    for number in 2..=quiet {
        layers
            .push(
                number,
                B256::ZERO,
                StateDiff::default(),
                TxPositions::default(),
            )
            .expect("pushes");
        layers.flush(true).expect("flushes");
    }
    assert!(layers.flushed() >= 1);
    let snapshot = layers.latest();
    assert_eq!(
        snapshot.storage(owner, U256::from(7)).expect("reads"),
        U256::from(70)
    );
    let mut wipe = StateDiff::default();
    wipe.accounts.insert(
        owner,
        AccountDiff {
            info,
            storage_cleared: true,
            storage: Default::default(),
        },
    );
    layers
        .push(quiet + 1, B256::ZERO, wipe, TxPositions::default())
        .expect("pushes");
    assert_eq!(
        layers
            .latest()
            .storage(owner, U256::from(7))
            .expect("reads"),
        U256::ZERO
    );
}

/// A block's changes: account `who` gets `balance`, and so does its storage `slot`.
fn change(who: u8, balance: u64, slot: u64) -> StateDiff {
    let mut diff = StateDiff::default();
    diff.accounts.insert(
        Address::with_last_byte(who),
        AccountDiff {
            info: Some(AccountState {
                nonce: 1,
                balance: U256::from(balance),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            }),
            storage_cleared: false,
            storage: [(U256::from(slot), U256::from(balance))]
                .into_iter()
                .collect(),
        },
    );
    diff
}

/// The balance of account `who` in `state`.
fn balance(state: &dyn StateReader, who: u8) -> Option<U256> {
    let account = state.account(Address::with_last_byte(who)).expect("reads");
    account.map(|info| info.balance)
}

/// A layer prepared while its block is written is seen by no snapshot until it is
/// published; a discarded one leaves the layers as they were, and one overtaken by
/// another push of its block is refused.
#[test]
fn a_prepared_layer_is_seen_only_once_published() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    layers
        .push(1, B256::ZERO, change(1, 10, 0), TxPositions::default())
        .expect("pushes");

    let second = change(1, 20, 0);
    let prepared = layers
        .prepare(2, &second, tx_positions(2))
        .expect("follows the head");
    assert_eq!(layers.head(), 1);
    assert_eq!(balance(&layers.latest(), 1), Some(U256::from(10)));
    assert_eq!(layers.tx_location(tx_hash(2, 0)).expect("reads"), None);
    layers.discard(prepared, &second);
    assert_eq!(balance(&layers.latest(), 1), Some(U256::from(10)));

    // Another block 2 after all: prepared, overtaken by a push of block 2, refused.
    let other = change(3, 30, 0);
    let overtaken = layers
        .prepare(2, &other, tx_positions(2))
        .expect("follows the head");
    layers
        .push(2, B256::repeat_byte(2), other.clone(), tx_positions(2))
        .expect("pushes");
    let error = layers
        .publish(overtaken, B256::repeat_byte(2), other)
        .expect_err("block 2 is in");
    assert!(matches!(
        error,
        StateLayerError::NotChild { number: 2, head: 2 }
    ));

    let third = change(1, 40, 0);
    let prepared = layers
        .prepare(3, &third, tx_positions(3))
        .expect("follows the head");
    layers
        .publish(prepared, B256::repeat_byte(3), third)
        .expect("publishes");
    let head = layers.latest();
    assert_eq!(layers.head(), 3);
    assert_eq!(balance(&head, 1), Some(U256::from(40)));
    assert_eq!(balance(&head, 3), Some(U256::from(30)));
    assert_eq!(head.block_hash(3).expect("reads"), B256::repeat_byte(3));
    assert_eq!(
        layers.tx_location(tx_hash(3, 1)).expect("reads"),
        Some((3, 1))
    );
}

/// Reads go through the index of the layers that changed each account: an account
/// changed in one old block, under many blocks that changed others, reads that block's
/// value from the head, from a snapshot of an earlier block, and from a snapshot taken
/// before the flush that moved the block to disk.
#[test]
fn an_account_changed_long_ago_reads_its_value_before_and_after_its_layer_is_flushed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    let layers = StateLayers::new(&store, 0, 64);
    let old = Address::with_last_byte(1);
    // Block 1 changes the old account (slot 1); block 2 changes it again (slot 2 only);
    // every later block changes another account.
    layers
        .push(1, B256::ZERO, change(1, 10, 1), TxPositions::default())
        .expect("pushes");
    layers
        .push(2, B256::ZERO, change(1, 20, 2), TxPositions::default())
        .expect("pushes");
    let last = (KEPT_LAYERS + FLUSH_BATCH) as u64;
    for number in 3..last {
        let diff = change(2 + (number % 200) as u8, number, 0);
        layers
            .push(number, B256::ZERO, diff, TxPositions::default())
            .expect("pushes");
    }
    let reads = |state: &dyn StateReader| {
        (
            state.account(old).expect("reads").map(|info| info.balance),
            state.storage(old, U256::from(1)).expect("reads"),
            state.storage(old, U256::from(2)).expect("reads"),
        )
    };
    let expected = (Some(U256::from(20)), U256::from(10), U256::from(20));
    assert_eq!(reads(&layers.latest()), expected);
    let at_block_1 = layers.with_state_at(1, |state| reads(state)).expect("kept");
    assert_eq!(
        at_block_1,
        (Some(U256::from(10)), U256::from(10), U256::ZERO)
    );

    // The snapshot outlives the flush of blocks 1 and 2.
    let before_flush = layers.latest();
    layers
        .push(last, B256::ZERO, change(2, 1, 0), TxPositions::default())
        .expect("pushes");
    assert!(layers.flush(true).expect("flushes").is_some_and(|h| h >= 2));
    assert_eq!(reads(&before_flush), expected);
    assert_eq!(reads(&layers.latest()), expected);
}
