//! A generated state (`stave state generate`): the accounts it names are on disk with the
//! root block 0 holds, a chain opens on it and imports blocks that move funds between
//! keyed and filler accounts, and a data dir without it (or already holding a chain) is
//! refused.

use stave_node::{Chain, GenerateStep, ImportError, generate_state};
use stave_primitives::{
    AccountDiff, ChainSpec, DEV_BALANCE_WEI, GeneratedState, GeneratedToken, RecoveredTx,
    StateDiff, StateReader, U256,
    dev::{dev_account, filler_address},
    state_root,
};
use stave_sdk::{
    LocalSigner, TxBuilder,
    contracts::{generated_stave_token, stave_token_balance_slot},
};
use stave_storage::{
    LmdbStore,
    read::{account, code, receipts, storage},
};

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
    let spec = generate_state(&store, CHAIN_ID, 50, 3_000, None, &mut |step| {
        steps.push(step)
    })
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
    let filler = StateReader::account(&layers.latest(), filler_address(3))
        .expect("reads")
        .expect("present");
    assert_eq!(filler.balance, U256::from(DEV_BALANCE_WEI + 5));
    assert!(!block.is_empty());

    // Generating into a data dir that holds a chain is refused.
    assert!(matches!(
        generate_state(&store, CHAIN_ID, 1, 1, None, &mut |_| {}),
        Err(ImportError::NotEmpty { head: 1 })
    ));
}

#[test]
fn a_generated_token_holds_its_holders_balances_and_moves_them() {
    let (_dir, store) = new_store();
    let mut steps = Vec::new();
    let (token, runtime) = generated_stave_token(1_000);
    let spec = generate_state(
        &store,
        CHAIN_ID,
        50,
        3_000,
        Some((token, runtime.clone())),
        &mut |step| steps.push(step),
    )
    .expect("generates");
    assert_eq!(steps.last(), Some(&GenerateStep::WrittenSlots(1_001)));
    let generated = *spec.generated_state().expect("named");
    let token = generated.token.expect("a token");
    assert_eq!(token.holders, 1_000);
    assert_eq!(
        account(&store, token.address).expect("reads"),
        Some(token.account())
    );
    assert_eq!(code(&store, token.code_hash).expect("reads"), Some(runtime));
    let balance = |holder| {
        storage(
            &store,
            token.address,
            stave_token_balance_slot(holder).into(),
        )
        .expect("reads")
    };
    assert_eq!(balance(generated.address(999)), GeneratedToken::BALANCE);
    assert_eq!(balance(generated.address(1_000)), U256::ZERO);

    // Keyed holders send tokens to filler accounts: to holders and to accounts holding none.
    let spec = ChainSpec::from_json(&spec.to_json()).expect("parses");
    let mut chain = Chain::open(&store, &spec, 2).expect("opens");
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let to = |i: u64| filler_address(900 + 40 * i);
    let txs: Vec<RecoveredTx> = (0..50)
        .map(|i| {
            let signer = LocalSigner::from_secret(&dev_account(i).secret).expect("key");
            RecoveredTx {
                tx: signer.sign_tx(builder.erc20_transfer(0, token.address, to(i), U256::from(7))),
                sender: signer.address(),
            }
        })
        .collect();
    chain.build(txs, 1_700_000_000).expect("builds");
    let receipts = receipts(&store, 1).expect("reads").expect("stored");
    assert!(
        receipts
            .iter()
            .all(|receipt| receipt.receipt.status.coerce_status()),
        "every transfer succeeds"
    );
    let layers = chain.layers();
    let state = layers.latest();
    let slot = |holder| stave_token_balance_slot(holder).into();
    let held = |holder| StateReader::storage(&state, token.address, slot(holder)).expect("reads");
    assert_eq!(
        held(dev_account(3).address),
        GeneratedToken::BALANCE - U256::from(7)
    );
    // filler 900 is account 950: a holder; filler 2_860 is account 2_910: none before.
    assert_eq!(held(to(0)), GeneratedToken::BALANCE + U256::from(7));
    assert_eq!(held(to(49)), U256::from(7));
}
