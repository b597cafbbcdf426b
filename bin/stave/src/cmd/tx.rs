//! `stave tx`: transaction tools.

use anyhow::Context;
use clap::Subcommand;
use stave_primitives::decode_and_validate;

use super::input::read_bytes_arg;

/// Transaction subcommands.
#[derive(Debug, Subcommand)]
pub enum TxCommand {
    /// Check a signed transaction against every stateless rule and print it as one JSON line.
    ///
    /// Exits 1 with the reason on stderr when the transaction is invalid.
    Inspect {
        /// The transaction: hex (`0x…`), `@file` (hex text or raw bytes) or `-` for stdin.
        tx: String,
        /// Require this chain id (EIP-155); pre-EIP-155 legacy transactions still pass.
        #[arg(long)]
        chain_id: Option<u64>,
    },
}

/// Runs a `stave tx` subcommand.
pub fn run(cmd: TxCommand) -> anyhow::Result<()> {
    match cmd {
        TxCommand::Inspect { tx, chain_id } => {
            let bytes = read_bytes_arg(&tx)?;
            let recovered = decode_and_validate(&bytes, chain_id).context("invalid transaction")?;
            println!("{}", serde_json::to_string(&recovered.summary())?);
            Ok(())
        }
    }
}
