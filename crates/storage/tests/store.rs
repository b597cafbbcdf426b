//! The LMDB store: every table round-trips, batches are atomic, data survives reopening,
//! and a full map is a clear error that leaves stored data intact.

use stave_storage::{KvStore, LmdbStore, StorageError, Table, WriteBatch};

#[test]
fn every_table_round_trips_and_tables_are_separate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 16 << 20).expect("opens");
    let mut batch = WriteBatch::new();
    for (i, table) in Table::ALL.into_iter().enumerate() {
        batch.put(table, b"key", vec![i as u8; 3]);
    }
    store.write(batch).expect("writes");
    for (i, table) in Table::ALL.into_iter().enumerate() {
        assert_eq!(
            store.get(table, b"key").expect("reads"),
            Some(vec![i as u8; 3]),
            "{}",
            table.name()
        );
        assert_eq!(store.get(table, b"other").expect("reads"), None);
    }
    let mut batch = WriteBatch::new();
    batch.delete(Table::Accounts, b"key");
    store.write(batch).expect("writes");
    assert_eq!(store.get(Table::Accounts, b"key").expect("reads"), None);
    assert!(store.get(Table::Code, b"key").expect("reads").is_some());
}

#[test]
fn data_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = LmdbStore::open(dir.path(), 16 << 20).expect("opens");
        let mut batch = WriteBatch::new();
        batch.put(Table::Meta, b"head", 42u64.to_be_bytes());
        store.write(batch).expect("writes");
    }
    let store = LmdbStore::open(dir.path(), 16 << 20).expect("reopens");
    assert_eq!(
        store.get(Table::Meta, b"head").expect("reads"),
        Some(42u64.to_be_bytes().to_vec())
    );
}

#[test]
fn a_full_map_fails_the_whole_batch_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let map_size = 1 << 20;
    let store = LmdbStore::open(dir.path(), map_size).expect("opens");
    let mut first = WriteBatch::new();
    first.put(Table::Meta, b"head", b"1");
    store.write(first).expect("small batch fits");
    // 2 MiB of values into a 1 MiB map, with a marker written first.
    let mut big = WriteBatch::new();
    big.put(Table::Meta, b"head", b"2");
    for i in 0u32..512 {
        big.put(Table::Bodies, i.to_be_bytes(), vec![7u8; 4096]);
    }
    let err = store.write(big).expect_err("does not fit");
    assert!(
        matches!(err, StorageError::MapFull { map_size: m } if m == map_size),
        "{err}"
    );
    assert!(err.to_string().contains("raise `map_size`"), "{err}");
    // Nothing of the failed batch is visible; what was there before still is.
    assert_eq!(
        store.get(Table::Meta, b"head").expect("reads"),
        Some(b"1".to_vec())
    );
    assert_eq!(
        store
            .get(Table::Bodies, &0u32.to_be_bytes())
            .expect("reads"),
        None
    );
}

#[test]
fn a_write_in_two_parts_is_one_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 1 << 20).expect("opens");
    let mut first = WriteBatch::new();
    first.put(Table::Meta, b"head", b"1");
    let mut called = 0;
    store
        .write_then(first, &mut || {
            called += 1;
            let mut rest = WriteBatch::new();
            rest.put(Table::Bodies, 1u32.to_be_bytes(), b"body");
            rest
        })
        .expect("fits");
    assert_eq!(called, 1);
    assert_eq!(
        store
            .get(Table::Bodies, &1u32.to_be_bytes())
            .expect("reads"),
        Some(b"body".to_vec())
    );
    // The second part overflows the map: nothing of the first is visible either.
    let mut first = WriteBatch::new();
    first.put(Table::Meta, b"head", b"2");
    let err = store
        .write_then(first, &mut || {
            let mut rest = WriteBatch::new();
            for i in 0u32..512 {
                rest.put(Table::Bodies, (i + 2).to_be_bytes(), vec![7u8; 4096]);
            }
            rest
        })
        .expect_err("does not fit");
    assert!(matches!(err, StorageError::MapFull { .. }), "{err}");
    assert_eq!(
        store.get(Table::Meta, b"head").expect("reads"),
        Some(b"1".to_vec())
    );
}

#[test]
fn every_thread_reads_what_a_write_committed_after_its_earlier_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 1 << 30).expect("open");
    for round in 0u8..20 {
        // rayon's threads live on from round to round, keeping their read transactions.
        let seen = rayon::broadcast(|_| store.get(Table::Meta, b"round").expect("get"));
        let expected = round.checked_sub(1).map(|previous| vec![previous]);
        assert!(
            seen.iter().all(|value| *value == expected),
            "round {round}: {seen:?}"
        );
        let mut batch = WriteBatch::new();
        batch.put(Table::Meta, b"round", vec![round]);
        store.write(batch).expect("write");
        assert_eq!(
            store.get(Table::Meta, b"round").expect("get"),
            Some(vec![round])
        );
    }
}

#[test]
fn a_store_read_from_many_threads_closes_and_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    for value in 0u8..3 {
        let store = LmdbStore::open(dir.path(), 1 << 30).expect("reopen");
        let mut batch = WriteBatch::new();
        batch.put(Table::Meta, b"k", vec![value]);
        store.write(batch).expect("write");
        // Pool threads keep read transactions and outlive the store.
        rayon::broadcast(|_| store.get(Table::Meta, b"k").expect("get"));
    }
    let store = LmdbStore::open(dir.path(), 1 << 30).expect("reopen");
    assert_eq!(store.get(Table::Meta, b"k").expect("get"), Some(vec![2]));
}
