//! The transaction permissions the contract sets (docs/governance.md, permissions), as
//! every node enforces them: at txpool admission, where a refusal names its rule, and in
//! block validation, where a block carrying a refused transaction is invalid, so a
//! proposer cannot slip one in. Both read the state after the parent block, so every node
//! decides the same.
//!
//! What is checked, in order: a transaction to the contract must come from a committee
//! member (and a member's is then allowed whatever else holds, so the committee can always
//! undo a rule); a frozen account may not send, and a frozen contract may not be the
//! target of a transaction (calls from other contracts are not seen); with
//! [`RESTRICT_SEND`] in force only accounts with [`MAY_SEND`] may send; with
//! [`RESTRICT_DEPLOY`] in force only accounts with [`MAY_DEPLOY`] may create contracts.

use std::collections::HashMap;

use alloy_primitives::{Address, KECCAK256_EMPTY, U256};
use stave_primitives::{StateError, StateReader};

use crate::{
    GOVERNANCE_ADDRESS, MAY_DEPLOY, MAY_SEND, RESTRICT_DEPLOY, RESTRICT_SEND, mapping, slot,
};

/// Why a transaction is refused: the rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A transaction to the governance contract from outside the committee.
    #[error(
        "{0} is not a committee member: only members may send transactions to the governance contract"
    )]
    NotAMember(Address),
    /// The sender is frozen.
    #[error("account {0} is frozen by the governance contract")]
    FrozenAccount(Address),
    /// The target contract is frozen.
    #[error("contract {0} is frozen by the governance contract")]
    FrozenContract(Address),
    /// Only permitted accounts may send, and this sender is not one.
    #[error("{0} may not send transactions: the governance contract admits only permitted senders")]
    SendNotPermitted(Address),
    /// Only permitted accounts may deploy, and this sender is not one.
    #[error(
        "{0} may not deploy contracts: the governance contract admits only permitted deployers"
    )]
    DeployNotPermitted(Address),
}

/// The permissions in force in one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Permissions {
    /// Whether the chain has the contract at all.
    installed: bool,
    /// `restrictions`: [`RESTRICT_DEPLOY`] and [`RESTRICT_SEND`].
    restrictions: u64,
    /// Whether any address is frozen (`frozenCount > 0`): otherwise nobody's is read.
    any_frozen: bool,
}

impl Permissions {
    /// The permissions in `state`: one account read and, with the contract, two storage
    /// reads; what [`Permissions::check`] then reads per transaction depends on them.
    fn read(state: &dyn StateReader) -> Result<Self, StateError> {
        let installed = state
            .account(GOVERNANCE_ADDRESS)?
            .is_some_and(|account| account.code_hash != KECCAK256_EMPTY);
        if !installed {
            return Ok(Self::default());
        }
        let word = |n: u64| state.storage(GOVERNANCE_ADDRESS, U256::from(n));
        let restrictions = word(slot::RESTRICTIONS)?;
        Ok(Self {
            installed,
            restrictions: u64::try_from(restrictions).unwrap_or(u64::MAX),
            any_frozen: !word(slot::FROZEN_COUNT)?.is_zero(),
        })
    }

    /// Checks a transaction from `sender` to `to` (`None`: a contract creation) against
    /// these permissions, the per-account entries it needs (mapping slot `n` of an
    /// account) read by `entry`. `Ok(Some(refusal))` names the rule it breaks.
    fn check(
        &self,
        sender: Address,
        to: Option<Address>,
        mut entry: impl FnMut(u64, Address) -> Result<U256, StateError>,
    ) -> Result<Option<Refusal>, StateError> {
        if !self.installed {
            return Ok(None);
        }
        if to == Some(GOVERNANCE_ADDRESS) {
            return Ok(entry(slot::WEIGHT_OF, sender)?
                .is_zero()
                .then_some(Refusal::NotAMember(sender)));
        }
        if self.any_frozen {
            if !entry(slot::FROZEN, sender)?.is_zero() {
                return Ok(Some(Refusal::FrozenAccount(sender)));
            }
            if let Some(to) = to
                && !entry(slot::FROZEN, to)?.is_zero()
            {
                return Ok(Some(Refusal::FrozenContract(to)));
            }
        }
        if self.restrictions & (RESTRICT_SEND | RESTRICT_DEPLOY) == 0 {
            return Ok(None);
        }
        let rights = entry(slot::RIGHTS_OF, sender)?;
        let may = |right: u64| !(rights & U256::from(right)).is_zero();
        if self.restrictions & RESTRICT_SEND != 0 && !may(MAY_SEND) {
            return Ok(Some(Refusal::SendNotPermitted(sender)));
        }
        if to.is_none() && self.restrictions & RESTRICT_DEPLOY != 0 && !may(MAY_DEPLOY) {
            return Ok(Some(Refusal::DeployNotPermitted(sender)));
        }
        Ok(None)
    }
}

