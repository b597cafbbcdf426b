//! A data dir's blocks as a block stream (docs/wire-formats.md, blocks concatenated; each
//! is a self-delimiting RLP list), as `stave import` reads and `stave export` writes it,
//! like go-ethereum's `import` and `export`.

use std::{
    io::{BufWriter, Write},
    path::Path,
};

use stave_node::{Chain, Imported, Prefetcher};
use stave_primitives::{B256, ChainSpec};
use stave_storage::KvStore;

use crate::LaunchError;

/// Imports the block stream in `file` into the chain in `store`: every block goes through
/// decode, verify, execute and commit, on all cores; blocks already stored are skipped,
/// so an interrupted import resumes where it stopped. Each block's reads are prefetched
/// on `prefetch_threads` threads (0: none) while the block before it executes. Calls
/// `on_block` after each block; returns the head (number and hash) at the end.
pub fn import_file(
    store: &dyn KvStore,
    spec: &ChainSpec,
    file: &Path,
    prefetch_threads: usize,
    on_block: impl FnMut(Imported),
) -> Result<(u64, B256), LaunchError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let prefetcher = Prefetcher::with_threads(prefetch_threads, stave_node::DISK_LOAD)
        .map_err(LaunchError::io("starting the prefetch threads"))?;
    let mut chain = Chain::open(store, spec, threads)
        .map_err(LaunchError::import("opening the chain"))?
        .with_prefetcher(prefetcher);
    let bytes =
        std::fs::read(file).map_err(LaunchError::io(format!("reading {}", file.display())))?;
    let items = stave_codec::split_block_stream(&bytes)?;
    chain
        .import_stream(items, on_block)
        .map_err(LaunchError::import("importing the block stream"))?;
    chain
        .head()
        .map_err(LaunchError::import("reading the head"))
}

/// Writes blocks `from..=to` (`to` by default the head) of the chain in `store` to `out`
/// as a block stream; returns the last block written.
pub fn export_file(
    store: &dyn KvStore,
    spec: &ChainSpec,
    from: u64,
    to: Option<u64>,
    out: &Path,
) -> Result<u64, LaunchError> {
    let chain = Chain::open(store, spec, 1).map_err(LaunchError::import("opening the chain"))?;
    let to = match to {
        Some(to) => to,
        None => {
            chain
                .head()
                .map_err(LaunchError::import("reading the head"))?
                .0
        }
    };
    let writing = || LaunchError::io(format!("writing {}", out.display()));
    let file = std::fs::File::create(out)
        .map_err(LaunchError::io(format!("creating {}", out.display())))?;
    let mut writer = BufWriter::new(file);
    for number in from..=to {
        let block = chain
            .encoded_block(number)
            .map_err(LaunchError::import("reading a block"))?
            .ok_or(LaunchError::MissingBlock(number))?;
        writer.write_all(&block).map_err(writing())?;
    }
    writer.flush().map_err(writing())?;
    Ok(to)
}
