//! `stave state generate`: a data dir with a genesis of millions of funded accounts, and
//! the genesis file that names it (`stave_node::generate_state`).

use std::{io::Write as _, path::PathBuf, time::Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use stave_node::{GenerateStep, generate_state};
use stave_sdk::contracts::generated_stave_token;
use stave_storage::{DEFAULT_MAP_SIZE, LmdbStore};

/// `stave state` subcommands.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Write a genesis of N funded accounts straight into a new data dir (minutes for
    /// 50,000,000), and its genesis file beside it.
    Generate(GenerateArgs),
}

/// Arguments of `stave state generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The data dir to create (it must hold no chain).
    #[arg(long)]
    datadir: PathBuf,
    /// Accounts in the genesis, each funded with 10,000 ETH.
    #[arg(long)]
    accounts: u64,
    /// How many of them are dev accounts whose keys `stave keys show --index` and the
    /// benches derive (the rest are addresses without a known key).
    #[arg(long, default_value_t = 100_000)]
    keyed: u64,
    /// Also put an ERC-20 (`StaveToken`, at the address `stave_sdk`'s
    /// `generated_stave_token` gives) into the genesis, held by this many accounts from
    /// account 0, each with a million tokens. 0: no token.
    #[arg(long, default_value_t = 0)]
    token_holders: u64,
    /// The chain id.
    #[arg(long, default_value_t = 1337)]
    chain_id: u64,
    /// Where to write the genesis file (default: `genesis.json` in the data dir).
    #[arg(long)]
    genesis_out: Option<PathBuf>,
    /// LMDB map size in bytes: the most the data dir can grow to.
    #[arg(long, default_value_t = DEFAULT_MAP_SIZE)]
    map_size: usize,
}

/// Runs a `stave state` subcommand.
pub fn run(command: StateCommand) -> anyhow::Result<()> {
    match command {
        StateCommand::Generate(args) => generate(args),
    }
}

fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.accounts > 0, "--accounts must be at least 1");
    let keyed = args.keyed.min(args.accounts);
    std::fs::create_dir_all(&args.datadir)
        .with_context(|| format!("creating {}", args.datadir.display()))?;
    let store = LmdbStore::open(&args.datadir, args.map_size)
        .with_context(|| format!("opening {}", args.datadir.display()))?;
    let start = Instant::now();
    let total = args.accounts;
    anyhow::ensure!(
        args.token_holders <= total,
        "--token-holders ({}) is more than --accounts ({total})",
        args.token_holders
    );
    let token = (args.token_holders > 0).then(|| generated_stave_token(args.token_holders));
    let holders = args.token_holders;
    let spec = generate_state(
        &store,
        args.chain_id,
        keyed,
        total - keyed,
        token,
        &mut |step| match step {
            GenerateStep::Deriving => eprintln!("deriving and sorting {total} addresses…"),
            GenerateStep::Hashing => eprintln!("hashing the state root…"),
            GenerateStep::Written(written) => eprintln!(
                "written {written} of {total} accounts ({:.0} s)",
                start.elapsed().as_secs_f64()
            ),
            GenerateStep::WrittenSlots(written) => eprintln!(
                "written {written} of the token's {} slots ({:.0} s)",
                holders + 1,
                start.elapsed().as_secs_f64()
            ),
        },
    )
    .context("generating the state")?;
    let genesis = args
        .genesis_out
        .unwrap_or_else(|| args.datadir.join("genesis.json"));
    let mut file = std::fs::File::create(&genesis)
        .with_context(|| format!("creating {}", genesis.display()))?;
    writeln!(file, "{}", spec.to_json())
        .with_context(|| format!("writing {}", genesis.display()))?;
    let root = spec.generated_state().map(|state| state.state_root);
    println!(
        "{}",
        serde_json::json!({
            "datadir": args.datadir,
            "genesis": genesis,
            "accounts": total,
            "keyed": keyed,
            "token": spec.generated_state().and_then(|state| state.token).map(|token| token.address),
            "state_root": root,
            "seconds": start.elapsed().as_secs_f64(),
        })
    );
    Ok(())
}
