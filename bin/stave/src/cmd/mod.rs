//! The subcommands. A subcommand exists here only once it works end to end.

mod bench;
mod block;
mod chain;
mod evm;
mod genesis;
mod gov;
mod input;
mod keys;
mod load;
mod node;
mod state;
mod testnet;
mod tx;

use clap::Subcommand;

/// Every `stave` subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create and show secp256k1 keys and their addresses.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Inspect transactions.
    #[command(subcommand)]
    Tx(tx::TxCommand),
    /// Inspect encoded blocks.
    #[command(subcommand)]
    Block(block::BlockCommand),
    /// Write genesis files.
    #[command(subcommand)]
    Genesis(genesis::GenesisCommand),
    /// Make data dirs with large generated states.
    #[command(subcommand)]
    State(state::StateCommand),
    /// Import a block stream into a data dir through the full pipeline (resumes).
    Import(chain::ImportArgs),
    /// Export a data dir's blocks as a block stream.
    Export(chain::ExportArgs),
    /// Run a node: `--dev` for a single-validator dev chain, `--config FILE` otherwise.
    Node(node::NodeArgs),
    /// Make and run a multi-validator chain on this machine.
    #[command(subcommand)]
    Testnet(testnet::TestnetCommand),
    /// Send a signed-transaction load to a node's JSON-RPC and report TPS and latency.
    Load(load::LoadArgs),
    /// Run a measured workload and report throughput stage by stage.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The consortium's governance contract: show it, propose changes, vote.
    #[command(subcommand)]
    Gov(gov::GovCommand),
    /// Run the executors against Ethereum's test suites.
    #[command(subcommand)]
    Evm(evm::EvmCommand),
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Keys(cmd) => keys::run(cmd),
        Command::Tx(cmd) => tx::run(cmd),
        Command::Block(cmd) => block::run(cmd),
        Command::Genesis(cmd) => genesis::run(cmd),
        Command::State(cmd) => state::run(cmd),
        Command::Import(args) => chain::import(args),
        Command::Export(args) => chain::export(args),
        Command::Node(args) => node::run(args),
        Command::Testnet(cmd) => testnet::run(cmd),
        Command::Load(args) => load::run(args),
        Command::Gov(cmd) => gov::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Evm(cmd) => evm::run(cmd),
    }
}
