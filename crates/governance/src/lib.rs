//! The consortium's governance contract (`contracts/StaveGovernance.sol`, docs/governance.md):
//! where it lives, the state a genesis gives it, and its ABI for calls and logs.
//!
//! The contract is not deployed by a transaction: [`GovernanceGenesis::account`] writes its
//! runtime code and its initial storage (committee, threshold, validators, admitted nodes)
//! straight into the genesis, slot by slot in the layout Solidity gives its state variables.
//! The tests check that layout against the contract's own getters.

use alloy_genesis::GenesisAccount;
use alloy_primitives::{Address, B256, Bytes, U256, address, keccak256};
use stave_primitives::{ChainSpec, ChainSpecError, StateError, StateReader};

mod permissions;

pub use permissions::{Checker, Refusal};

/// Where the contract lives on every Stave chain that has governance.
pub const GOVERNANCE_ADDRESS: Address = address!("0000000000000000000000000000000000001000");

alloy_sol_types::sol! {
    /// The contract's interface, as callers see it.
    #[derive(Debug, PartialEq, Eq)]
    interface IStaveGovernance {
        /// What a proposal changes.
        enum Action {
            /// Adds `target` (an address) to the committee with weight `value`.
            AddMember,
            /// Removes `target` (an address) from the committee.
            RemoveMember,
            /// Sets the threshold to `value`.
            SetThreshold,
            /// Adds the validator whose consensus key is `target`.
            AddValidator,
            /// Removes the validator whose consensus key is `target`.
            RemoveValidator,
            /// Admits the node whose id is `target`.
            AddNode,
            /// Removes the node whose id is `target`.
            RemoveNode,
            /// Puts the lists `value` names in force ([`RESTRICT_DEPLOY`], [`RESTRICT_SEND`]).
            SetRestrictions,
            /// Gives `target` (an address) the rights `value` names ([`MAY_DEPLOY`],
            /// [`MAY_SEND`]; 0 takes them away).
            SetRights,
            /// Freezes `target` (an account: it may not send; a contract: it may not be
            /// called by a transaction).
            Freeze,
            /// Unfreezes `target`.
            Unfreeze
        }

        /// A proposal as the contract keeps it.
        struct Proposal {
            /// What it changes.
            Action action;
            /// Whom: an address, a consensus key or a node id.
            bytes32 target;
            /// A weight or a threshold.
            uint256 value;
            /// The last block it may be voted for in.
            uint256 expires;
            /// The weight of its votes.
            uint256 weight;
            /// Whether it was applied.
            bool executed;
        }

        /// A proposal was made.
        event Proposed(uint256 indexed id, Action action, bytes32 target, uint256 value, address indexed proposer);
        /// A member voted for a proposal.
        event Voted(uint256 indexed id, address indexed member, uint256 weight);
        /// A proposal reached the threshold and was applied.
        event Executed(uint256 indexed id, Action action, bytes32 target, uint256 value);

        /// Proposes a change and votes for it.
        function propose(Action action, bytes32 target, uint256 value) external returns (uint256 id);
        /// Votes for a proposal.
        function vote(uint256 id) external;
        /// The committee's members.
        function getMembers() external view returns (address[] memory);
        /// A member's weight (0 for anyone else).
        function weightOf(address member) external view returns (uint256);
        /// The weight of votes a proposal needs.
        function threshold() external view returns (uint256);
        /// Blocks a proposal stays open.
        function proposalLifetime() external view returns (uint256);
        /// The fewest validators the set may shrink to.
        function minValidators() external view returns (uint256);
        /// The validators' ed25519 consensus keys.
        function getValidators() external view returns (bytes32[] memory);
        /// The non-validator nodes admitted to the P2P network.
        function getNodes() external view returns (bytes32[] memory);
        /// How many proposals were made.
        function proposalCount() external view returns (uint256);
        /// A proposal.
        function getProposal(uint256 id) external view returns (Proposal memory);
        /// The lists in force ([`RESTRICT_DEPLOY`], [`RESTRICT_SEND`]).
        function restrictions() external view returns (uint256);
        /// An account's rights ([`MAY_DEPLOY`], [`MAY_SEND`]).
        function rightsOf(address account) external view returns (uint256);
        /// Whether an address is frozen.
        function frozen(address account) external view returns (bool);
        /// How many addresses are frozen.
        function frozenCount() external view returns (uint256);
    }
}

