//! The import pipeline end to end: blocks built on one data dir import into another to the
//! same head and state; tampered blocks are refused; redelivery is a no-op.

use std::{sync::Arc, time::Duration};

use alloy_consensus::TypedTransaction;
use stave_exec::StateReader;
use stave_node::{Chain, ImportError, Incoming, Parallelism, Replayed};
use stave_primitives::{
    Address, ChainSpec, RecoveredTx, SignedTx, StateDiff, U256, dev::dev_account,
    encode_stored_diff,
};
use stave_sdk::{
    LocalSigner, TxBuilder, Workload, contracts::stave_token_balance_slot, signed_workload,
    workload_genesis,
};
use stave_storage::{
    KvStore, LmdbStore, Table, WriteBatch,
    commit::DATA_FORMAT,
    read::{data_format, head, senders},
};

const CHAIN_ID: u64 = 1337;
const TOKEN: Address = Address::repeat_byte(0xe2);

fn store() -> (tempfile::TempDir, LmdbStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 256 << 20).expect("opens");
    (dir, store)
}

/// Senders by their known keys: tx i comes from dev account i.
fn recovered(txs: Vec<SignedTx>) -> Vec<RecoveredTx> {
    txs.into_iter()
        .enumerate()
        .map(|(i, tx)| RecoveredTx {
            tx,
            sender: dev_account(i as u64).address,
        })
        .collect()
}

/// Dev accounts 0..40 each sign the transaction `make(i)` makes.
fn signed(make: impl Fn(u64) -> TypedTransaction) -> Vec<SignedTx> {
    (0..40u64)
        .map(|i| {
            let signer = LocalSigner::from_secret(&dev_account(i).secret).expect("key");
            signer.sign_tx(make(i))
        })
        .collect()
}

/// Three blocks: transfers, ERC-20 transfers, then transfers again.
fn build_chain(chain: &mut Chain<'_>) -> Vec<Vec<u8>> {
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let transfers = signed_workload(Workload::Transfer, &builder, 40).expect("signs");
    let erc20 =
        signed(|_| builder.erc20_transfer(1, TOKEN, Address::repeat_byte(7), U256::from(5)));
    let again = signed(|_| builder.transfer(2, Address::repeat_byte(9), U256::from(1)));
    [transfers, erc20, again]
        .into_iter()
        .enumerate()
        .map(|(i, txs)| {
            chain
                .build(recovered(txs), 1_700_000_000 + i as u64)
                .expect("builds")
        })
        .collect()
}

/// A genesis and three blocks built on it, with the producer's data dir.
fn produced() -> (ChainSpec, tempfile::TempDir, LmdbStore, Vec<Vec<u8>>) {
    let spec = workload_genesis(CHAIN_ID, 40, Some(TOKEN));
    let (dir, store) = store();
    let blocks = build_chain(&mut Chain::open(&store, &spec, 2).expect("opens"));
    (spec, dir, store, blocks)
}

#[test]
fn blocks_built_on_one_node_import_on_another_to_the_same_state() {
    let (spec, _a, store_a, blocks) = produced();
    let producer_head = head(&store_a).expect("reads").expect("head");
    assert_eq!(producer_head.0, 3);

    let (_b, store_b) = store();
    let mut follower = Chain::open(&store_b, &spec, 2).expect("opens");
    for (i, block) in blocks.iter().enumerate() {
        let imported = follower.import(block).expect("imports");
        assert_eq!(imported.number, i as u64 + 1);
        assert!(imported.new);
    }
    assert_eq!(follower.head().expect("head"), producer_head);
    // Reopening the producer's data dir rebuilds its state layers by re-executing the
    // blocks after the flushed state; both states agree.
    let producer = Chain::open(&store_a, &spec, 2).expect("reopens");
    let (ours, theirs) = (follower.layers(), producer.layers());
    let (ours, theirs) = (ours.latest(), theirs.latest());
    for i in 0..40 {
        let address = dev_account(i).address;
        let account = ours.account(address).expect("reads");
        assert_eq!(account, theirs.account(address).expect("reads"));
        assert_eq!(account.expect("exists").nonce, 3);
    }
    // Export gives back exactly the blocks.
    for (i, block) in blocks.iter().enumerate() {
        assert_eq!(
            follower
                .encoded_block(i as u64 + 1)
                .expect("reads")
                .as_ref(),
            Some(block)
        );
    }
    // Redelivery is a no-op.
    assert!(!follower.import(&blocks[1]).expect("redelivered").new);

    // Every stage serial: the same chain.
    let (_c, store_c) = store();
    let mut serial =
        Chain::open_with(&store_c, &spec, 1, Parallelism::Serial, None).expect("opens");
    for block in &blocks {
        serial.import(block).expect("imports serially");
    }
    assert_eq!(serial.head().expect("head"), producer_head);
}

