//! The chain specification, read from a genesis file in go-ethereum's format.

use std::collections::BTreeMap;

use alloy_genesis::{ChainConfig, Genesis, GenesisAccount};
use alloy_primitives::{Address, B256, U256};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{AccountState, dev::dev_account, error::ChainSpecError};

/// Base fee of a dev genesis and of a genesis without `baseFeePerGas`: 1 gwei.
pub const DEFAULT_BASE_FEE: u64 = 1_000_000_000;

/// Block gas limit of a dev genesis: 1 billion gas, room for ~47,000 transfers a block.
pub const DEV_GAS_LIMIT: u64 = 1_000_000_000;

/// Balance of each account in a dev genesis: 10,000 ETH, as Hardhat and Anvil.
pub const DEV_BALANCE_WEI: u128 = 10_000 * 10u128.pow(18);

/// Key of Stave's own section in a genesis file's `config` (go-ethereum ignores it).
const STAVE_CONFIG_KEY: &str = "stave";

/// `config.stave` of a genesis file: what a Stave chain agrees on that go-ethereum's
/// format has no field for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StaveConfig {
    /// The validators' ed25519 consensus public keys (32 bytes each, hex). Empty on a
    /// single-validator chain (`stave node --dev`), which needs no consensus.
    #[serde(default)]
    validators: Vec<B256>,
    /// Blocks per consensus epoch: the validator set may change only between epochs.
    /// Absent: one epoch that never ends.
    #[serde(
        default,
        rename = "epochLength",
        skip_serializing_if = "Option::is_none"
    )]
    epoch_length: Option<u64>,
    /// A genesis state too large to list in `alloc`, written into a data dir by `stave
    /// state generate`. Absent: the state is `alloc`.
    #[serde(
        default,
        rename = "generatedState",
        skip_serializing_if = "Option::is_none"
    )]
    generated_state: Option<GeneratedState>,
}

/// `config.stave.generatedState`: a genesis of many funded accounts, named by count
/// rather than listed, so a chain of tens of millions of accounts has a genesis file of
/// a few lines. Account `i` is dev account `i` (its key derivable, see [`crate::dev`])
/// for the first `keyed`, then filler account `i - keyed` (an address without a known
/// key: state to read past, see [`crate::dev::filler_address`]); each holds
/// [`DEV_BALANCE_WEI`]. Nodes cannot rebuild such a state from the file: `stave state
/// generate` writes it into a data dir, and `stateRoot` (its root) is what block 0 holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GeneratedState {
    /// Accounts whose keys are known: dev accounts `0..keyed`.
    pub keyed: u64,
    /// Accounts after them without known keys.
    pub filler: u64,
    /// A token the first of these accounts hold, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<GeneratedToken>,
    /// The genesis state root (see [`crate::generated_genesis_root`]).
    pub state_root: B256,
}

impl GeneratedState {
    /// Every generated account holds this: [`DEV_BALANCE_WEI`], nothing else.
    pub const ACCOUNT: AccountState = AccountState {
        nonce: 0,
        balance: U256::from_limbs([DEV_BALANCE_WEI as u64, (DEV_BALANCE_WEI >> 64) as u64, 0, 0]),
        code_hash: alloy_primitives::KECCAK256_EMPTY,
    };

    /// How many accounts the state holds.
    pub fn accounts(&self) -> u64 {
        self.keyed + self.filler
    }

    /// The address of account `index` (below [`GeneratedState::accounts`]).
    pub fn address(&self, index: u64) -> Address {
        if index < self.keyed {
            dev_account(index).address
        } else {
            crate::dev::filler_address(index - self.keyed)
        }
    }
}

/// A token contract in a generated state, held by the state's accounts `0..holders`
/// (each [`GeneratedToken::BALANCE`]): an ERC-20 with many holders, written by `stave
/// state generate --token-holders`. Its storage is laid out as Solidity lays out a
/// `mapping(address => uint256)` of balances at position `balances_position` and a
/// `totalSupply` at slot `total_supply_slot`; its runtime code is in the data dir (the
/// `Code` table) under `code_hash`, for the genesis file does not hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GeneratedToken {
    /// The contract's address.
    pub address: Address,
    /// The hash of its runtime code.
    pub code_hash: B256,
    /// How many of the state's accounts, from account 0, hold tokens.
    pub holders: u64,
    /// The storage position of its balances mapping.
    pub balances_position: u64,
    /// The storage slot of its total supply.
    pub total_supply_slot: u64,
}

impl GeneratedToken {
    /// Each holder's balance: a million tokens of 18 decimals.
    pub const BALANCE: U256 = U256::from_limbs([0x1bce_cced_a100_0000, 0xd3c2, 0, 0]);

