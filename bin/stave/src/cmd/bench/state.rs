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

use std::{fs::File, os::fd::AsRawFd, path::Path, sync::Arc, time::Instant};

use anyhow::Context;
use clap::Args;
use rand::{Rng, SeedableRng, seq::SliceRandom};
use rayon::prelude::*;
use serde::Serialize;
use stave_node::{Chain, Parallelism, Prefetcher};
use stave_primitives::{Address, ChainSpec, RecoveredTx, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_state::LayerReads;
use stave_storage::{LmdbOptions, LmdbStore};
use stave_verify::SenderCache;

use super::{CHAIN_ID, Output, ratio, threads};

/// Arguments of `stave bench state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Accounts in the genesis, all on disk.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Blocks imported per run.
    #[arg(long, default_value_t = 8)]
    blocks: usize,
    /// Transactions per block.
    #[arg(long, default_value_t = 2_500)]
    block_txs: usize,
    /// Prefetch threads (default: 3/5 of the cores, at least one).
    #[arg(long)]
    prefetch_threads: Option<usize>,
    /// How to make each run's data cold: `drop` the OS page cache (needs root; affects
    /// the whole machine's cache) or only `fadvise` the copied data file.
    #[arg(long, value_enum, default_value_t = OsCache::Drop)]
    os_cache: OsCache,
    #[command(flatten)]
    output: Output,
}

/// How a run's data is made cold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum OsCache {
    /// Drop the kernel's clean page cache (falls back to `fadvise` without root).
    Drop,
    /// Only advise the kernel to drop the copied data file.
    Fadvise,
}

/// Share of the prefetch run's state reads each layer served, from the second block on.
#[derive(Debug, Serialize)]
struct HitRate {
    /// The executing block's own changes (the executor's overlay).
    l1: f64,
    l15: f64,
    l2: f64,
    l3: f64,
    disk: f64,
}

/// The JSON line.
#[derive(Debug, Serialize)]
struct Report {
    accounts: u64,
    blocks: usize,
    block_txs: usize,
    prefetch_threads: usize,
    no_prefetch_ms_per_block: f64,
    prefetch_ms_per_block: f64,
    speedup: f64,
    hit_rate: HitRate,
    wasted_prefetch: u64,
    /// How the runs were made cold: "dropped" (the OS page cache) or "fadvise".
    cold: &'static str,
}

/// Copies an LMDB data dir and drops the copy from the OS page cache, so its first reads
/// go to the disk; with `OsCache::Drop`, drops the whole clean page cache too. Returns how
/// cold the copy is.
fn cold_copy(from: &Path, to: &Path, os_cache: OsCache) -> anyhow::Result<&'static str> {
    std::fs::create_dir_all(to)?;
    let target = to.join("data.mdb");
    std::fs::copy(from.join("data.mdb"), &target).context("copying the data dir")?;
    let file = File::open(&target)?;
    file.sync_all()?;
    // SAFETY: a plain syscall on an open descriptor; advice only, no memory is touched.
    let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if status != 0 {
        eprintln!("note: posix_fadvise failed ({status}); the OS page cache stays warm");
    }
    if os_cache == OsCache::Drop {
        // "1" drops clean page-cache pages; the copy was synced above, so it is clean.
        match std::fs::write("/proc/sys/vm/drop_caches", "1") {
            Ok(()) => return Ok("dropped"),
            Err(error) => {
                eprintln!("note: cannot drop the OS page cache ({error}); fadvise only");
            }
        }
    }
    Ok("fadvise")
}

