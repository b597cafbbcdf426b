//! `stave import` and `stave export`: a data dir's blocks as a stream of encoded blocks
//! (docs/wire-formats.md, concatenated; each is a self-delimiting RLP list), as go-ethereum's
//! `import` and `export`.

use std::{
    io::{BufWriter, Write},
    path::PathBuf,
};

use anyhow::Context;
use clap::Args;
use stave_node::Chain;
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
        let json = std::fs::read_to_string(&self.genesis)
            .with_context(|| format!("reading {}", self.genesis.display()))?;
        let spec = ChainSpec::from_json(&json)
            .with_context(|| format!("in {}", self.genesis.display()))?;
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

/// Length of the RLP item at the start of `bytes`, header included.
fn item_len(bytes: &[u8]) -> anyhow::Result<usize> {
    let mut buf = bytes;
    let header =
        alloy_rlp::Header::decode(&mut buf).context("block stream: malformed RLP header")?;
    let len = bytes.len() - buf.len() + header.payload_length;
    anyhow::ensure!(len <= bytes.len(), "block stream ends inside a block");
    Ok(len)
}

/// Imports a block stream: every block goes through decode, verify, execute and commit;
/// blocks already stored are skipped, so an interrupted import resumes where it stopped.
pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    let (store, spec) = args.chain.open()?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut chain = Chain::open(&store, &spec, threads)?;
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let mut items = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let len = item_len(rest)?;
        items.push(&rest[..len]);
        rest = &rest[len..];
    }
    let (mut new, mut skipped) = (0u64, 0u64);
    let start = std::time::Instant::now();
    chain.import_stream(items, None, |imported| {
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
    })?;
    let (number, hash) = chain.head()?;
    eprintln!(
        "imported {new} blocks ({skipped} already stored) in {:.1} s; head {number} {hash}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes blocks `from..=to` as a block stream.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let (store, spec) = args.chain.open()?;
    let chain = Chain::open(&store, &spec, 1)?;
    let to = match args.to {
        Some(to) => to,
        None => chain.head()?.0,
    };
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = BufWriter::new(file);
    for number in args.from..=to {
        let block = chain
            .encoded_block(number)?
            .with_context(|| format!("block {number} is not stored"))?;
        out.write_all(&block)?;
    }
    out.flush()?;
    eprintln!(
        "exported blocks {}..={to} to {}",
        args.from,
        args.out.display()
    );
    Ok(())
}