#[test]
fn a_restart_re_executes_stored_blocks_with_the_senders_recorded_at_import() {
    let (spec, _a, store, blocks) = produced();
    // Without its journaled state diff, block 2 is executed again on reopening.
    let mut batch = WriteBatch::new();
    batch.delete(Table::StateDiffs, 2u64.to_be_bytes());
    store.write(batch).expect("writes");
    let imported: Vec<Address> = stave_codec::decode_block(&blocks[1])
        .expect("decodes")
        .transactions()
        .iter()
        .map(|tx| tx.recover_sender().expect("recovers"))
        .collect();
    assert_eq!(senders(&store, 2).expect("reads"), Some(imported.clone()));
    let rewrite = |senders: Option<Vec<Address>>| {
        let mut batch = WriteBatch::new();
        let key = 2u64.to_be_bytes();
        match senders {
            Some(senders) => batch.put(Table::Senders, key, senders.concat()),
            None => batch.delete(Table::Senders, key),
        }
        store.write(batch).expect("writes");
    };
    // Replay trusts the stored senders (no recovery): a wrong one makes block 2 fail.
    let mut wrong = imported.clone();
    wrong[0] = Address::repeat_byte(0x55);
    rewrite(Some(wrong));
    let err = Chain::open(&store, &spec, 2)
        .err()
        .expect("block 2 no longer replays");
    assert!(
        matches!(
            err,
            ImportError::Execute { number: 2, .. } | ImportError::HeaderMismatch { number: 2, .. }
        ),
        "{err}"
    );
    // A data dir from before the table: the senders are recovered again.
    rewrite(None);
    let chain = Chain::open(&store, &spec, 2).expect("reopens");
    assert_eq!(chain.head().expect("head").0, 3);
    rewrite(Some(imported));
    Chain::open(&store, &spec, 2).expect("reopens");
}

#[test]
fn a_restart_rebuilds_state_from_the_journal_and_executes_blocks_without_a_usable_one() {
    let (_b, store_b) = store();
    let (spec, _a, store, blocks) = produced();
    let mut reference = Chain::open(&store_b, &spec, 2).expect("opens");
    for block in &blocks {
        reference.import(block).expect("imports");
    }
    let addresses: Vec<Address> = (0..40)
        .map(|i| dev_account(i).address)
        .chain([TOKEN, Address::repeat_byte(7), Address::repeat_byte(9)])
        .collect();
    let same_state = |chain: &Chain<'_>| {
        let (ours, theirs) = (chain.layers(), reference.layers());
        let (ours, theirs) = (ours.latest(), theirs.latest());
        for address in &addresses {
            assert_eq!(
                ours.account(*address).expect("reads"),
                theirs.account(*address).expect("reads"),
                "{address}"
            );
        }
        for holder in [dev_account(0).address, Address::repeat_byte(7)] {
            let slot = U256::from_be_bytes(stave_token_balance_slot(holder).0);
            let balance = ours.storage(TOKEN, slot).expect("reads");
            assert_eq!(balance, theirs.storage(TOKEN, slot).expect("reads"));
            assert!(!balance.is_zero(), "{holder} holds tokens");
        }
    };
    let reopened = Chain::open(&store, &spec, 2).expect("reopens");
    assert_eq!(
        reopened.replayed(),
        Replayed {
            journaled: 3,
            executed: 0
        }
    );
    same_state(&reopened);
    drop(reopened);

    // Garbage, a well-formed diff that is not the block's, and none at all: each of those
    // blocks is executed again, to the same state.
    let mut batch = WriteBatch::new();
    batch.put(Table::StateDiffs, 1u64.to_be_bytes(), vec![0xff; 7]);
    batch.put(
        Table::StateDiffs,
        2u64.to_be_bytes(),
        encode_stored_diff(&StateDiff::default()),
    );
    batch.delete(Table::StateDiffs, 3u64.to_be_bytes());
    store.write(batch).expect("writes");
    let reopened = Chain::open(&store, &spec, 2).expect("reopens");
    assert_eq!(
        reopened.replayed(),
        Replayed {
            journaled: 0,
            executed: 3
        }
    );
    same_state(&reopened);
}

