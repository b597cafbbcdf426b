//! A generated state (`stave state generate`): the accounts it names are on disk with the
//! root block 0 holds, a chain opens on it and imports blocks that move funds between
//! keyed and filler accounts, and a data dir without it (or already holding a chain) is
//! refused.

use stave_node::{Chain, GenerateStep, ImportError, generate_state};
use stave_primitives::{
    AccountDiff, ChainSpec, DEV_BALANCE_WEI, GeneratedState, RecoveredTx, StateDiff, U256,
    dev::{dev_account, filler_address},
    state_root,
};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_storage::{LmdbStore, read::account};

const CHAIN_ID: u64 = 1337;

fn new_store() -> (tempfile::TempDir, LmdbStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LmdbStore::open(dir.path(), 256 << 20).expect("opens");
    (dir, store)
}

#[test]
fn a_generated_state_holds_its_accounts_and_imports_blocks() {
    let (_dir, store) = new_store();
    let mut steps = Vec::new();
    // More than one write transaction's worth would take long here: a few thousand.
    let spec = generate_state(&store, CHAIN_ID, 50, 3_000, &mut |step| steps.push(step))
        .expect("generates");
    assert_eq!(steps.first(), Some(&GenerateStep::Deriving));
    assert_eq!(steps.last(), Some(&GenerateStep::Written(3_050)));
    let generated = *spec.generated_state().expect("named");
    assert_eq!((generated.keyed, generated.filler), (50, 3_000));

    // Its root is the root of a genesis diff of the same accounts.
    let mut diff = StateDiff::default();
    for i in 0..generated.accounts() {
        diff.accounts.insert(
            generated.address(i),
            AccountDiff {
                info: Some(GeneratedState::ACCOUNT),
                storage_cleared: true,
                storage: Default::default(),
            },
        );
    }
    assert_eq!(
        generated.state_root,
        state_root(Default::default(), &diff, &stave_primitives::SerialLeaves)
    );
    for address in [dev_account(7).address, filler_address(2_999)] {
        let stored = account(&store, address).expect("reads").expect("present");
        assert_eq!(stored, GeneratedState::ACCOUNT);
    }

    // The genesis file round-trips, and a chain opens on it and imports transfers from
    // keyed accounts to filler ones.
    let spec = ChainSpec::from_json(&spec.to_json()).expect("parses");
    let mut chain = Chain::open(&store, &spec, 2).expect("opens");
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let txs: Vec<RecoveredTx> = (0..50)
        .map(|i| {
            let signer = LocalSigner::from_secret(&dev_account(i).secret).expect("key");
            RecoveredTx {
                tx: signer.sign_tx(builder.transfer(0, filler_address(i), U256::from(5))),
                sender: signer.address(),
            }
        })
        .collect();
    let block = chain.build(txs, 1_700_000_000).expect("builds");
    let (_other_dir, other) = new_store();
    assert!(matches!(
        Chain::open(&other, &spec, 2),
        Err(ImportError::NotGenerated { accounts: 3_050 })
    ));
    drop(chain);
    let chain = Chain::open(&store, &spec, 2).expect("reopens");
    assert_eq!(chain.head().expect("head").0, 1);
    let layers = chain.layers();
    let filler = stave_primitives::StateReader::account(&layers.latest(), filler_address(3))
        .expect("reads")
        .expect("present");
    assert_eq!(filler.balance, U256::from(DEV_BALANCE_WEI + 5));
    assert!(!block.is_empty());

    // Generating into a data dir that holds a chain is refused.
    assert!(matches!(
        generate_state(&store, CHAIN_ID, 1, 1, &mut |_| {}),
        Err(ImportError::NotEmpty { head: 1 })
    ));
}
