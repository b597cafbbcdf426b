//! What a call may pretend (go-ethereum's `eth_call` overrides): accounts whose balance,
//! nonce, code or storage differ from the state's ([`Overridden`]), and a block whose
//! number, time, gas limit, proposer, base fee or randomness differ from the one the call
//! runs on ([`override_block`]). Nothing here is written anywhere: the overrides live as
//! long as the call.

use alloy_primitives::{Address, B256, Bytes, U256, keccak256, map::HashMap};
use alloy_rpc_types_eth::{BlockOverrides, state::StateOverride};
use revm::primitives::KECCAK_EMPTY;
use stave_primitives::{AccountDiff, AccountState, Header, StateDiff, StateError, StateReader};

/// Why overrides were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// An account's storage is both replaced (`state`) and patched (`stateDiff`).
    #[error("account {0} has both 'state' and 'stateDiff'")]
    StateAndDiff(Address),
    /// Moving a precompile (`movePrecompileToAddress`) is not supported.
    #[error("account {0}: movePrecompileToAddress is not supported")]
    MovePrecompile(Address),
    /// A block override this chain has no field for.
    #[error("block override '{0}' is not supported on this chain")]
    Unsupported(&'static str),
}

/// How an overridden account's storage reads.
enum Storage {
    /// As the state has it, but for these slots.
    Patched(HashMap<B256, B256>),
    /// These slots only; every other slot is zero.
    Replaced(HashMap<B256, B256>),
}

/// One overridden account.
struct Account {
    balance: Option<U256>,
    nonce: Option<u64>,
    code_hash: Option<B256>,
    storage: Storage,
}

/// A state with a call's overrides laid over it.
pub struct Overridden<'a> {
    base: &'a dyn StateReader,
    accounts: HashMap<Address, Account>,
    codes: HashMap<B256, Bytes>,
    block_hashes: HashMap<u64, B256>,
}

impl<'a> Overridden<'a> {
    /// `base` with `state` laid over it, and the block hashes of `block` (its
    /// `blockHash` override) if any.
    pub fn new(
        base: &'a dyn StateReader,
        state: Option<&StateOverride>,
        block: Option<&BlockOverrides>,
    ) -> Result<Self, OverrideError> {
        let mut accounts = HashMap::default();
        let mut codes = HashMap::default();
        for (address, account) in state.into_iter().flatten() {
            if account.move_precompile_to.is_some() {
                return Err(OverrideError::MovePrecompile(*address));
            }
            let storage = match (&account.state, &account.state_diff) {
                (Some(_), Some(_)) => return Err(OverrideError::StateAndDiff(*address)),
                (Some(state), None) => {
                    Storage::Replaced(state.iter().map(|(k, v)| (*k, *v)).collect())
                }
                (None, diff) => {
                    Storage::Patched(diff.iter().flatten().map(|(k, v)| (*k, *v)).collect())
                }
            };
            let code_hash = account.code.as_ref().map(|code| {
                if code.is_empty() {
                    return KECCAK_EMPTY;
                }
                let hash = keccak256(code);
                codes.insert(hash, code.clone());
                hash
            });
            accounts.insert(
                *address,
                Account {
                    balance: account.balance,
                    nonce: account.nonce,
                    code_hash,
                    storage,
                },
            );
        }
        let block_hashes = block
            .and_then(|block| block.block_hash.as_ref())
            .map(|hashes| hashes.iter().map(|(n, h)| (*n, *h)).collect())
            .unwrap_or_default();
        Ok(Self {
            base,
            accounts,
            codes,
            block_hashes,
        })
    }
}

impl Overridden<'_> {
    /// The overrides as a state change over the base state: each overridden account as it
    /// now reads, its storage replaced or patched, and the code it was given. A dev node
    /// commits this with the block it mines next (`anvil_setBalance` and the like).
    pub fn diff(&self) -> Result<StateDiff, StateError> {
        let accounts = self
            .accounts
            .iter()
            .map(|(address, account)| {
                let (storage_cleared, slots) = match &account.storage {
                    Storage::Replaced(slots) => (true, slots),
                    Storage::Patched(slots) => (false, slots),
                };
                let change = AccountDiff {
                    info: self.account(*address)?,
                    storage_cleared,
                    storage: slots
                        .iter()
                        .map(|(slot, value)| {
                            (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0))
                        })
                        .collect(),
                };
                Ok((*address, change))
            })
            .collect::<Result<_, StateError>>()?;
        let codes = self
            .codes
            .iter()
            .map(|(hash, code)| (*hash, code.clone()))
            .collect();
        Ok(StateDiff { accounts, codes })
    }
}

impl StateReader for Overridden<'_> {
    fn account(&self, address: Address) -> Result<Option<AccountState>, StateError> {
        let base = self.base.account(address)?;
        let Some(account) = self.accounts.get(&address) else {
            return Ok(base);
        };
        let mut state = base.unwrap_or(AccountState::EMPTY);
        state.balance = account.balance.unwrap_or(state.balance);
        state.nonce = account.nonce.unwrap_or(state.nonce);
        state.code_hash = account.code_hash.unwrap_or(state.code_hash);
        Ok(Some(state))
    }

    fn storage(&self, address: Address, slot: U256) -> Result<U256, StateError> {
        let key = B256::from(slot);
        match self.accounts.get(&address).map(|account| &account.storage) {
            Some(Storage::Replaced(slots)) => {
                Ok(slots.get(&key).map_or(U256::ZERO, |value| (*value).into()))
            }
            Some(Storage::Patched(slots)) => match slots.get(&key) {
                Some(value) => Ok((*value).into()),
                None => self.base.storage(address, slot),
            },
            None => self.base.storage(address, slot),
        }
    }

    fn code(&self, code_hash: B256) -> Result<Option<Bytes>, StateError> {
        match self.codes.get(&code_hash) {
            Some(code) => Ok(Some(code.clone())),
            None => self.base.code(code_hash),
        }
    }

    fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        match self.block_hashes.get(&number) {
            Some(hash) => Ok(*hash),
            None => self.base.block_hash(number),
        }
    }
}

