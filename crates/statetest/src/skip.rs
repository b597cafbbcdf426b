//! The one list of cases the runner does not run, each with its reason. It stays short:
//! a case is skipped only for what the chain itself does not accept.

use crate::fixture::{Case, StateTest};

/// One kind of case skipped, and why.
#[derive(Debug)]
pub struct Skip {
    /// Which cases.
    pub what: &'static str,
    /// Why the chain cannot run them.
    pub reason: &'static str,
    /// True for a case (of a test) of this kind.
    applies: fn(&StateTest, &Case) -> bool,
}

/// Tests whose pre-state holds an account with storage but neither code nor nonce, into
/// which the transaction creates a contract.
const STORAGE_WITHOUT_CODE: &[&str] = &[
    "InitCollisionParis",
    "RevertInCreateInInit_Paris",
    "dynamicAccountOverwriteEmpty_Paris",
];

/// Every kind of case skipped.
pub const SKIPS: &[Skip] = &[
    Skip {
        what: "blob transactions (EIP-4844, type 3)",
        reason: "the chain carries no blobs: SignedTx::decode refuses transaction type 3",
        applies: |_, case| case.tx.first() == Some(&3),
    },
    Skip {
        what: "contract creation onto storage without code or nonce",
        reason: "such an account cannot arise after EIP-161; revm (as revme statetest does) \
                 checks a creation's address for code and nonce only, not storage (EIP-7610)",
        applies: |test, _| STORAGE_WITHOUT_CODE.contains(&test.name.as_str()),
    },
];

/// The entry of [`SKIPS`] that skips `case` of `test`, if one does.
pub fn skip_for(test: &StateTest, case: &Case) -> Option<&'static Skip> {
    SKIPS.iter().find(|skip| (skip.applies)(test, case))
}
