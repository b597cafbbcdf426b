//! `stave`: the one command-line tool of the Stave node.
//!
//! Each subcommand lives in its own module under `cmd/`; errors are reported on one line
//! with their context and exit code 1.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than the system allocator: revm allocates and frees per transaction on
/// every executing thread, and glibc's arenas trim and re-fault memory between blocks
/// (see MEASUREMENTS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Stave: a permissioned EVM node in which every stage of the block path runs in parallel.
#[derive(Debug, Parser)]
#[command(name = "stave", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

/// Turns transparent huge pages off for this process (before it allocates much).
///
/// mimalloc asks the kernel for huge pages on its 1 GiB arena (`MADV_HUGEPAGE`), and it
/// hands freed memory back to the kernel after a second; the next touch of such a 2 MiB
/// region then faults a whole huge page in and zeroes it, even for a few kilobytes. A
/// restarted validator catching up (`bench/testnet/catchup.sh`, 5 interleaved runs each)
/// spent 0.80 to 1.04 s in the kernel and 1.93 to 2.76 s of CPU in all with huge pages,
/// 0.15 to 0.23 s and 1.30 to 1.89 s without; its window fell from a median of 5.08 s to
/// 4.04 s (`perf`: 25% of its samples had been `clear_page_erms` under
/// `do_huge_pmd_anonymous_page`). The flag holds for mappings made before it too.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory of
        // ours.
        let failed = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0;
        if failed {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "transparent huge pages stay on"
            );
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Events go to stderr, filtered by `RUST_LOG` (say `RUST_LOG=info` for a line per
    // block); by default only warnings and errors, so commands' own output stays clean.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    disable_transparent_huge_pages();
    match cmd::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