/// `restrictions` bit: only accounts with [`MAY_DEPLOY`] may create contracts.
pub const RESTRICT_DEPLOY: u64 = 1;
/// `restrictions` bit: only accounts with [`MAY_SEND`] may send transactions.
pub const RESTRICT_SEND: u64 = 2;
/// `rightsOf` bit: may create contracts while [`RESTRICT_DEPLOY`] is in force.
pub const MAY_DEPLOY: u64 = 1;
/// `rightsOf` bit: may send transactions while [`RESTRICT_SEND`] is in force.
pub const MAY_SEND: u64 = 2;

/// The contract's storage slots of its state variables, in declaration order (Solidity
/// gives each non-packed variable the next slot).
mod slot {
    pub const MEMBERS: u64 = 0;
    pub const WEIGHT_OF: u64 = 1;
    pub const THRESHOLD: u64 = 2;
    pub const PROPOSAL_LIFETIME: u64 = 3;
    pub const MIN_VALIDATORS: u64 = 4;
    pub const VALIDATORS: u64 = 5;
    pub const IS_VALIDATOR: u64 = 6;
    pub const NODES: u64 = 7;
    pub const IS_NODE: u64 = 8;
    pub const RESTRICTIONS: u64 = 11;
    pub const RIGHTS_OF: u64 = 12;
    pub const FROZEN: u64 = 13;
    pub const FROZEN_COUNT: u64 = 14;
}

/// The contract's runtime code.
pub fn runtime_code() -> Bytes {
    let text = include_str!("../../../contracts/StaveGovernance.runtime.bin");
    // Checked in and rebuilt by CI (`contracts/build.sh`): bad hex is a build defect.
    alloy_primitives::hex::decode(text.trim())
        .expect("checked-in bytecode is hex")
        .into()
}

/// What a chain's governance starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GovernanceGenesis {
    /// The committee: each member's address and the weight of its vote.
    pub members: Vec<(Address, u64)>,
    /// The weight of votes a proposal needs to apply.
    pub threshold: u64,
    /// Blocks a proposal stays open for votes.
    pub proposal_lifetime: u64,
    /// The fewest validators a removal may leave.
    pub min_validators: u64,
    /// The validators' ed25519 consensus keys (the genesis's validator set).
    pub validators: Vec<B256>,
    /// Non-validator nodes admitted to the P2P network, by node id.
    pub nodes: Vec<B256>,
    /// The lists in force from the genesis on ([`RESTRICT_DEPLOY`], [`RESTRICT_SEND`]).
    pub restrictions: u64,
    /// Accounts and their rights ([`MAY_DEPLOY`], [`MAY_SEND`]).
    pub rights: Vec<(Address, u64)>,
    /// Accounts and contracts frozen from the genesis on.
    pub frozen: Vec<Address>,
}

/// Why a governance genesis was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GovernanceError {
    /// The committee is empty or a member has no weight.
    #[error("the committee needs at least one member, each with a positive weight")]
    NoCommittee,
    /// A member is listed twice.
    #[error("committee member {0} is listed twice")]
    DuplicateMember(Address),
    /// The threshold is 0 or more than the committee's weight.
    #[error("threshold {threshold} must be between 1 and the committee's weight {total}")]
    Threshold {
        /// The threshold asked for.
        threshold: u64,
        /// The committee's total weight.
        total: u64,
    },
}

impl GovernanceGenesis {
    /// A committee of `members`, one vote each, deciding by a majority, over `validators`
    /// (none fewer than 4, or than there are now if fewer); proposals open for 10,000
    /// blocks.
    pub fn majority(members: Vec<Address>, validators: Vec<B256>) -> Self {
        let threshold = members.len() as u64 / 2 + 1;
        Self {
            members: members.into_iter().map(|member| (member, 1)).collect(),
            threshold,
            proposal_lifetime: 10_000,
            min_validators: (validators.len() as u64).min(4),
            validators,
            nodes: Vec::new(),
            restrictions: 0,
            rights: Vec::new(),
            frozen: Vec::new(),
        }
    }