/// `header` with `overrides` applied, and the `PREVRANDAO` they name (`random`), if any.
/// Overrides of what this chain has no field for (blobs, beacon roots) are refused.
pub fn override_block(
    header: &Header,
    overrides: &BlockOverrides,
) -> Result<(Header, Option<B256>), OverrideError> {
    if overrides.blob_base_fee.is_some() {
        return Err(OverrideError::Unsupported("blobBaseFee"));
    }
    if overrides.beacon_root.is_some() {
        return Err(OverrideError::Unsupported("beaconRoot"));
    }
    let mut header = header.clone();
    if let Some(number) = overrides.number {
        header.number = number.saturating_to();
    }
    if let Some(time) = overrides.time {
        header.timestamp = time;
    }
    if let Some(gas_limit) = overrides.gas_limit {
        header.gas_limit = gas_limit;
    }
    if let Some(coinbase) = overrides.coinbase {
        header.proposer = coinbase;
    }
    if let Some(base_fee) = overrides.base_fee {
        header.base_fee_per_gas = base_fee.saturating_to();
    }
    Ok((
        header,
        overrides.random.or(overrides.difficulty.map(B256::from)),
    ))
}

#[cfg(test)]
mod tests {
    use alloy_rpc_types_eth::state::AccountOverride;
    use stave_primitives::MemoryState;

    use super::*;

    #[test]
    fn an_account_reads_as_overridden_and_others_as_the_state_has_them() {
        let base = MemoryState::default();
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let slot = B256::with_last_byte(7);
        let code = Bytes::from_static(&[0x60, 0x00]);
        let mut overrides = StateOverride::default();
        overrides.insert(
            a,
            AccountOverride {
                balance: Some(U256::from(5)),
                code: Some(code.clone()),
                state_diff: Some([(slot, B256::with_last_byte(9))].into_iter().collect()),
                ..AccountOverride::default()
            },
        );
        overrides.insert(
            b,
            AccountOverride {
                nonce: Some(3),
                state: Some(Default::default()),
                ..AccountOverride::default()
            },
        );
        let state = Overridden::new(&base, Some(&overrides), None).expect("valid");
        let account = state.account(a).expect("reads").expect("exists");
        assert_eq!(account.balance, U256::from(5));
        assert_eq!(
            state.code(account.code_hash).expect("reads"),
            Some(code.clone())
        );
        assert_eq!(state.storage(a, slot.into()).expect("reads"), U256::from(9));
        assert_eq!(state.account(b).expect("reads").expect("exists").nonce, 3);
        assert_eq!(state.storage(b, U256::from(1)).expect("reads"), U256::ZERO);
        assert_eq!(state.account(Address::repeat_byte(3)).expect("reads"), None);

        // As a state change: each account as it now reads, b's storage replaced.
        let diff = state.diff().expect("reads");
        assert_eq!(
            diff.accounts.get(&a).and_then(|change| change.info),
            state.account(a).expect("reads")
        );
        assert!(!diff.accounts.get(&a).expect("changed").storage_cleared);
        assert_eq!(
            diff.accounts
                .get(&a)
                .expect("changed")
                .storage
                .get(&U256::from(7)),
            Some(&U256::from(9))
        );
        assert!(diff.accounts.get(&b).expect("changed").storage_cleared);
        assert_eq!(diff.codes.get(&account.code_hash), Some(&code));

        overrides.get_mut(&b).expect("there").state_diff = Some(Default::default());
        let refused = Overridden::new(&base, Some(&overrides), None).err();
        assert_eq!(refused, Some(OverrideError::StateAndDiff(b)));
    }

    #[test]
    fn a_block_override_changes_only_what_it_names() {
        let header = Header {
            number: 10,
            timestamp: 100,
            gas_limit: 30_000_000,
            base_fee_per_gas: 7,
            ..Header::default()
        };
        let overrides = BlockOverrides {
            number: Some(U256::from(99)),
            time: Some(500),
            coinbase: Some(Address::repeat_byte(4)),
            random: Some(B256::repeat_byte(8)),
            ..BlockOverrides::default()
        };
        let (changed, random) = override_block(&header, &overrides).expect("valid");
        assert_eq!((changed.number, changed.timestamp), (99, 500));
        assert_eq!(changed.proposer, Address::repeat_byte(4));
        assert_eq!(
            (changed.gas_limit, changed.base_fee_per_gas),
            (30_000_000, 7)
        );
        assert_eq!(random, Some(B256::repeat_byte(8)));
        let blobs = BlockOverrides {
            blob_base_fee: Some(U256::from(1)),
            ..BlockOverrides::default()
        };
        assert_eq!(
            override_block(&header, &blobs).err(),
            Some(OverrideError::Unsupported("blobBaseFee"))
        );
    }
}