    /// The contract's account: its code, nonce 1 as a created contract has, no ether.
    pub fn account(&self) -> AccountState {
        AccountState {
            nonce: 1,
            balance: U256::ZERO,
            code_hash: self.code_hash,
        }
    }

    /// Every slot its storage holds, in ascending order: each holder's balance and the
    /// total supply.
    pub fn slots(&self, state: &GeneratedState) -> Vec<B256> {
        let mut slots: Vec<B256> = (0..self.holders.min(state.accounts()))
            .into_par_iter()
            .map(|holder| mapping_slot(state.address(holder), self.balances_position))
            .collect();
        slots.push(B256::from(U256::from(self.total_supply_slot)));
        slots.par_sort_unstable();
        slots
    }

    /// The value of `slot`, one of [`GeneratedToken::slots`].
    pub fn slot_value(&self, slot: B256) -> U256 {
        if slot == B256::from(U256::from(self.total_supply_slot)) {
            Self::BALANCE * U256::from(self.holders)
        } else {
            Self::BALANCE
        }
    }
}

/// The storage slot of `mapping[key]` for a Solidity `mapping(address => …)` at storage
/// position `position`: `keccak256(key padded to 32 bytes ‖ position)`.
pub fn mapping_slot(key: Address, position: u64) -> B256 {
    let mut preimage = [0u8; 64];
    preimage[12..32].copy_from_slice(key.as_slice());
    preimage[56..].copy_from_slice(&position.to_be_bytes());
    alloy_primitives::keccak256(preimage)
}

/// What a chain agrees on before its first block: id, gas limit, base fee, the accounts
/// that exist at genesis and, on a multi-validator chain, the validator set.
#[derive(Debug, Clone)]
pub struct ChainSpec {
    genesis: Genesis,
    chain_id: u64,
    stave: StaveConfig,
}

impl ChainSpec {
    /// Parses a go-ethereum genesis JSON (`config.chainId`, `alloc`, `gasLimit`,
    /// `baseFeePerGas`, ...), so existing genesis files work unchanged.
    pub fn from_json(json: &str) -> Result<Self, ChainSpecError> {
        let value: serde_json::Value = serde_json::from_str(json)?;
        // alloy's ChainConfig quietly defaults a missing chainId to 1 (mainnet): refuse that.
        if value.pointer("/config/chainId").is_none() {
            return Err(ChainSpecError::MissingChainId);
        }
        Self::from_genesis(serde_json::from_value(value)?)
    }

