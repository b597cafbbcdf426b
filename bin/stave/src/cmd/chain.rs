//! `stave import` and `stave export`: a data dir's blocks as a block stream
//! (`stave_launch::stream`).

use std::path::PathBuf;

use clap::Args;
use stave_launch::stream;
use stave_primitives::ChainSpec;
use stave_storage::{DEFAULT_MAP_SIZE, LmdbStore};

/// Where the chain lives: data dir and genesis.
#[derive(Debug, Args)]
pub struct ChainArgs {
    /// The data dir (created if missing).
    #[arg(long)]
    datadir: PathBuf,
    /// The genesis file (go-ethereum format) the data dir was, or is to be, created from.
    #[arg(long)]
    genesis: PathBuf,
    /// LMDB map size in bytes: the most the data dir can grow to.
    #[arg(long, default_value_t = DEFAULT_MAP_SIZE)]
    map_size: usize,
}

impl ChainArgs {
    fn open(&self) -> anyhow::Result<(LmdbStore, ChainSpec)> {
        let spec = stave_launch::read_genesis(&self.genesis)?;
        let store = LmdbStore::open(&self.datadir, self.map_size)?;
        Ok((store, spec))
    }
}

/// Arguments of `stave import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    chain: ChainArgs,
    /// The block stream to import.
    file: PathBuf,
    /// Threads that load each block's state reads while the block before it executes
    /// (0: none).
    #[arg(long, default_value_t = stave_node::DEFAULT_PREFETCH_THREADS)]
    prefetch_threads: usize,
}

/// Arguments of `stave export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    chain: ChainArgs,
    /// Where to write the block stream.
    #[arg(long)]
    out: PathBuf,
    /// First block (default 1, the first after genesis).
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Last block (default: the head).
    #[arg(long)]
    to: Option<u64>,
}

/// Imports a block stream: every block goes through decode, verify, execute and commit;
/// blocks already stored are skipped, so an interrupted import resumes where it stopped.
pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    let (store, spec) = args.chain.open()?;
    let (mut new, mut skipped) = (0u64, 0u64);
    let start = std::time::Instant::now();
    let (number, hash) = stream::import_file(
        &store,
        &spec,
        &args.file,
        args.prefetch_threads,
        |imported| {
            if imported.new {
                new += 1;
            } else {
                skipped += 1;
            }
            if imported.number % 100 == 0 {
                eprintln!(
                    "imported block {} ({new} new, {skipped} already stored)",
                    imported.number
                );
            }
        },
    )?;
    eprintln!(
        "imported {new} blocks ({skipped} already stored) in {:.1} s; head {number} {hash}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes blocks `from..=to` as a block stream.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let (store, spec) = args.chain.open()?;
    let to = stream::export_file(&store, &spec, args.from, args.to, &args.out)?;
    eprintln!(
        "exported blocks {}..={to} to {}",
        args.from,
        args.out.display()
    );
    Ok(())
}
