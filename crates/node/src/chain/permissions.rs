//! The governance contract's transaction permissions (`stave_governance::Checker`)
//! in the block path: a block being built leaves out the transactions they refuse (a pool
//! may hold some admitted before a rule changed), and a received block that carries one is
//! invalid. Both read the state after the parent, as admission to the pool does.

use std::borrow::Cow;

use alloy_consensus::Transaction as _;
use stave_governance::{Checker, Refusal};
use stave_primitives::{RecoveredTx, StateReader};

use crate::error::ImportError;

/// Fails a received block `number` whose transactions the permissions in `state` refuse
/// one of, naming the first and its rule.
pub(super) fn check_block(
    state: &dyn StateReader,
    number: u64,
    txs: &[RecoveredTx],
) -> Result<(), ImportError> {
    let mut checker = Checker::new(state).map_err(ImportError::Permissions)?;
    for (index, tx) in txs.iter().enumerate() {
        if let Some(refusal) = refusal(&mut checker, tx)? {
            return Err(ImportError::Forbidden {
                number,
                index,
                refusal,
            });
        }
    }
    Ok(())
}

/// `txs` without those the permissions in `state` refuse (borrowed when none is).
pub(super) fn permitted<'t>(
    state: &dyn StateReader,
    txs: &'t [RecoveredTx],
) -> Result<Cow<'t, [RecoveredTx]>, ImportError> {
    let mut checker = Checker::new(state).map_err(ImportError::Permissions)?;
    // Copied only from the first refused transaction on.
    let mut kept: Option<Vec<RecoveredTx>> = None;
    for (index, tx) in txs.iter().enumerate() {
        match refusal(&mut checker, tx)? {
            Some(refusal) => {
                tracing::debug!(tx = %tx.tx.hash(), %refusal, "left out of the block");
                kept.get_or_insert_with(|| txs[..index].to_vec());
            }
            None => {
                if let Some(kept) = &mut kept {
                    kept.push(tx.clone());
                }
            }
        }
    }
    Ok(kept.map_or(Cow::Borrowed(txs), Cow::Owned))
}

/// The rule `checker` refuses `tx` by, if any.
fn refusal(checker: &mut Checker<'_>, tx: &RecoveredTx) -> Result<Option<Refusal>, ImportError> {
    checker
        .check(tx.sender, tx.tx.envelope().to())
        .map_err(ImportError::Permissions)
}

#[cfg(test)]
mod tests {
    use stave_codec::encode_block_parts;
    use stave_governance::{GovernanceGenesis, Refusal};
    use stave_primitives::{Address, B256, ChainSpec, U256, dev::dev_account};
    use stave_sdk::{LocalSigner, TxBuilder};
    use stave_storage::LmdbStore;

    use crate::{Chain, ImportError};

    /// A transfer from dev account `from`, with its sender.
    fn transfer(from: u64) -> stave_primitives::RecoveredTx {
        let signer = LocalSigner::from_secret(&dev_account(from).secret).expect("key");
        let tx =
            TxBuilder::new(1337, 1_000_000_000).transfer(0, Address::repeat_byte(7), U256::ONE);
        stave_primitives::RecoveredTx {
            tx: signer.sign_tx(tx),
            sender: signer.address(),
        }
    }

    /// The builder leaves a frozen account's transaction out; a block that carries it
    /// anyway, with every root right (what a patched proposer would send), is refused by
    /// another node, which commits nothing.
    #[test]
    fn a_block_carrying_a_frozen_account_s_transaction_is_refused_though_its_roots_hold() {
        let frozen = dev_account(1).address;
        let mut governance =
            GovernanceGenesis::majority(vec![dev_account(0).address], vec![B256::repeat_byte(9)]);
        governance.frozen = vec![frozen];
        let spec = governance
            .install(ChainSpec::dev(1337, 3))
            .expect("installs");
        let dirs: Vec<_> = (0..2)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let stores: Vec<_> = dirs
            .iter()
            .map(|dir| LmdbStore::open(dir.path(), 64 << 20).expect("opens"))
            .collect();
        let producer = Chain::open(&stores[0], &spec, 1).expect("opens");
        let mut follower = Chain::open(&stores[1], &spec, 1).expect("opens");
        let txs = [transfer(2), transfer(1)];

        let built = producer.prepare(&txs, 1_700_000_000).expect("builds");
        assert_eq!(
            built.block.transactions().len(),
            1,
            "the frozen one is left out"
        );

        let (parent, state) = producer.tip(&[]).expect("the head");
        let forged = producer
            .prepare_over(&parent, &state, &txs, 1_700_000_000, None)
            .expect("builds");
        assert_eq!(forged.block.transactions().len(), 2);
        let encoded = encode_block_parts(forged.block.header(), &forged.body);
        match follower.import(&encoded) {
            Err(ImportError::Forbidden {
                number: 1,
                index: 1,
                refusal: Refusal::FrozenAccount(account),
            }) => assert_eq!(account, frozen),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(follower.head().expect("head").0, 0, "nothing committed");
    }
}
