//! `stave genesis`: genesis files in go-ethereum's format.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use stave_primitives::ChainSpec;

/// Genesis subcommands.
#[derive(Debug, Subcommand)]
pub enum GenesisCommand {
    /// Write a genesis whose accounts are the deterministic dev accounts 0..N, each funded
    /// with 10,000 ETH (their keys: `stave keys show --dev-index I`).
    New {
        /// How many funded accounts.
        #[arg(long, default_value_t = 10)]
        accounts: u64,
        /// Chain id.
        #[arg(long, default_value_t = stave_primitives::dev::DEV_CHAIN_ID)]
        chain_id: u64,
        /// Where to write the genesis JSON.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs a `stave genesis` subcommand.
pub fn run(cmd: GenesisCommand) -> anyhow::Result<()> {
    match cmd {
        GenesisCommand::New {
            accounts,
            chain_id,
            out,
        } => {
            let spec = ChainSpec::dev(chain_id, accounts);
            std::fs::write(&out, spec.to_json())
                .with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "wrote {} (chain id {chain_id}, {accounts} accounts)",
                out.display()
            );
            Ok(())
        }
    }
}
