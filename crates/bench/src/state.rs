//! `stave bench state`: a chain with many accounts on disk, caches cold,
//! blocks of transfers between random existing accounts, imported without and then with
//! prefetching, each time into a fresh copy of the same data dir whose pages were dropped
//! from the OS page cache. Senders come from a warm sender cache (as when the txpool
//! admitted the transactions), so the runs measure state access, not signatures.
//!
//! `posix_fadvise(DONTNEED)` alone leaves pages cached on some systems; with
//! `--os-cache drop` (the default) the bench also asks the kernel to drop its whole clean
//! page cache before each run (`/proc/sys/vm/drop_caches`, root only), and says whether it
//! could.

use std::{fmt, fs::File, os::fd::AsRawFd, path::Path, sync::Arc, time::Instant};

use rand::{Rng, SeedableRng, seq::SliceRandom};
use rayon::prelude::*;
use serde::Serialize;
use stave_node::{Chain, Parallelism, Prefetcher};
use stave_primitives::{Address, B256, ChainSpec, RecoveredTx, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_state::LayerReads;
use stave_storage::{LmdbOptions, LmdbStore};
use stave_verify::SenderCache;

use crate::{BenchError, CHAIN_ID, GAS_PRICE, Progress, ensure, ratio, threads};

/// The chain and blocks of `stave bench state`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct StateConfig {
    /// Accounts in the genesis, all on disk.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000_000))]
    pub accounts: u64,
    /// Blocks imported per run.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 8))]
    pub blocks: usize,
    /// Transactions per block.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub block_txs: usize,
    /// Prefetch threads (default: 3/5 of the cores, at least one).
    #[cfg_attr(feature = "clap", arg(long))]
    pub prefetch_threads: Option<usize>,
    /// How to make each run's data cold: `drop` the OS page cache (needs root; affects
    /// the whole machine's cache) or only `fadvise` the copied data file.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = OsCache::Drop))]
    pub os_cache: OsCache,
}

/// How a run's data is made cold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OsCache {
    /// Drop the kernel's clean page cache (falls back to `fadvise` without root).
    Drop,
    /// Only advise the kernel to drop the copied data file.
    Fadvise,
}

/// Share of the prefetch run's state reads each layer served, from the second block on.
#[derive(Debug, Clone, Serialize)]
pub struct HitRate {
    /// The executing block's own changes (the executor's overlay).
    pub l1: f64,
    /// The origin pool of values read this block (what the prefetchers load into).
    pub l15: f64,
    /// A diff layer.
    pub l2: f64,
    /// The clean cache.
    pub l3: f64,
    /// Disk: the misses.
    pub disk: f64,
}

/// What the state bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct StateReport {
    /// Accounts on disk.
    pub accounts: u64,
    /// Blocks imported per run.
    pub blocks: usize,
    /// Transactions per block.
    pub block_txs: usize,
    /// Prefetch threads of the second run.
    pub prefetch_threads: usize,
    /// Import time per block without prefetching.
    pub no_prefetch_ms_per_block: f64,
    /// Import time per block with prefetching.
    pub prefetch_ms_per_block: f64,
    /// Without over with.
    pub speedup: f64,
    /// Which layer served the prefetch run's reads.
    pub hit_rate: HitRate,
    /// Values prefetchers loaded that execution never read.
    pub wasted_prefetch: u64,
    /// How the runs were made cold: "dropped" (the OS page cache) or "fadvise".
    pub cold: &'static str,
}

