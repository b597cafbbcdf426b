//! The commit stage against LMDB: every table reads back what a real executed block
//! wrote, serial and parallel encodings agree, and commits are idempotent and ordered.
use alloy_primitives::{Address, B256, U256};
use stave_codec::encode_transactions;
use stave_exec::{BlockEnv, BlockInput, MemoryState, Mode, execute_serial};
use stave_primitives::{
    AccountDiff, AccountState, Block, Header, SealedBlock, StateDiff, dev::dev_account,
};
use stave_sdk::{TxBuilder, Workload, signed_workload, workload_genesis};
use stave_storage::{
    KvStore, LmdbStore, StorageError,
    commit::{
        BlockState, BlockToCommit, Committed, TxPositions, commit_block, commit_block_with,
        encode_block_batch, encode_receipts, flush_state,
    },
    read::{
        account, block_number, flushed_height, head, header, logs_bloom, receipts, senders,
        storage, stored_diff, tx_location,
    },
};

const CHAIN_ID: u64 = 1337;

struct Fixture {
    block: SealedBlock,
    body: Vec<u8>,
    receipts: Vec<stave_primitives::Receipt>,
    senders: Vec<Address>,
    diff: StateDiff,
}

impl Fixture {
    fn input(&self) -> BlockToCommit<'_> {
        BlockToCommit {
            block: &self.block,
            body: &self.body,
            receipts: &self.receipts,
            senders: &self.senders,
            state: BlockState::Applied(&self.diff),
        }
    }
}

fn genesis() -> Fixture {
    let block = Block {
        header: Header {
            number: 0,
            gas_limit: 30_000_000,
            ..Header::default()
        },
        transactions: vec![],
    };
    Fixture {
        block: block.seal(),
        body: encode_transactions(&[]).expect("empty"),
        receipts: vec![],
        senders: vec![],
        diff: StateDiff::default(),
    }
}

/// Block 1: `n` transfers from the dev accounts, executed for real.
fn block_one(parent: B256, n: usize) -> Fixture {
    let state = MemoryState::from_genesis(&workload_genesis(CHAIN_ID, n as u64, None));
    let txs = signed_workload(
        Workload::Transfer,
        &TxBuilder::new(CHAIN_ID, 1_000_000_000),
        n,
    )
    .expect("signs");
    let recovered = recovered_by_known_keys(txs.clone());
    let mut header = Header {
        parent_hash: parent,
        number: 1,
        gas_limit: 30_000_000,
        base_fee_per_gas: 7,
        proposer: Address::repeat_byte(0xb0),
        ..Header::default()
    };
    let outcome = execute_serial(BlockInput::new(
        &state,
        BlockEnv::new(CHAIN_ID, &header),
        &recovered,
        Mode::Validate,
    ))
    .expect("executes");
    header.gas_used = outcome.gas_used;
    let mut block = Block {
        header,
        transactions: txs,
    };
    block.header.transactions_root = block.compute_transactions_root();
    Fixture {
        body: encode_transactions(&block.transactions).expect("encodes"),
        block: block.seal(),
        receipts: outcome.receipts,
        senders: recovered.iter().map(|tx| tx.sender).collect(),
        diff: outcome.diff,
    }
}

/// Senders by their known keys (the verify stage is not under test here).
fn recovered_by_known_keys(
    txs: Vec<stave_primitives::SignedTx>,
) -> Vec<stave_primitives::RecoveredTx> {
    txs.into_iter()
        .enumerate()
        .map(|(i, tx)| stave_primitives::RecoveredTx {
            tx,
            sender: dev_account(i as u64).address,
        })
        .collect()
}

fn open() -> (tempfile::TempDir, LmdbStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 64 << 20).expect("opens");
    (dir, store)
}

#[test]
fn the_stored_bloom_covers_the_logs_of_every_receipt() {
    let (_dir, store) = open();
    let genesis = genesis();
    commit_block(&store, &genesis.input(), false).expect("commits");
    let mut one = block_one(genesis.block.hash(), 40);
    // One receipt with a log among transfers without: its bloom is the block's.
    let emitter = Address::repeat_byte(0xe1);
    let log = alloy_primitives::Log {
        address: emitter,
        data: alloy_primitives::LogData::new_unchecked(
            vec![B256::repeat_byte(0x70)],
            Default::default(),
        ),
    };
    let receipt = &mut one.receipts[7];
    receipt.receipt.logs.push(log);
    receipt.logs_bloom = alloy_primitives::logs_bloom(&receipt.receipt.logs);
    let expected = receipt.logs_bloom;
    assert_ne!(expected, alloy_primitives::Bloom::ZERO);
    commit_block(&store, &one.input(), false).expect("commits");
    let stored = logs_bloom(&store, 1).expect("reads").expect("a bloom");
    assert_eq!(stored, expected);
    assert!(stored.contains_input(alloy_primitives::BloomInput::Raw(emitter.as_slice())));
}