#[test]
fn a_block_whose_state_root_lies_is_refused_and_nothing_is_stored() {
    let (spec, _a, _store_a, blocks) = produced();

    let (_b, store_b) = store();
    let mut follower = Chain::open(&store_b, &spec, 2).expect("opens");
    let mut block = stave_codec::decode_block(&blocks[0])
        .expect("decodes")
        .unseal();
    block.header.state_root = stave_primitives::B256::repeat_byte(1);
    let forged = stave_codec::encode_block(&block).expect("encodes");
    let err = follower.import(&forged).expect_err("lying root");
    assert!(
        matches!(
            err,
            ImportError::HeaderMismatch {
                field: "state_root",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(follower.head().expect("head").0, 0);
    // A block out of order is refused too.
    let err = follower.import(&blocks[1]).expect_err("gap");
    assert!(
        matches!(err, ImportError::NotChild { number: 2, .. }),
        "{err}"
    );
    // The honest block still imports.
    follower.import(&blocks[0]).expect("imports");
}

#[test]
fn every_stage_records_its_time_per_block() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let (spec, _a, _store_a, blocks) = produced();
    let (_b, store_b) = store();
    // A block imported alone is prefetched beside its execution.
    let prefetcher =
        stave_node::Prefetcher::with_threads(1, stave_node::DISK_LOAD).expect("threads");
    let mut follower = Chain::open(&store_b, &spec, 2)
        .expect("opens")
        .with_prefetcher(prefetcher);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        for block in &blocks {
            follower.import(block).expect("imports");
        }
    });
    let mut stages = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if key.key().name() != stave_node::STAGE_SECONDS {
            continue;
        }
        let label = key
            .key()
            .labels()
            .next()
            .expect("stage label")
            .value()
            .to_string();
        let DebugValue::Histogram(samples) = value else {
            panic!("a histogram")
        };
        assert_eq!(samples.len(), blocks.len(), "{label}: one sample per block");
        stages.push(label);
    }
    stages.sort();
    assert_eq!(
        stages,
        ["commit", "decode", "execute", "prefetch", "verify"]
    );
}

#[test]
fn a_prefetch_stops_when_told_or_when_the_state_is_warm() {
    let spec = workload_genesis(CHAIN_ID, 40, Some(TOKEN));
    let (_dir, store) = store();
    let chain = Chain::open(&store, &spec, 2).expect("opens");
    let (genesis, _) = stave_node::genesis(&spec);
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let txs = recovered(signed(|i| {
        builder.transfer(0, Address::with_last_byte(i as u8 + 100), U256::from(1))
    }));
    let layers = chain.layers();
    let load = |prefetcher: stave_node::Prefetcher, txs: &[RecoveredTx], stop: bool| {
        let stop = std::sync::atomic::AtomicBool::new(stop);
        prefetcher.prefetch(
            &layers.latest(),
            stave_exec::BlockEnv::new(CHAIN_ID, genesis.header()),
            txs,
            &stop,
        );
    };
    // What the prefetches loaded and execution never used is counted when the pool is
    // emptied.
    let loaded = || {
        layers.clear_origin();
        layers.take_reads().wasted_prefetch
    };
    // Every load counts as one from the disk: the state is cold.
    let cold = || stave_node::Prefetcher::new(2, Duration::ZERO).expect("threads");
    // Stopped before it began: nothing loaded.
    load(cold(), &txs, true);
    assert_eq!(loaded(), 0);
    // Left to run: every sender and every recipient.
    load(cold(), &txs, false);
    assert_eq!(loaded(), 80);
    // Every load counts as one from memory: the probe, on the calling thread alone,
    // stops after `WARM_RUN` transactions (a sender and a recipient each).
    let warm = stave_node::Prefetcher::new(2, Duration::from_secs(3600)).expect("threads");
    load(warm, &txs, false);
    assert_eq!(loaded(), 2 * u64::from(stave_node::WARM_RUN));

    // Token transfers whose accounts are in memory already still have their balance
    // slots loaded: a transaction is judged by all its loads, its call's too.
    let to_token = recovered(signed(|_| builder.transfer(0, TOKEN, U256::ZERO)));
    load(cold(), &to_token, false);
    // The senders, the token, and what a call to it with no data reads.
    let accounts = loaded();
    let token_transfers = recovered(signed(|i| {
        builder.erc20_transfer(
            0,
            TOKEN,
            Address::with_last_byte(i as u8 + 100),
            U256::from(1),
        )
    }));
    load(cold(), &to_token, false);
    load(cold(), &token_transfers, false);
    assert!(
        loaded() >= accounts + 80,
        "each sender's and each recipient's balance slot"
    );
}