/// Copies an LMDB data dir and drops the copy from the OS page cache, so its first reads
/// go to the disk; with `OsCache::Drop`, drops the whole clean page cache too. Returns how
/// cold the copy is.
fn cold_copy(
    from: &Path,
    to: &Path,
    os_cache: OsCache,
    progress: &dyn Progress,
) -> Result<&'static str, BenchError> {
    let copying = || BenchError::io("copying the data dir");
    std::fs::create_dir_all(to).map_err(copying())?;
    let target = to.join("data.mdb");
    std::fs::copy(from.join("data.mdb"), &target).map_err(copying())?;
    let file = File::open(&target).map_err(copying())?;
    file.sync_all().map_err(copying())?;
    // SAFETY: a plain syscall on an open descriptor; advice only, no memory is touched.
    let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if status != 0 {
        progress.note(&format!(
            "note: posix_fadvise failed ({status}); the OS page cache stays warm"
        ));
    }
    if os_cache == OsCache::Drop {
        // "1" drops clean page-cache pages; the copy was synced above, so it is clean.
        match std::fs::write("/proc/sys/vm/drop_caches", "1") {
            Ok(()) => return Ok("dropped"),
            Err(error) => {
                progress.note(&format!(
                    "note: cannot drop the OS page cache ({error}); fadvise only"
                ));
            }
        }
    }
    Ok("fadvise")
}