    /// The contract's genesis account: its runtime code and its storage.
    pub fn account(&self) -> Result<GenesisAccount, GovernanceError> {
        let total: u64 = self.members.iter().map(|(_, weight)| weight).sum();
        if self.members.is_empty() || self.members.iter().any(|(_, weight)| *weight == 0) {
            return Err(GovernanceError::NoCommittee);
        }
        let mut seen = std::collections::HashSet::new();
        if let Some((twice, _)) = self
            .members
            .iter()
            .find(|(member, _)| !seen.insert(*member))
        {
            return Err(GovernanceError::DuplicateMember(*twice));
        }
        if self.threshold == 0 || self.threshold > total {
            return Err(GovernanceError::Threshold {
                threshold: self.threshold,
                total,
            });
        }
        let mut storage = std::collections::BTreeMap::new();
        let mut put = |slot: B256, value: U256| {
            storage.insert(slot, B256::from(value));
        };
        let members: Vec<B256> = self
            .members
            .iter()
            .map(|(member, _)| member.into_word())
            .collect();
        for (slot, list) in [
            (slot::MEMBERS, &members),
            (slot::VALIDATORS, &self.validators),
            (slot::NODES, &self.nodes),
        ] {
            put(at(slot), U256::from(list.len()));
            let first = U256::from_be_bytes(keccak256(at(slot)).0);
            for (i, item) in list.iter().enumerate() {
                put(
                    B256::from(first + U256::from(i)),
                    U256::from_be_bytes(item.0),
                );
            }
        }
        for (member, weight) in &self.members {
            put(
                mapping(member.into_word(), slot::WEIGHT_OF),
                U256::from(*weight),
            );
        }
        for key in &self.validators {
            put(mapping(*key, slot::IS_VALIDATOR), U256::from(1));
        }
        for node in &self.nodes {
            put(mapping(*node, slot::IS_NODE), U256::from(1));
        }
        put(at(slot::THRESHOLD), U256::from(self.threshold));
        put(
            at(slot::PROPOSAL_LIFETIME),
            U256::from(self.proposal_lifetime),
        );
        put(at(slot::MIN_VALIDATORS), U256::from(self.min_validators));
        put(at(slot::RESTRICTIONS), U256::from(self.restrictions));
        for (account, rights) in &self.rights {
            put(
                mapping(account.into_word(), slot::RIGHTS_OF),
                U256::from(*rights),
            );
        }
        let frozen: std::collections::BTreeSet<&Address> = self.frozen.iter().collect();
        for account in &frozen {
            put(mapping(account.into_word(), slot::FROZEN), U256::from(1));
        }
        put(at(slot::FROZEN_COUNT), U256::from(frozen.len()));
        Ok(GenesisAccount::default()
            .with_code(Some(runtime_code()))
            .with_storage(Some(storage)))
    }

    /// `spec` with this governance in its genesis, at [`GOVERNANCE_ADDRESS`].
    pub fn install(&self, spec: ChainSpec) -> Result<ChainSpec, InstallError> {
        Ok(spec.with_account(GOVERNANCE_ADDRESS, self.account()?)?)
    }
}

/// Why governance could not be put into a genesis.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The governance itself was refused.
    #[error(transparent)]
    Governance(#[from] GovernanceError),
    /// The genesis with it was refused.
    #[error(transparent)]
    ChainSpec(#[from] ChainSpecError),
}

/// Most entries of a list [`admitted`] reads: far more validators and nodes than a
/// consortium runs, and a bound on the reads a corrupt length could ask for.
pub const MAX_LISTED: u64 = 4_096;

/// Who the contract admits in some state: the validators' consensus keys and the other
/// nodes' P2P ids, in the contract's order (`stave_admitted` answers it as it is).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Admitted {
    /// The validators' ed25519 consensus public keys.
    pub validators: Vec<B256>,
    /// The node ids of the admitted non-validator nodes.
    pub nodes: Vec<B256>,
}