/// Blocks of transfers from distinct random senders to random existing accounts.
fn signed_blocks(args: &StateArgs, addresses: &[Address]) -> anyhow::Result<Vec<Vec<RecoveredTx>>> {
    let total = args.blocks * args.block_txs;
    anyhow::ensure!(
        total as u64 <= args.accounts,
        "need at least {total} accounts"
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut senders: Vec<u64> = (0..args.accounts).collect();
    senders.shuffle(&mut rng);
    senders.truncate(total);
    let receivers: Vec<Address> = (0..total)
        .map(|_| addresses[rng.random_range(0..addresses.len())])
        .collect();
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
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
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(txs.chunks(args.block_txs).map(<[_]>::to_vec).collect())
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
) -> anyhow::Result<(f64, stave_primitives::B256, LayerReads, &'static str)> {
    let dir = tempfile::tempdir()?;
    let cold = cold_copy(genesis_dir, dir.path(), os_cache)?;
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

/// Runs the state bench.
pub fn run(args: StateArgs) -> anyhow::Result<()> {
    eprintln!("deriving {} accounts…", args.accounts);
    let spec = ChainSpec::dev(CHAIN_ID, args.accounts);
    let addresses: Vec<Address> = spec.alloc().keys().copied().collect();
    let genesis_dir = tempfile::tempdir()?;
    {
        eprintln!("writing them to disk…");
        let store = LmdbStore::open(genesis_dir.path(), 64 << 30)?;
        Chain::open(&store, &spec, threads())?;
    }
    eprintln!(
        "signing {} blocks of {} transfers…",
        args.blocks, args.block_txs
    );
    let txs = signed_blocks(&args, &addresses)?;
    let senders = Arc::new(SenderCache::new(args.blocks * args.block_txs));
    for tx in txs.iter().flatten() {
        senders.insert(tx.tx.hash(), tx.sender);
    }
    let blocks = {
        let dir = tempfile::tempdir()?;
        cold_copy(genesis_dir.path(), dir.path(), OsCache::Fadvise)?;
        let store = LmdbStore::open(dir.path(), 64 << 30)?;
        let mut producer = Chain::open(&store, &spec, threads())?;
        txs.into_iter()
            .enumerate()
            .map(|(i, txs)| producer.build(txs, 1_700_000_000 + i as u64))
            .collect::<Result<Vec<_>, _>>()?
    };
    let prefetch_threads = args
        .prefetch_threads
        .unwrap_or_else(Prefetcher::default_threads);
    let prefetcher = Prefetcher::new(prefetch_threads)?;
    eprintln!("importing without prefetch, then with {prefetch_threads} prefetch threads…");
    let (plain_ms, plain_head, _, cold) = run_once(
        &spec,
        genesis_dir.path(),
        &blocks,
        &senders,
        None,
        args.os_cache,
    )?;
    let (prefetch_ms, prefetch_head, reads, _) = run_once(
        &spec,
        genesis_dir.path(),
        &blocks,
        &senders,
        Some(&prefetcher),
        args.os_cache,
    )?;
    anyhow::ensure!(
        plain_head == prefetch_head,
        "prefetching changed the result: heads {plain_head} vs {prefetch_head}"
    );
    let total = reads.total().max(1) as f64;
    let share = |n: u64| ratio(n as f64, total);
    let report = Report {
        accounts: args.accounts,
        blocks: blocks.len(),
        block_txs: args.block_txs,
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
    };
    println!("accounts on disk      {}", report.accounts);
    println!(
        "blocks                {} × {} transfers",
        report.blocks, report.block_txs
    );
    println!(
        "no prefetch           {:.2} ms/block",
        report.no_prefetch_ms_per_block
    );
    println!(
        "prefetch ({} threads)  {:.2} ms/block",
        prefetch_threads, report.prefetch_ms_per_block
    );
    println!("speedup               {:.2}x", report.speedup);
    println!("cold by               {}", report.cold);
    println!(
        "reads served (prefetch run): L1 {:.3}  L1.5 {:.3}  L2 {:.3}  L3 {:.3}  disk {:.3}; wasted prefetch loads {}",
        report.hit_rate.l1,
        report.hit_rate.l15,
        report.hit_rate.l2,
        report.hit_rate.l3,
        report.hit_rate.disk,
        report.wasted_prefetch
    );
    args.output.finish(&report)
}