#[test]
fn every_table_reads_back_what_the_block_wrote() {
    let (_dir, store) = open();
    let genesis = genesis();
    assert_eq!(
        commit_block(&store, &genesis.input(), true).expect("commits"),
        Committed::New
    );
    let one = block_one(genesis.block.hash(), 40);
    assert_eq!(
        commit_block(&store, &one.input(), true).expect("commits"),
        Committed::New
    );

    assert_eq!(head(&store).expect("reads"), Some((1, one.block.hash())));
    assert_eq!(
        header(&store, 1).expect("reads").as_ref(),
        Some(one.block.header())
    );
    assert_eq!(
        block_number(&store, one.block.hash()).expect("reads"),
        Some(1)
    );
    assert_eq!(
        receipts(&store, 1).expect("reads"),
        Some(one.receipts.clone())
    );
    let bloom = one
        .receipts
        .iter()
        .fold(alloy_primitives::Bloom::ZERO, |all, r| all | r.logs_bloom);
    assert_eq!(logs_bloom(&store, 1).expect("reads"), Some(bloom));
    assert_eq!(logs_bloom(&store, 2).expect("reads"), None);
    assert_eq!(
        senders(&store, 1).expect("reads"),
        Some(one.senders.clone())
    );
    assert_eq!(senders(&store, 0).expect("reads"), Some(vec![]));
    assert_eq!(senders(&store, 2).expect("reads"), None);
    for (i, tx) in one.block.transactions().iter().enumerate() {
        assert_eq!(
            tx_location(&store, tx.hash()).expect("reads"),
            Some((1, i as u32))
        );
    }
    assert_eq!(
        store
            .get(stave_storage::Table::Bodies, &1u64.to_be_bytes())
            .expect("reads"),
        Some(one.body.clone())
    );
    for (address, change) in &one.diff.accounts {
        assert_eq!(
            account(&store, *address).expect("reads"),
            change.info,
            "{address}"
        );
    }
    // The proposer got the fees.
    assert!(
        account(&store, Address::repeat_byte(0xb0))
            .expect("reads")
            .is_some_and(|a| a.balance > U256::ZERO)
    );
}

#[test]
fn serial_and_parallel_encodings_are_identical() {
    let one = block_one(B256::ZERO, 300);
    assert_eq!(
        encode_block_batch(&one.input(), true),
        encode_block_batch(&one.input(), false)
    );
    let journaled = BlockToCommit {
        state: BlockState::Journaled(&one.diff),
        ..one.input()
    };
    assert_eq!(
        encode_block_batch(&journaled, true),
        encode_block_batch(&journaled, false)
    );
}

#[test]
fn receipts_encoded_on_another_thread_are_written_with_the_block_and_not_asked_for_again() {
    let (_dir, store) = open();
    let genesis = genesis();
    commit_block(&store, &genesis.input(), false).expect("commits");
    let one = block_one(genesis.block.hash(), 12);
    let input = &one.input();
    let committed = std::thread::scope(|scope| {
        let (sender, encoded) = std::sync::mpsc::sync_channel(1);
        scope.spawn(move || {
            sender
                .send(encode_receipts(input))
                .expect("the writer waits")
        });
        commit_block_with(&store, input, false, &mut || encoded.recv().expect("sent"))
    });
    assert_eq!(committed.expect("commits"), Committed::New);
    assert_eq!(
        receipts(&store, 1).expect("reads"),
        Some(one.receipts.clone())
    );
    assert_eq!(head(&store).expect("reads"), Some((1, one.block.hash())));
    // A block stored already is not encoded, its receipts included.
    assert_eq!(
        commit_block_with(&store, input, false, &mut || unreachable!("stored already"))
            .expect("redelivery"),
        Committed::AlreadyStored
    );
}

#[test]
fn committing_again_is_a_no_op_and_other_blocks_are_refused() {
    let (_dir, store) = open();
    let genesis = genesis();
    commit_block(&store, &genesis.input(), false).expect("commits");
    let one = block_one(genesis.block.hash(), 5);
    commit_block(&store, &one.input(), false).expect("commits");
    assert_eq!(
        commit_block(&store, &one.input(), true).expect("redelivery"),
        Committed::AlreadyStored
    );
    assert_eq!(
        commit_block(&store, &genesis.input(), true).expect("redelivery"),
        Committed::AlreadyStored
    );
    assert_eq!(head(&store).expect("reads"), Some((1, one.block.hash())));

    let other = block_one(B256::repeat_byte(9), 6);
    assert!(matches!(
        commit_block(&store, &other.input(), true),
        Err(StorageError::Conflict { number: 1, .. })
    ));
    let mut far = block_one(one.block.hash(), 1).block.unseal();
    far.header.number = 3;
    let far = Fixture {
        block: far.seal(),
        body: vec![0; 8],
        receipts: vec![],
        senders: vec![],
        diff: StateDiff::default(),
    };
    assert!(matches!(
        commit_block(&store, &far.input(), true),
        Err(StorageError::Gap {
            head: Some(1),
            number: 3
        })
    ));
}

