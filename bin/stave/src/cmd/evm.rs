//! `stave evm`: the executors against Ethereum's own test suites.

use std::{io::IsTerminal, path::PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use stave_statetest::{Executors, Runner, Summary, Verdict, fixture_files};

/// EVM subcommands.
#[derive(Debug, Subcommand)]
pub enum EvmCommand {
    /// Run GeneralStateTests fixtures: each case as a one-transaction block on its
    /// pre-state, its post-state root and logs hash compared with the fixture's.
    ///
    /// Exits 1 when any case fails.
    Statetest(StatetestArgs),
}

/// `stave evm statetest`'s arguments.
#[derive(Debug, Args)]
pub struct StatetestArgs {
    /// Fixture files, or directories walked for `.json` files.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Which executors run each case; `both` also requires them to agree.
    #[arg(long, default_value = "both", value_parser = ["serial", "parallel", "both"])]
    executor: String,
    /// The fork whose cases run, as the fixtures name it.
    #[arg(long, default_value = "Cancun")]
    fork: String,
    /// One JSON line per case (go-ethereum's `evm statetest` fields), then the summary.
    #[arg(long)]
    json: bool,
}

/// Runs a `stave evm` subcommand.
pub fn run(cmd: EvmCommand) -> anyhow::Result<()> {
    match cmd {
        EvmCommand::Statetest(args) => statetest(args),
    }
}

fn statetest(args: StatetestArgs) -> anyhow::Result<()> {
    let executors: Executors = args.executor.parse()?;
    let runner = Runner::new(executors, &args.fork)?;
    let files = fixture_files(&args.paths)?;
    let progress = !args.json && std::io::stderr().is_terminal();
    let mut summary = Summary::default();
    for (done, file) in files.iter().enumerate() {
        let reports = runner
            .run_file(file)
            .with_context(|| format!("running {}", file.display()))?;
        for report in &reports {
            summary.add(report);
            if args.json {
                println!("{}", report.to_json());
            } else if let Verdict::Fail(error) = &report.verdict {
                println!(
                    "FAIL {} [{}] {}: {error}",
                    report.name, report.index, report.fork
                );
            }
        }
        if progress {
            eprint!("\r{}/{} files", done + 1, files.len());
        }
    }
    if progress {
        eprintln!();
    }
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        let Summary {
            total,
            passed,
            failed,
            skipped,
        } = summary;
        println!("{total} cases: {passed} passed, {failed} failed, {skipped} skipped");
    }
    if summary.failed > 0 {
        bail!("{} of {} cases failed", summary.failed, summary.total);
    }
    Ok(())
}
