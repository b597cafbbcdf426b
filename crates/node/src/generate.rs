//! `stave state generate`: a data dir holding a genesis of tens of millions of accounts,
//! written in minutes. A genesis file listing them would take gigabytes and every open
//! would rebuild their diff in memory, so the genesis names the state by count and root
//! ([`GeneratedState`]) and the accounts go straight into the `Accounts` table: addresses
//! derived on all cores, sorted, appended in LMDB's append mode (full pages, no search)
//! in transactions of [`ACCOUNTS_PER_WRITE`]. Block 0 is committed last, so a data dir
//! whose generation was interrupted holds no chain and is refused as not generated.

use rayon::prelude::*;
use stave_primitives::{Address, ChainSpec, GeneratedState, uniform_genesis_root};
use stave_storage::{LmdbStore, Table, commit::account_bytes, read::head};

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
}

/// Writes a generated state of `keyed` dev accounts and `filler` more (see
/// [`GeneratedState`]) into the empty `store`, with its block 0; returns the chain spec
/// (chain id `chain_id`) that names it, to be saved as the data dir's genesis file.
pub fn generate_state(
    store: &LmdbStore,
    chain_id: u64,
    keyed: u64,
    filler: u64,
    progress: &mut dyn FnMut(GenerateStep),
) -> Result<ChainSpec, ImportError> {
    if let Some((head, _)) = head(store)? {
        return Err(ImportError::NotEmpty { head });
    }
    progress(GenerateStep::Deriving);
    let mut shape = GeneratedState {
        keyed,
        filler,
        state_root: Default::default(),
    };
    let mut addresses: Vec<Address> = (0..shape.accounts())
        .into_par_iter()
        .map(|index| shape.address(index))
        .collect();
    addresses.par_sort_unstable();
    if let Some(pair) = addresses.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ImportError::GeneratedCollision(pair[0]));
    }
    progress(GenerateStep::Hashing);
    shape.state_root = uniform_genesis_root(&addresses, GeneratedState::ACCOUNT);
    let value = account_bytes(&GeneratedState::ACCOUNT);
    let mut written = 0;
    for chunk in addresses.chunks(ACCOUNTS_PER_WRITE) {
        store.append_sorted(
            Table::Accounts,
            chunk
                .iter()
                .map(|address| (address.as_slice(), value.as_slice())),
        )?;
        written += chunk.len() as u64;
        progress(GenerateStep::Written(written));
    }
    let spec = ChainSpec::dev(chain_id, 0).with_generated_state(shape)?;
    commit_genesis(store, &spec)?;
    Ok(spec)
}