#[test]
fn a_cleared_account_loses_its_old_storage() {
    let (_dir, store) = open();
    let owner = Address::repeat_byte(0x33);
    let info = Some(AccountState {
        nonce: 1,
        balance: U256::ZERO,
        code_hash: B256::repeat_byte(1),
    });
    let mut genesis = genesis();
    genesis.diff.accounts.insert(
        owner,
        AccountDiff {
            info,
            storage_cleared: false,
            storage: [
                (U256::from(1), U256::from(10)),
                (U256::from(2), U256::from(20)),
            ]
            .into_iter()
            .collect(),
        },
    );
    commit_block(&store, &genesis.input(), true).expect("commits");
    assert_eq!(
        storage(&store, owner, U256::from(2)).expect("reads"),
        U256::from(20)
    );

    let mut one = block_one(genesis.block.hash(), 1);
    one.diff.accounts.insert(
        owner,
        AccountDiff {
            info,
            storage_cleared: true,
            storage: [(U256::from(1), U256::from(11))].into_iter().collect(),
        },
    );
    commit_block(&store, &one.input(), true).expect("commits");
    assert_eq!(
        storage(&store, owner, U256::from(1)).expect("reads"),
        U256::from(11)
    );
    assert_eq!(
        storage(&store, owner, U256::from(2)).expect("reads"),
        U256::ZERO,
        "cleared"
    );
}

#[test]
fn state_can_be_journaled_for_a_later_flush() {
    let (_dir, store) = open();
    let genesis = genesis();
    commit_block(&store, &genesis.input(), true).expect("commits");
    assert_eq!(flushed_height(&store).expect("reads"), Some(0));
    let one = block_one(genesis.block.hash(), 5);
    let input = BlockToCommit {
        state: BlockState::Journaled(&one.diff),
        ..one.input()
    };
    commit_block(&store, &input, true).expect("commits");
    // The block is the head, its state is not applied yet but journaled.
    assert_eq!(head(&store).expect("reads"), Some((1, one.block.hash())));
    assert_eq!(flushed_height(&store).expect("reads"), Some(0));
    assert_eq!(
        stored_diff(&store, 1).expect("reads").as_ref(),
        Some(&one.diff)
    );
    let (address, change) = one.diff.accounts.iter().next().expect("a change");
    assert_ne!(account(&store, *address).expect("reads"), change.info);
    // Its transactions are indexed with its state, not before.
    let first_tx = one.block.transactions()[0].hash();
    assert_eq!(tx_location(&store, first_tx).expect("reads"), None);
    let positions = TxPositions::of(&one.block);
    flush_state(&store, &[&one.diff], &[(1, &positions)], None, 1, true).expect("flushes");
    assert_eq!(flushed_height(&store).expect("reads"), Some(1));
    assert_eq!(
        stored_diff(&store, 1).expect("reads"),
        None,
        "the journal is dropped"
    );
    for (address, change) in &one.diff.accounts {
        assert_eq!(account(&store, *address).expect("reads"), change.info);
    }
    for (i, tx) in one.block.transactions().iter().enumerate() {
        assert_eq!(positions.find(tx.hash()), Some(i as u32));
        assert_eq!(
            tx_location(&store, tx.hash()).expect("reads"),
            Some((1, i as u32))
        );
    }
}

#[test]
fn a_value_that_does_not_decode_is_reported_as_corrupt_with_its_table() {
    let (_dir, store) = open();
    let address = Address::repeat_byte(0x44);
    let mut batch = stave_storage::WriteBatch::new();
    batch.put(stave_storage::Table::Accounts, address, vec![1, 2, 3]);
    batch.put(stave_storage::Table::Meta, b"head", vec![0; 7]);
    // Senders are 20 bytes each: 41 bytes are two and a torn third.
    batch.put(
        stave_storage::Table::Senders,
        1u64.to_be_bytes(),
        vec![7; 41],
    );
    store.write(batch).expect("writes");
    let err = account(&store, address).expect_err("corrupt");
    assert!(
        matches!(
            err,
            StorageError::Corrupt {
                table: "accounts",
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        head(&store),
        Err(StorageError::Corrupt { table: "meta", .. })
    ));
    assert!(matches!(
        senders(&store, 1),
        Err(StorageError::Corrupt {
            table: "senders",
            ..
        })
    ));
}
