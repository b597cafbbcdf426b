//! The GeneralStateTests fixture format (ethereum/tests): a JSON object of tests, each
//! with an environment, a pre-state, and per fork the cases (one transaction each, as
//! signed bytes) with the post-state root and logs hash they must give.
//!
//! Fixtures are outside bytes: every number is checked to fit where it goes, and a bad
//! file is a [`FixtureError`], never a panic (`fuzz/fuzz_targets/statetest.rs`).

use std::collections::BTreeMap;

use alloy_primitives::{Address, B256, Bytes, U256};
use serde::Deserialize;

/// Why a fixture file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// Not JSON, or not in the fixture format.
    #[error("not a state test fixture: {0}")]
    Json(#[from] serde_json::Error),
    /// A number does not fit the field it sets.
    #[error("test {test}: {field} {value} does not fit 64 bits")]
    TooLarge {
        /// The test's name.
        test: String,
        /// The field.
        field: &'static str,
        /// Its value.
        value: U256,
    },
    /// A storage key of the pre-state is not a number.
    #[error("test {test}: storage slot {slot:?} of {address} is not a number")]
    BadSlot {
        /// The test's name.
        test: String,
        /// The account.
        address: Address,
        /// The key as written.
        slot: String,
    },
}

/// One test: the block environment and pre-state its cases share, and the cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTest {
    /// The test's name (its key in the file).
    pub name: String,
    /// The block the transactions run in.
    pub env: Env,
    /// The accounts before the transaction, in address order.
    pub pre: Vec<(Address, PreAccount)>,
    /// Every case, fork by fork (in fork name order), in the file's order within a fork.
    pub cases: Vec<Case>,
}

/// The block environment of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Env {
    /// `COINBASE`, credited with the fees.
    pub coinbase: Address,
    /// The block's gas limit.
    pub gas_limit: u64,
    /// The block's number.
    pub number: u64,
    /// The block's timestamp.
    pub timestamp: u64,
    /// The EIP-1559 base fee (zero when the fixture gives none).
    pub base_fee: u64,
    /// `PREVRANDAO` (zero when the fixture gives none).
    pub random: B256,
    /// The excess blob gas (zero when the fixture gives none).
    pub excess_blob_gas: u64,
}

/// An account of the pre-state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreAccount {
    /// Balance in wei.
    pub balance: U256,
    /// Nonce.
    pub nonce: u64,
    /// Code (empty for none).
    pub code: Bytes,
    /// Storage slots and values, in slot order (zero values included as given).
    pub storage: Vec<(U256, U256)>,
}

/// One case: a fork, one transaction, and what it must give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The fork's name as the fixture spells it (`Cancun`).
    pub fork: String,
    /// Position among the fork's cases.
    pub index: usize,
    /// Which data, gas and value of the fixture's transaction template this case uses.
    pub indexes: Indexes,
    /// The transaction, as signed EIP-2718 bytes.
    pub tx: Bytes,
    /// The state root after the transaction (the pre-state's when it is invalid).
    pub state_root: B256,
    /// keccak-256 of the RLP list of the transaction's logs.
    pub logs_hash: B256,
    /// Why the transaction is invalid, when it must be.
    pub expect_exception: Option<String>,
}

/// A case's indexes into its test's transaction template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Indexes {
    /// Index of the calldata.
    pub data: usize,
    /// Index of the gas limit.
    pub gas: usize,
    /// Index of the value.
    pub value: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTest {
    env: RawEnv,
    pre: BTreeMap<Address, RawAccount>,
    post: BTreeMap<String, Vec<RawCase>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnv {
    current_coinbase: Address,
    current_gas_limit: U256,
    current_number: U256,
    current_timestamp: U256,
    current_base_fee: Option<U256>,
    current_random: Option<B256>,
    current_excess_blob_gas: Option<U256>,
}

#[derive(Deserialize)]
struct RawAccount {
    balance: U256,
    nonce: U256,
    code: Bytes,
    storage: BTreeMap<String, U256>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCase {
    hash: B256,
    logs: B256,
    txbytes: Bytes,
    indexes: Indexes,
    expect_exception: Option<String>,
}

/// Parses a fixture file: every test in it, in name order.
pub fn parse(bytes: &[u8]) -> Result<Vec<StateTest>, FixtureError> {
    let raw: BTreeMap<String, RawTest> = serde_json::from_slice(bytes)?;
    raw.into_iter()
        .map(|(name, test)| StateTest::from_raw(name, test))
        .collect()
}

impl StateTest {
    fn from_raw(name: String, raw: RawTest) -> Result<Self, FixtureError> {
        let fit = |field: &'static str, value: U256| {
            u64::try_from(value).map_err(|_| FixtureError::TooLarge {
                test: name.clone(),
                field,
                value,
            })
        };
        let env = &raw.env;
        let env = Env {
            coinbase: env.current_coinbase,
            gas_limit: fit("currentGasLimit", env.current_gas_limit)?,
            number: fit("currentNumber", env.current_number)?,
            timestamp: fit("currentTimestamp", env.current_timestamp)?,
            base_fee: fit("currentBaseFee", env.current_base_fee.unwrap_or_default())?,
            random: env.current_random.unwrap_or_default(),
            excess_blob_gas: fit(
                "currentExcessBlobGas",
                env.current_excess_blob_gas.unwrap_or_default(),
            )?,
        };
        let mut pre = Vec::with_capacity(raw.pre.len());
        for (address, account) in raw.pre {
            let mut storage = account
                .storage
                .iter()
                .map(|(slot, value)| {
                    let slot = slot.parse::<U256>().map_err(|_| FixtureError::BadSlot {
                        test: name.clone(),
                        address,
                        slot: slot.clone(),
                    })?;
                    Ok((slot, *value))
                })
                .collect::<Result<Vec<_>, FixtureError>>()?;
            storage.sort_unstable_by_key(|(slot, _)| *slot);
            storage.dedup_by_key(|(slot, _)| *slot);
            pre.push((
                address,
                PreAccount {
                    balance: account.balance,
                    nonce: fit("nonce", account.nonce)?,
                    code: account.code,
                    storage,
                },
            ));
        }
        let cases = raw
            .post
            .into_iter()
            .flat_map(|(fork, cases)| {
                cases
                    .into_iter()
                    .enumerate()
                    .map(move |(index, case)| Case {
                        fork: fork.clone(),
                        index,
                        indexes: case.indexes,
                        tx: case.txbytes,
                        state_root: case.hash,
                        logs_hash: case.logs,
                        expect_exception: case.expect_exception,
                    })
            })
            .collect();
        Ok(Self {
            name,
            env,
            pre,
            cases,
        })
    }
}