    /// Checks and wraps an already parsed genesis.
    pub fn from_genesis(genesis: Genesis) -> Result<Self, ChainSpecError> {
        if genesis.gas_limit == 0 {
            return Err(ChainSpecError::ZeroGasLimit);
        }
        let chain_id = genesis.config.chain_id;
        if chain_id == 0 {
            return Err(ChainSpecError::MissingChainId);
        }
        let stave: StaveConfig = match genesis
            .config
            .extra_fields
            .get_deserialized(STAVE_CONFIG_KEY)
        {
            Some(parsed) => {
                parsed.map_err(|error| ChainSpecError::StaveConfig(error.to_string()))?
            }
            None => StaveConfig::default(),
        };
        if stave.epoch_length.is_some_and(|length| length < 2) {
            return Err(ChainSpecError::StaveConfig(
                "epochLength must be at least 2 blocks".into(),
            ));
        }
        if stave.generated_state.is_some() && !genesis.alloc.is_empty() {
            return Err(ChainSpecError::StaveConfig(
                "a genesis with a generatedState lists no accounts in alloc".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = stave.validators.iter().find(|key| !seen.insert(**key)) {
            return Err(ChainSpecError::StaveConfig(format!(
                "validator {twice} is listed twice"
            )));
        }
        Ok(Self {
            genesis,
            chain_id,
            stave,
        })
    }

    /// The same chain with `validators` (ed25519 consensus public keys) as its validator
    /// set, written into the genesis's `config.stave.validators`.
    pub fn with_validators(mut self, validators: Vec<B256>) -> Result<Self, ChainSpecError> {
        self.stave.validators = validators;
        self.with_stave_config()
    }

    /// The same chain with epochs of `length` blocks (`config.stave.epochLength`).
    pub fn with_epoch_length(mut self, length: u64) -> Result<Self, ChainSpecError> {
        self.stave.epoch_length = Some(length);
        self.with_stave_config()
    }

    /// The same chain with a base fee of `fee` wei per gas (`baseFeePerGas`). Every block
    /// keeps the genesis's base fee; zero makes a gas-free chain (README, gas-free chains).
    pub fn with_base_fee(mut self, fee: u64) -> Self {
        self.genesis.base_fee_per_gas = Some(u128::from(fee));
        self
    }

    /// The same chain with `account` at `address` in its genesis (replacing any there).
    pub fn with_account(
        mut self,
        address: Address,
        account: GenesisAccount,
    ) -> Result<Self, ChainSpecError> {
        self.genesis.alloc.insert(address, account);
        Self::from_genesis(self.genesis)
    }

    /// Writes `self.stave` into the genesis and checks the result as a parsed file is.
    fn with_stave_config(mut self) -> Result<Self, ChainSpecError> {
        self.genesis
            .config
            .extra_fields
            .insert_value(STAVE_CONFIG_KEY.to_owned(), &self.stave)?;
        Self::from_genesis(self.genesis)
    }

    /// The same chain with its state generated rather than listed (see
    /// [`GeneratedState`]); its `alloc` must be empty.
    pub fn with_generated_state(mut self, state: GeneratedState) -> Result<Self, ChainSpecError> {
        self.stave.generated_state = Some(state);
        self.with_stave_config()
    }

    /// The generated state block 0 holds instead of `alloc`, if the genesis names one.
    pub fn generated_state(&self) -> Option<&GeneratedState> {
        self.stave.generated_state.as_ref()
    }

    /// Blocks per consensus epoch (`config.stave.epochLength`); `u64::MAX`, one epoch
    /// that never ends, when the genesis sets none.
    pub fn epoch_length(&self) -> u64 {
        self.stave.epoch_length.unwrap_or(u64::MAX)
    }

    /// The validators' ed25519 consensus public keys, in genesis order; empty on a
    /// single-validator chain.
    pub fn validators(&self) -> &[B256] {
        &self.stave.validators
    }

    /// A genesis with `accounts` deterministic dev accounts (see [`crate::dev`]), each
    /// funded with [`DEV_BALANCE_WEI`].
    pub fn dev(chain_id: u64, accounts: u64) -> Self {
        // Key derivation costs a scalar multiplication an account: a million accounts
        // want all cores.
        let alloc: BTreeMap<Address, GenesisAccount> = (0..accounts)
            .into_par_iter()
            .map(|i| {
                let account = GenesisAccount::default().with_balance(U256::from(DEV_BALANCE_WEI));
                (dev_account(i).address, account)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
        let genesis = Genesis {
            config: ChainConfig {
                chain_id,
                ..ChainConfig::default()
            },
            gas_limit: DEV_GAS_LIMIT,
            base_fee_per_gas: Some(u128::from(DEFAULT_BASE_FEE)),
            alloc,
            ..Genesis::default()
        };
        Self {
            genesis,
            chain_id,
            stave: StaveConfig::default(),
        }
    }

    /// The genesis as go-ethereum JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.genesis).expect("a Genesis always serializes")
    }

    /// The chain id every transaction must be signed for.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The genesis block gas limit.
    pub fn gas_limit(&self) -> u64 {
        self.genesis.gas_limit
    }

    /// The genesis base fee per gas ([`DEFAULT_BASE_FEE`] when the file has none).
    pub fn base_fee(&self) -> u64 {
        self.genesis
            .base_fee_per_gas
            .map_or(DEFAULT_BASE_FEE, |fee| {
                u64::try_from(fee).unwrap_or(u64::MAX)
            })
    }

    /// Accounts that exist at genesis, with balance, nonce, code and storage.
    pub fn alloc(&self) -> &BTreeMap<Address, GenesisAccount> {
        &self.genesis.alloc
    }

    /// The parsed genesis.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_go_ethereum_genesis() {
        let json = r#"{
            "config": { "chainId": 20261122, "londonBlock": 0 },
            "gasLimit": "0x1c9c380",
            "baseFeePerGas": "0x7",
            "difficulty": "0x1",
            "alloc": {
                "0x00000000000000000000000000000000000000aa": {
                    "balance": "0xde0b6b3a7640000",
                    "nonce": "0x2",
                    "code": "0x6000",
                    "storage": { "0x01": "0x02" }
                }
            }
        }"#;
        let spec = ChainSpec::from_json(json).expect("valid genesis");
        assert_eq!(spec.chain_id(), 20_261_122);
        assert_eq!(spec.gas_limit(), 30_000_000);
        assert_eq!(spec.base_fee(), 7);
        let account = &spec.alloc()[&Address::with_last_byte(0xaa)];
        assert_eq!(account.balance, U256::from(10u64.pow(18)));
        assert_eq!(account.nonce, Some(2));
        assert_eq!(account.storage.as_ref().map(BTreeMap::len), Some(1));
    }

    #[test]
    fn refuses_garbage_zero_gas_limit_and_missing_chain_id() {
        assert!(matches!(
            ChainSpec::from_json("{"),
            Err(ChainSpecError::Json(_))
        ));
        let zero = r#"{ "config": { "chainId": 5 }, "gasLimit": "0x0", "alloc": {} }"#;
        assert!(matches!(
            ChainSpec::from_json(zero),
            Err(ChainSpecError::ZeroGasLimit)
        ));
        let no_id = r#"{ "config": {}, "gasLimit": "0x1", "alloc": {} }"#;
        assert!(matches!(
            ChainSpec::from_json(no_id),
            Err(ChainSpecError::MissingChainId)
        ));
    }

    #[test]
    fn dev_genesis_round_trips_through_json() {
        let spec = ChainSpec::dev(1337, 3);
        let again = ChainSpec::from_json(&spec.to_json()).expect("own output parses");
        assert_eq!(again.chain_id(), 1337);
        assert_eq!(again.alloc().len(), 3);
        assert!(again.alloc().contains_key(&dev_account(2).address));
        assert_eq!(again.base_fee(), DEFAULT_BASE_FEE);
    }

    #[test]
    fn validator_set_round_trips_through_genesis_json() {
        let keys = vec![B256::repeat_byte(1), B256::repeat_byte(2)];
        let spec = ChainSpec::dev(7, 1)
            .with_validators(keys.clone())
            .expect("valid set");
        let json = spec.to_json();
        assert!(json.contains("\"stave\""), "{json}");
        let again = ChainSpec::from_json(&json).expect("own output parses");
        assert_eq!(again.validators(), keys.as_slice());
        assert!(ChainSpec::dev(7, 1).validators().is_empty());
    }

    #[test]
    fn epoch_length_round_trips_and_defaults_to_one_endless_epoch() {
        assert_eq!(ChainSpec::dev(7, 1).epoch_length(), u64::MAX);
        let spec = ChainSpec::dev(7, 1)
            .with_validators(vec![B256::repeat_byte(1)])
            .and_then(|spec| spec.with_epoch_length(20))
            .expect("valid");
        let again = ChainSpec::from_json(&spec.to_json()).expect("own output parses");
        assert_eq!(again.epoch_length(), 20);
        assert_eq!(again.validators(), &[B256::repeat_byte(1)]);
        assert!(matches!(
            ChainSpec::dev(7, 1).with_epoch_length(1),
            Err(ChainSpecError::StaveConfig(message)) if message.contains("epochLength")
        ));
    }

    #[test]
    fn refuses_a_validator_listed_twice_or_a_malformed_stave_section() {
        let twice = ChainSpec::dev(7, 1).with_validators(vec![B256::repeat_byte(3); 2]);
        assert!(
            matches!(&twice, Err(ChainSpecError::StaveConfig(message)) if message.contains("twice")),
            "{twice:?}"
        );
        for stave in [
            r#"{ "validators": ["0x1234"] }"#,
            r#"{ "validators": [], "leader": 1 }"#,
        ] {
            let json = format!(
                r#"{{ "config": {{ "chainId": 5, "stave": {stave} }}, "gasLimit": "0x1", "alloc": {{}} }}"#
            );
            assert!(
                matches!(
                    ChainSpec::from_json(&json),
                    Err(ChainSpecError::StaveConfig(_))
                ),
                "{stave}"
            );
        }
    }

    #[test]
    fn a_generated_state_round_trips_and_leaves_alloc_empty() {
        let state = GeneratedState {
            keyed: 2,
            filler: 5,
            token: Some(GeneratedToken {
                address: Address::repeat_byte(1),
                code_hash: B256::repeat_byte(2),
                holders: 4,
                balances_position: 0,
                total_supply_slot: 2,
            }),
            state_root: B256::repeat_byte(9),
        };
        assert_eq!(GeneratedToken::BALANCE, U256::from(10u128.pow(24)));
        // The token's slots: a balance for each holder and the supply.
        let token = state.token.expect("a token");
        let slots = token.slots(&state);
        assert_eq!(slots.len(), 5);
        assert!(slots.contains(&mapping_slot(state.address(3), 0)));
        assert!(!slots.contains(&mapping_slot(state.address(4), 0)));
        assert_eq!(
            token.slot_value(B256::with_last_byte(2)),
            U256::from(4) * GeneratedToken::BALANCE
        );
        let empty = ChainSpec::dev(7, 0);
        let spec = empty.clone().with_generated_state(state).expect("valid");
        let again = ChainSpec::from_json(&spec.to_json()).expect("own output parses");
        assert_eq!(again.generated_state(), Some(&state));
        assert_eq!(state.accounts(), 7);
        assert_eq!(state.address(1), dev_account(1).address);
        assert_eq!(state.address(2), crate::dev::filler_address(0));
        assert_eq!(GeneratedState::ACCOUNT.balance, U256::from(DEV_BALANCE_WEI));
        assert!(empty.generated_state().is_none());
        assert!(matches!(
            ChainSpec::dev(7, 1).with_generated_state(state),
            Err(ChainSpecError::StaveConfig(message)) if message.contains("alloc")
        ));
    }
}
