//! `stave state generate`: a data dir holding a genesis of tens of millions of accounts,
//! written in minutes. A genesis file listing them would take gigabytes and every open
//! would rebuild their diff in memory, so the genesis names the state by count and root
//! ([`GeneratedState`]) and the accounts go straight into the `Accounts` table: addresses
//! derived on all cores, sorted, appended in LMDB's append mode (full pages, no search)
//! in transactions of [`ACCOUNTS_PER_WRITE`]. A token's balance slots go into the
//! `Storage` table the same way. Block 0 is committed last, so a data dir whose
//! generation was interrupted holds no chain and is refused as not generated.

use rayon::prelude::*;
use stave_primitives::{
    Address, B256, Bytes, ChainSpec, GeneratedState, GeneratedToken, U256, generated_genesis_root,
    keccak256,
};
use stave_storage::{LmdbStore, Table, commit::account_bytes, read::head, storage_key};

use crate::{ImportError, chain::commit_genesis};

/// Accounts written per LMDB transaction: big enough that commits are rare, small
/// enough that progress shows every few seconds.
pub const ACCOUNTS_PER_WRITE: usize = 1 << 20;

/// What [`generate_state`] is doing, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerateStep {
    /// Deriving and sorting the addresses.
    Deriving,
    /// Hashing the state root.
    Hashing,
    /// This many accounts are written.
    Written(u64),
    /// This many of the token's slots are written.
    WrittenSlots(u64),
}

/// Writes a generated state of `keyed` dev accounts and `filler` more (see
/// [`GeneratedState`]) into the empty `store`, with its block 0; with `token`, also that
/// token contract with the runtime code `code` (its `code_hash` is set from the code)
/// and its holders' balances. Returns the chain spec (chain id `chain_id`) that names
/// the state, to be saved as the data dir's genesis file.
pub fn generate_state(
    store: &LmdbStore,
    chain_id: u64,
    keyed: u64,
    filler: u64,
    token: Option<(GeneratedToken, Bytes)>,
    progress: &mut dyn FnMut(GenerateStep),
) -> Result<ChainSpec, ImportError> {
    if let Some((head, _)) = head(store)? {
        return Err(ImportError::NotEmpty { head });
    }
    progress(GenerateStep::Deriving);
    let mut shape = GeneratedState {
        keyed,
        filler,
        token: token.as_ref().map(|(token, code)| GeneratedToken {
            code_hash: keccak256(code),
            ..*token
        }),
        state_root: Default::default(),
    };
    let mut addresses: Vec<Address> = (0..shape.accounts())
        .into_par_iter()
        .map(|index| shape.address(index))
        .chain(shape.token.map(|token| token.address))
        .collect();
    addresses.par_sort_unstable();
    if let Some(pair) = addresses.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ImportError::GeneratedCollision(pair[0]));
    }
    let slots = shape
        .token
        .map_or_else(Vec::new, |token| token.slots(&shape));
    progress(GenerateStep::Hashing);
    shape.state_root = generated_genesis_root(&shape, &addresses, &slots);
    let value = account_bytes(&GeneratedState::ACCOUNT);
    let token_value = shape.token.map(|token| account_bytes(&token.account()));
    let mut written = 0;
    for chunk in addresses.chunks(ACCOUNTS_PER_WRITE) {
        store.append_sorted(
            Table::Accounts,
            chunk.iter().map(|address| {
                let value = match (&shape.token, &token_value) {
                    (Some(token), Some(token_value)) if token.address == *address => token_value,
                    _ => &value,
                };
                (address.as_slice(), value.as_slice())
            }),
        )?;
        written += chunk.len() as u64;
        progress(GenerateStep::Written(written));
    }
    if let (Some(token), Some((_, code))) = (shape.token, &token) {
        write_token(store, &token, code, &slots, progress)?;
    }
    let spec = ChainSpec::dev(chain_id, 0).with_generated_state(shape)?;
    commit_genesis(store, &spec)?;
    Ok(spec)
}

/// Writes `token`'s code and its `slots` (sorted) with their values.
fn write_token(
    store: &LmdbStore,
    token: &GeneratedToken,
    code: &[u8],
    slots: &[B256],
    progress: &mut dyn FnMut(GenerateStep),
) -> Result<(), ImportError> {
    store.append_sorted(Table::Code, [(token.code_hash.as_slice(), code)])?;
    let mut written = 0;
    for chunk in slots.chunks(ACCOUNTS_PER_WRITE) {
        let entries: Vec<([u8; 52], [u8; 32])> = chunk
            .par_iter()
            .map(|slot| {
                let key = storage_key(token.address, U256::from_be_bytes(slot.0));
                (key, token.slot_value(*slot).to_be_bytes::<32>())
            })
            .collect();
        store.append_sorted(
            Table::Storage,
            entries
                .iter()
                .map(|(key, value)| (key.as_slice(), value.as_slice())),
        )?;
        written += chunk.len() as u64;
        progress(GenerateStep::WrittenSlots(written));
    }
    Ok(())
}
