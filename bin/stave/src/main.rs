//! `stave`: the one command-line tool of the Stave node.
//!
//! Each subcommand lives in its own module under `cmd/`; errors are reported on one line
//! with their context and exit code 1.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than the system allocator: revm allocates and frees per transaction on
/// every executing thread, and glibc's arenas trim and re-fault memory between blocks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Stave: a permissioned EVM node in which every stage of the block path runs in parallel.
#[derive(Debug, Parser)]
#[command(name = "stave", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
    /// How log events are written to stderr: `text` for people, `json` (one object a line)
    /// for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The form of the log events on stderr.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// One line of text an event, coloured on a terminal.
    Text,
    /// One JSON object an event: time, level, target, fields and spans.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Events go to stderr, filtered by `RUST_LOG` (say `RUST_LOG=info` for a line per
    // block); by default only warnings and errors, so commands' own output stays clean.
    let events = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => events
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => events.json().init(),
    }
    stave_launch::process::tune();
    match cmd::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