/// Mapping slot `n`'s entry for `account` in `state`.
fn read_entry(state: &dyn StateReader, n: u64, account: Address) -> Result<U256, StateError> {
    state.storage(
        GOVERNANCE_ADDRESS,
        U256::from_be_bytes(mapping(account.into_word(), n).0),
    )
}

/// Checks many transactions against the permissions of one state, reading each
/// account's entries once: a block's or a batch's senders repeat, and the reads are most
/// of what a check costs.
pub struct Checker<'s> {
    permissions: Permissions,
    state: &'s dyn StateReader,
    entries: HashMap<(u64, Address), U256>,
}

impl<'s> Checker<'s> {
    /// A checker of the permissions in force in `state` (the contract's `restrictions`
    /// and `frozenCount`, read now).
    pub fn new(state: &'s dyn StateReader) -> Result<Self, StateError> {
        Ok(Self {
            permissions: Permissions::read(state)?,
            state,
            entries: HashMap::new(),
        })
    }

    /// Checks a transaction from `sender` to `to` (`None`: a contract creation).
    /// `Ok(Some(refusal))` names the rule it breaks.
    pub fn check(
        &mut self,
        sender: Address,
        to: Option<Address>,
    ) -> Result<Option<Refusal>, StateError> {
        let Self {
            permissions,
            state,
            entries,
        } = self;
        permissions.check(sender, to, |n, account| {
            if let Some(value) = entries.get(&(n, account)) {
                return Ok(*value);
            }
            let value = read_entry(*state, n, account)?;
            entries.insert((n, account), value);
            Ok(value)
        })
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::B256;
    use stave_primitives::{ChainSpec, MemoryState};

    use super::*;
    use crate::GovernanceGenesis;

    const MEMBER: Address = Address::repeat_byte(1);
    const OTHER: Address = Address::repeat_byte(2);
    const CONTRACT: Address = Address::repeat_byte(3);

    /// A chain whose genesis sets `permissions` (restrictions, rights, frozen).
    fn state(restrictions: u64, rights: &[(Address, u64)], frozen: &[Address]) -> MemoryState {
        let mut governance = GovernanceGenesis::majority(vec![MEMBER], vec![B256::repeat_byte(9)]);
        governance.restrictions = restrictions;
        governance.rights = rights.to_vec();
        governance.frozen = frozen.to_vec();
        let spec = governance.install(ChainSpec::dev(7, 1)).expect("installs");
        MemoryState::from_genesis(&spec)
    }

    /// What a [`Checker`] says, which it must say again from its cache.
    fn check(state: &MemoryState, sender: Address, to: Option<Address>) -> Option<Refusal> {
        let mut checker = Checker::new(state).expect("reads");
        let said = checker.check(sender, to).expect("reads");
        assert_eq!(checker.check(sender, to).expect("reads"), said);
        said
    }

    #[test]
    fn an_open_chain_refuses_only_outsiders_calling_the_contract() {
        let open = state(0, &[], &[]);
        assert_eq!(check(&open, OTHER, Some(CONTRACT)), None);
        assert_eq!(check(&open, OTHER, None), None);
        assert_eq!(check(&open, MEMBER, Some(GOVERNANCE_ADDRESS)), None);
        assert_eq!(
            check(&open, OTHER, Some(GOVERNANCE_ADDRESS)),
            Some(Refusal::NotAMember(OTHER))
        );
        let bare = MemoryState::from_genesis(&ChainSpec::dev(7, 1));
        assert_eq!(check(&bare, OTHER, Some(GOVERNANCE_ADDRESS)), None);
    }

    #[test]
    fn frozen_accounts_and_contracts_and_the_allow_lists_refuse_with_their_rule() {
        let chain = state(0, &[], &[OTHER, CONTRACT, OTHER]);
        assert_eq!(
            check(&chain, OTHER, None),
            Some(Refusal::FrozenAccount(OTHER))
        );
        assert_eq!(
            check(&chain, MEMBER, Some(CONTRACT)),
            Some(Refusal::FrozenContract(CONTRACT))
        );
        assert_eq!(check(&chain, MEMBER, Some(OTHER.create(0))), None);

        let listed = state(RESTRICT_SEND | RESTRICT_DEPLOY, &[(OTHER, MAY_SEND)], &[]);
        assert_eq!(check(&listed, OTHER, Some(CONTRACT)), None);
        assert_eq!(
            check(&listed, OTHER, None),
            Some(Refusal::DeployNotPermitted(OTHER))
        );
        assert_eq!(
            check(&listed, CONTRACT, Some(OTHER)),
            Some(Refusal::SendNotPermitted(CONTRACT))
        );
        // A member governs whatever the lists say.
        assert_eq!(check(&listed, MEMBER, Some(GOVERNANCE_ADDRESS)), None);
        let deploy_only = state(RESTRICT_DEPLOY, &[], &[]);
        assert_eq!(check(&deploy_only, OTHER, Some(CONTRACT)), None);
        assert_eq!(
            check(&deploy_only, OTHER, None),
            Some(Refusal::DeployNotPermitted(OTHER))
        );
    }
}