#[test]
fn building_and_validating_beside_a_prefetch_change_nothing() {
    let (spec, _a, _store_a, blocks) = produced();
    let prefetching = |store| {
        Chain::open(store, &spec, 2)
            .expect("opens")
            .with_prefetcher(
                stave_node::Prefetcher::with_threads(2, stave_node::DISK_LOAD).expect("threads"),
            )
    };
    let (_b, store_b) = store();
    assert_eq!(build_chain(&mut prefetching(&store_b)), blocks);
    let (_c, store_c) = store();
    let validator = prefetching(&store_c);
    let first = validator
        .validate_on(&[], blocks[0].as_slice(), u64::MAX)
        .expect("valid");
    validator
        .validate_on(&[&first], blocks[1].as_slice(), u64::MAX)
        .expect("valid on its parent");
}

#[test]
fn the_stream_pipeline_with_prefetch_ends_at_the_same_head_and_state() {
    let (spec, _a, _store_a, blocks) = produced();
    let mut heads = Vec::new();
    let mut states = Vec::new();
    for prefetch in [false, true] {
        let (_dir, store) = store();
        let prefetcher =
            Arc::new(stave_node::Prefetcher::new(1, stave_node::DISK_LOAD).expect("threads"));
        let mut chain = Chain::open(&store, &spec, 2)
            .expect("opens")
            .with_prefetcher(prefetch.then_some(prefetcher));
        let mut numbers = Vec::new();
        chain
            .import_stream(blocks.iter().map(Vec::as_slice), |imported| {
                numbers.push(imported.number)
            })
            .expect("imports");
        assert_eq!(numbers, [1, 2, 3]);
        heads.push(chain.head().expect("head"));
        let layers = chain.layers();
        let state = layers.latest();
        states.push(
            (0..40)
                .map(|i| state.account(dev_account(i).address).expect("reads"))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(heads[0], heads[1]);
    assert_eq!(states[0], states[1]);
}

#[test]
fn agreed_senders_skip_recovery_and_wrong_ones_give_way_to_the_signatures() {
    let (spec, _a, store_a, blocks) = produced();
    let stored = |store: &LmdbStore| -> Vec<Vec<Address>> {
        (1..=3)
            .map(|n| senders(store, n).expect("reads").expect("stored"))
            .collect()
    };
    let truth = stored(&store_a);
    let wrong = vec![Address::repeat_byte(0x77); 40];
    let short = vec![Address::repeat_byte(0x77); 39];
    // (agreed senders per block, signatures each block must recover).
    let cases: [(Vec<Option<&[Address]>>, u64); 4] = [
        (truth.iter().map(|s| Some(s.as_slice())).collect(), 0),
        (vec![None; 3], 40),
        // Agreed but wrong: the header's roots refute them, the signatures decide.
        (vec![Some(wrong.as_slice()); 3], 40),
        // Not one per transaction: not used at all.
        (vec![Some(short.as_slice()); 3], 40),
    ];
    for (agreed, expected) in cases {
        let (_dir, store) = store();
        let mut chain = Chain::open(&store, &spec, 2).expect("opens");
        let mut recoveries = Vec::new();
        chain
            .import_stream(
                blocks
                    .iter()
                    .zip(&agreed)
                    .map(|(bytes, agreed_senders)| Incoming {
                        bytes,
                        agreed_senders: *agreed_senders,
                    }),
                |imported| recoveries.push(imported.recoveries),
            )
            .expect("imports");
        assert_eq!(recoveries, [expected; 3], "{agreed:?}");
        assert_eq!(head(&store).expect("reads"), head(&store_a).expect("reads"));
        assert_eq!(stored(&store), truth);
    }
}

#[test]
fn a_data_dir_of_another_data_format_is_refused_with_both_formats_named() {
    let (spec, _dir, stored, _) = produced();
    assert_eq!(data_format(&stored).expect("reads"), Some(DATA_FORMAT));
    // A data dir created before formats were recorded: format 1.
    let mut batch = WriteBatch::new();
    batch.delete(Table::Meta, b"format");
    stored.write(batch).expect("writes");
    let refused = Chain::open_with(&stored, &spec, 2, Parallelism::Parallel, None).err();
    match refused {
        Some(ImportError::DataFormat { found, expected }) => {
            assert_eq!((found, expected), (1, DATA_FORMAT));
        }
        other => panic!("expected a data format error, got {other:?}"),
    }
    let (_empty_dir, empty) = store();
    assert_eq!(data_format(&empty).expect("reads"), None);
}
