//! `stave genesis`: genesis files in go-ethereum's format.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use stave_governance::{GovernanceGenesis, MAY_SEND, RESTRICT_DEPLOY, RESTRICT_SEND};
use stave_primitives::{ChainSpec, dev::dev_account};

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
        /// A gas-free chain: a base fee of zero.
        #[arg(long)]
        gas_free: bool,
        /// Install the governance contract with dev accounts 0..N as its committee (one
        /// vote each, a majority deciding); 0: no contract.
        #[arg(long, default_value_t = 0)]
        committee: u64,
        /// With the contract: only accounts given the right may send, and every funded
        /// account is given it.
        #[arg(long, requires = "committee")]
        restrict_senders: bool,
        /// With the contract: only accounts given the right may deploy, and none is.
        #[arg(long, requires = "committee")]
        restrict_deployers: bool,
    },
}

/// Runs a `stave genesis` subcommand.
pub fn run(cmd: GenesisCommand) -> anyhow::Result<()> {
    match cmd {
        GenesisCommand::New {
            accounts,
            chain_id,
            out,
            gas_free,
            committee,
            restrict_senders,
            restrict_deployers,
        } => {
            let mut spec = ChainSpec::dev(chain_id, accounts);
            if gas_free {
                spec = spec.with_base_fee(0);
            }
            if committee > 0 {
                let members = (0..committee).map(|i| dev_account(i).address).collect();
                let mut governance = GovernanceGenesis::majority(members, Vec::new());
                if restrict_senders {
                    governance.restrictions |= RESTRICT_SEND;
                    governance.rights = (0..accounts)
                        .map(|i| (dev_account(i).address, MAY_SEND))
                        .collect();
                }
                if restrict_deployers {
                    governance.restrictions |= RESTRICT_DEPLOY;
                }
                spec = governance
                    .install(spec)
                    .context("installing the governance contract")?;
            }
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