/// Blocks of transfers from distinct random senders to random existing accounts.
fn signed_blocks(
    config: &StateConfig,
    addresses: &[Address],
) -> Result<Vec<Vec<RecoveredTx>>, BenchError> {
    let total = config.blocks * config.block_txs;
    ensure(total as u64 <= config.accounts, || {
        format!("need at least {total} accounts")
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut senders: Vec<u64> = (0..config.accounts).collect();
    senders.shuffle(&mut rng);
    senders.truncate(total);
    let receivers: Vec<Address> = (0..total)
        .map(|_| addresses[rng.random_range(0..addresses.len())])
        .collect();
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let txs = senders
        .par_iter()
        .zip(receivers.par_iter())
        .map(|(&sender, &to)| {
            let signer = LocalSigner::from_secret(&dev_account(sender).secret)?;
            let tx = signer.sign_tx(builder.transfer(0, to, U256::from(1)));
            Ok(RecoveredTx {
                tx,
                sender: signer.address(),
            })
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    Ok(txs.chunks(config.block_txs).map(<[_]>::to_vec).collect())
}

/// Imports `blocks` into a cold copy of `genesis_dir`; returns ms per block, the head and
/// the reads per layer.
fn run_once(
    spec: &ChainSpec,
    genesis_dir: &Path,
    blocks: &[Vec<u8>],
    senders: &Arc<SenderCache>,
    prefetcher: Option<&Prefetcher>,
    os_cache: OsCache,
    progress: &dyn Progress,
) -> Result<(f64, B256, LayerReads, &'static str), BenchError> {
    let dir = tempdir()?;
    let cold = cold_copy(genesis_dir, dir.path(), os_cache, progress)?;
    // Without OS read-ahead, as a node whose state is much larger than RAM effectively
    // runs: one miss, one page read (with it, a few thousand faults would pull this whole
    // data dir into the page cache and no later read would miss).
    let store = LmdbStore::open_with(
        dir.path(),
        LmdbOptions {
            map_size: 64 << 30,
            read_ahead: false,
        },
    )?;
    let mut chain = Chain::open_with(
        &store,
        spec,
        threads(),
        Parallelism::Parallel,
        Some(senders.clone()),
    )?;
    let layers = chain.layers();
    let start = Instant::now();
    // Steady state: the first block has no block before it to hide its prefetch behind,
    // so reads are counted from the second block on.
    chain.import_stream(blocks.iter().map(Vec::as_slice), prefetcher, |imported| {
        if imported.number == 1 {
            layers.take_reads();
        }
    })?;
    let ms = start.elapsed().as_secs_f64() * 1e3 / blocks.len() as f64;
    layers.clear_origin();
    Ok((ms, chain.head()?.1, layers.take_reads(), cold))
}

/// A fresh temporary directory.
fn tempdir() -> Result<tempfile::TempDir, BenchError> {
    tempfile::tempdir().map_err(BenchError::io("making a data dir"))
}

/// Runs the state bench.
pub fn run(config: &StateConfig, progress: &dyn Progress) -> Result<StateReport, BenchError> {
    progress.note(&format!("deriving {} accounts…", config.accounts));
    let spec = ChainSpec::dev(CHAIN_ID, config.accounts);
    let addresses: Vec<Address> = spec.alloc().keys().copied().collect();
    let genesis_dir = tempdir()?;
    {
        progress.note("writing them to disk…");
        let store = LmdbStore::open(genesis_dir.path(), 64 << 30)?;
        Chain::open(&store, &spec, threads())?;
    }
    progress.note(&format!(
        "signing {} blocks of {} transfers…",
        config.blocks, config.block_txs
    ));
    let txs = signed_blocks(config, &addresses)?;
    let senders = Arc::new(SenderCache::new(config.blocks * config.block_txs));
    for tx in txs.iter().flatten() {
        senders.insert(tx.tx.hash(), tx.sender);
    }
    let blocks = {
        let dir = tempdir()?;
        cold_copy(genesis_dir.path(), dir.path(), OsCache::Fadvise, progress)?;
        let store = LmdbStore::open(dir.path(), 64 << 30)?;
        let mut producer = Chain::open(&store, &spec, threads())?;
        txs.into_iter()
            .enumerate()
            .map(|(i, txs)| producer.build(txs, 1_700_000_000 + i as u64))
            .collect::<Result<Vec<_>, _>>()?
    };
    let prefetch_threads = config
        .prefetch_threads
        .unwrap_or_else(Prefetcher::default_threads);
    let prefetcher =
        Prefetcher::new(prefetch_threads).map_err(BenchError::io("starting the prefetcher"))?;
    progress.note(&format!(
        "importing without prefetch, then with {prefetch_threads} prefetch threads…"
    ));
    let import = |prefetcher| {
        run_once(
            &spec,
            genesis_dir.path(),
            &blocks,
            &senders,
            prefetcher,
            config.os_cache,
            progress,
        )
    };
    let (plain_ms, plain_head, _, cold) = import(None)?;
    let (prefetch_ms, prefetch_head, reads, _) = import(Some(&prefetcher))?;
    ensure(plain_head == prefetch_head, || {
        format!("prefetching changed the result: heads {plain_head} vs {prefetch_head}")
    })?;
    let total = reads.total().max(1) as f64;
    let share = |n: u64| ratio(n as f64, total);
    Ok(StateReport {
        accounts: config.accounts,
        blocks: blocks.len(),
        block_txs: config.block_txs,
        prefetch_threads,
        no_prefetch_ms_per_block: ratio(plain_ms, 1.0),
        prefetch_ms_per_block: ratio(prefetch_ms, 1.0),
        speedup: ratio(plain_ms, prefetch_ms),
        hit_rate: HitRate {
            l1: share(reads.block),
            l15: share(reads.origin),
            l2: share(reads.diff),
            l3: share(reads.clean),
            disk: share(reads.disk),
        },
        wasted_prefetch: reads.wasted_prefetch,
        cold,
    })
}

impl fmt::Display for StateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "accounts on disk      {}", self.accounts)?;
        writeln!(
            f,
            "blocks                {} × {} transfers",
            self.blocks, self.block_txs
        )?;
        writeln!(
            f,
            "no prefetch           {:.2} ms/block",
            self.no_prefetch_ms_per_block
        )?;
        writeln!(
            f,
            "prefetch ({} threads)  {:.2} ms/block",
            self.prefetch_threads, self.prefetch_ms_per_block
        )?;
        writeln!(f, "speedup               {:.2}x", self.speedup)?;
        writeln!(f, "cold by               {}", self.cold)?;
        writeln!(
            f,
            "reads served (prefetch run): L1 {:.3}  L1.5 {:.3}  L2 {:.3}  L3 {:.3}  disk {:.3}; wasted prefetch loads {}",
            self.hit_rate.l1,
            self.hit_rate.l15,
            self.hit_rate.l2,
            self.hit_rate.l3,
            self.hit_rate.disk,
            self.wasted_prefetch
        )
    }
}