/// Reads who the contract admits from `state`, straight from its storage (the layout
/// [`GovernanceGenesis::account`] writes and the contract keeps), so a node learns it
/// without running the EVM. `None` when the chain has no governance contract (no code at
/// [`GOVERNANCE_ADDRESS`]). A list longer than [`MAX_LISTED`] is read up to that bound.
pub fn admitted(state: &dyn StateReader) -> Result<Option<Admitted>, StateError> {
    let installed = state
        .account(GOVERNANCE_ADDRESS)?
        .is_some_and(|account| account.code_hash != alloy_primitives::KECCAK256_EMPTY);
    if !installed {
        return Ok(None);
    }
    let list = |n: u64| -> Result<Vec<B256>, StateError> {
        let len = state.storage(GOVERNANCE_ADDRESS, U256::from(n))?;
        let len = u64::try_from(len).unwrap_or(u64::MAX).min(MAX_LISTED);
        let first = U256::from_be_bytes(keccak256(at(n)).0);
        (0..len)
            .map(|i| {
                let word = state.storage(GOVERNANCE_ADDRESS, first.wrapping_add(U256::from(i)))?;
                Ok(B256::from(word))
            })
            .collect()
    };
    Ok(Some(Admitted {
        validators: list(slot::VALIDATORS)?,
        nodes: list(slot::NODES)?,
    }))
}

/// Storage slot `n` of a contract.
fn at(n: u64) -> B256 {
    B256::from(U256::from(n))
}

/// The slot of `key` in the mapping at slot `n`: keccak256(key ‖ n).
fn mapping(key: B256, n: u64) -> B256 {
    keccak256([key.as_slice(), at(n).as_slice()].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn governance() -> GovernanceGenesis {
        GovernanceGenesis::majority(
            vec![Address::repeat_byte(1), Address::repeat_byte(2)],
            vec![B256::repeat_byte(9)],
        )
    }

    #[test]
    fn a_committee_that_could_never_decide_is_refused() {
        assert_eq!(governance().threshold, 2, "a majority of two is both");
        assert!(governance().account().is_ok());
        let mut empty = governance();
        empty.members.clear();
        assert_eq!(empty.account(), Err(GovernanceError::NoCommittee));
        let mut weightless = governance();
        weightless.members[0].1 = 0;
        assert_eq!(weightless.account(), Err(GovernanceError::NoCommittee));
        let mut twice = governance();
        twice.members[1].0 = twice.members[0].0;
        assert_eq!(
            twice.account(),
            Err(GovernanceError::DuplicateMember(Address::repeat_byte(1)))
        );
        for threshold in [0, 3] {
            let mut unreachable = governance();
            unreachable.threshold = threshold;
            assert_eq!(
                unreachable.account(),
                Err(GovernanceError::Threshold {
                    threshold,
                    total: 2
                })
            );
        }
    }

    #[test]
    fn lists_sit_at_the_hash_of_their_slot_and_mappings_at_the_hash_of_key_and_slot() {
        let account = governance().account().expect("valid");
        let storage = account.storage.expect("storage");
        let word = |value: u64| B256::from(U256::from(value));
        // `validators` (slot 5): its length, then its one key at keccak256(slot).
        assert_eq!(storage[&at(slot::VALIDATORS)], word(1));
        assert_eq!(
            storage[&keccak256(at(slot::VALIDATORS))],
            B256::repeat_byte(9)
        );
        // `isValidator[key]` (slot 6).
        assert_eq!(
            storage[&mapping(B256::repeat_byte(9), slot::IS_VALIDATOR)],
            word(1)
        );
        assert_eq!(account.code, Some(runtime_code()));
    }

    #[test]
    fn a_node_reads_who_is_admitted_from_the_state_and_nothing_without_the_contract() {
        let mut genesis = governance();
        genesis.validators.push(B256::repeat_byte(8));
        genesis.nodes = vec![B256::repeat_byte(7)];
        let spec = genesis.install(ChainSpec::dev(7, 1)).expect("installs");
        let state = stave_primitives::MemoryState::from_genesis(&spec);
        assert_eq!(
            admitted(&state).expect("reads"),
            Some(Admitted {
                validators: vec![B256::repeat_byte(9), B256::repeat_byte(8)],
                nodes: vec![B256::repeat_byte(7)],
            })
        );
        let bare = stave_primitives::MemoryState::from_genesis(&ChainSpec::dev(7, 1));
        assert_eq!(admitted(&bare).expect("reads"), None);
    }
}
