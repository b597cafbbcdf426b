//! `stave bench node`: the node's import path (`Chain::import_stream`, what followers,
//! full nodes, catch-up and `stave import` run) over a data dir of many accounts, cold.
//! The state is a generated one (`stave state generate`, or made here the same way):
//! senders are dev accounts drawn at random from its keyed ones, recipients accounts
//! drawn from the whole of it. The workload is ether transfers, or transfers of an
//! ERC-20 every account of the state holds (the generated state's token), so each
//! transaction also reads two balance slots of a token with millions of holders. Blocks of transfers are built once, on a copy, then
//! imported without and then with prefetching, each time into a fresh copy of the data
//! dir whose pages were dropped from the OS page cache. Senders come from a warm sender
//! cache (as when the txpool admitted the transactions), so the runs measure state
//! access, not signatures.
//!
//! `posix_fadvise(DONTNEED)` alone leaves pages cached on some systems; with
//! `--os-cache drop` (the default) the bench also asks the kernel to drop its whole clean
//! page cache before each run (`/proc/sys/vm/drop_caches`, root only), and says whether it
//! could.

use std::{
    fmt,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, seq::SliceRandom};
use rayon::prelude::*;
use serde::Serialize;
use stave_node::{Chain, GenerateStep, Parallelism, Prefetcher, generate_state};
use stave_primitives::{ChainSpec, GeneratedState, RecoveredTx, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder, contracts::generated_stave_token};
use stave_state::LayerReads;
use stave_storage::{LmdbOptions, LmdbStore};
use stave_verify::SenderCache;

use crate::{BenchError, CHAIN_ID, GAS_PRICE, Progress, ensure, ms, ratio, threads};

/// The state, blocks and runs of `stave bench node`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct NodeConfig {
    /// Accounts in the generated state made for the run (ignored with `--datadir`).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000_000))]
    pub accounts: u64,
    /// A data dir `stave state generate` wrote, used (copied, never changed) instead of
    /// generating one; its genesis file is `genesis.json` in it unless `--genesis` says.
    #[cfg_attr(feature = "clap", arg(long))]
    pub datadir: Option<PathBuf>,
    /// The genesis file of `--datadir`.
    #[cfg_attr(feature = "clap", arg(long, requires = "datadir"))]
    pub genesis: Option<PathBuf>,
    /// Blocks imported per run.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))
    )]
    pub blocks: usize,
    /// Transfers per block.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = 2_500, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))
    )]
    pub block_txs: usize,
    /// What the transactions do.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = NodeWorkload::Transfer))]
    pub workload: NodeWorkload,
    /// Prefetch threads of the run with prefetching.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = stave_node::DEFAULT_PREFETCH_THREADS))]
    pub prefetch_threads: usize,
    /// How to make each run's data cold: `drop` the OS page cache (needs root; affects
    /// the whole machine's cache), only `fadvise` the copied data file, or `keep` it
    /// cached (a warm node whose state fits in memory).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = OsCache::Drop))]
    pub os_cache: OsCache,
}

/// What the node bench's transactions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum NodeWorkload {
    /// Ether transfers.
    Transfer,
    /// Token transfers of the generated state's ERC-20 (one every account holds when the
    /// bench generates the state; `stave state generate --token-holders` otherwise).
    Erc20,
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
    /// Keep the copy in the OS page cache: a long-running node whose state fits in
    /// memory, its pages read once long ago.
    Keep,
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

/// What the node bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// Accounts in the state.
    pub accounts: u64,
    /// Blocks imported per run.
    pub blocks: usize,
    /// Transactions per block.
    pub block_txs: usize,
    /// What they do.
    pub workload: NodeWorkload,
    /// Prefetch threads of the second run.
    pub prefetch_threads: usize,
    /// Transactions per second imported without prefetching.
    pub tps_no_prefetch: f64,
    /// Transactions per second imported with prefetching.
    pub tps_prefetch: f64,
    /// `tps_prefetch` over `tps_no_prefetch`.
    pub speedup: f64,
    /// Median and 99th-percentile block import time without prefetching, ms.
    pub block_ms_no_prefetch: Percentiles,
    /// The same with prefetching.
    pub block_ms_prefetch: Percentiles,
    /// Which layer served the prefetch run's reads, from the second block on.
    pub hit_rate: HitRate,
    /// The share of those reads not served by the disk.
    pub hit_rate_above_disk: f64,
    /// Values prefetchers loaded that execution never read.
    pub wasted_prefetch: u64,
    /// The process's peak resident memory (VmHWM), bytes.
    pub rss_bytes: u64,
    /// Data dir pages the imported blocks added, per transaction.
    pub disk_bytes_per_tx: f64,
    /// Data dir pages before the blocks, per account.
    pub disk_bytes_per_account: f64,
    /// How the runs were made cold: "dropped" (the OS page cache), "fadvise", or "kept"
    /// (not cold: `--os-cache keep`).
    pub cold: &'static str,
}

/// The middle and the tail of a set of times.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 99th percentile (the slowest, for fewer than 100).
    pub p99: f64,
}

impl Percentiles {
    fn of(mut times: Vec<Duration>) -> Self {
        times.sort();
        let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
        Self {
            p50: at(0.5),
            p99: at(0.99),
        }
    }
}

/// One import run: its wall time, per-block times, the head and the reads per layer.
struct Run {
    elapsed: Duration,
    block_times: Vec<Duration>,
    head: stave_primitives::B256,
    reads: LayerReads,
    cold: &'static str,
    used_before: u64,
    used_after: u64,
}

/// Copies an LMDB data dir and drops the copy from the OS page cache, so its first reads
/// go to the disk; with `OsCache::Drop`, drops the whole clean page cache too; with
/// `OsCache::Keep`, leaves it cached. Returns how cold the copy is.
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
    if os_cache == OsCache::Keep {
        return Ok("kept");
    }
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

/// Blocks of transfers (of ether, or of the state's token), each from a distinct keyed
/// account (one holding tokens) drawn at random, to accounts drawn from the whole state.
fn signed_blocks(
    config: &NodeConfig,
    state: &GeneratedState,
) -> Result<Vec<Vec<RecoveredTx>>, BenchError> {
    let token = match config.workload {
        NodeWorkload::Transfer => None,
        NodeWorkload::Erc20 => Some(state.token.ok_or_else(|| {
            BenchError::Check(
                "the erc20 workload needs a state with a token (`stave state generate --token-holders`)"
                    .into(),
            )
        })?),
    };
    let senders_from = token.map_or(state.keyed, |token| state.keyed.min(token.holders));
    let total = config.blocks * config.block_txs;
    ensure(total as u64 <= senders_from, || {
        format!(
            "{total} transactions need as many keyed accounts (holding the token); the state has {senders_from}"
        )
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut senders: Vec<u64> = (0..senders_from).collect();
    senders.shuffle(&mut rng);
    senders.truncate(total);
    let receivers: Vec<u64> = (0..total)
        .map(|_| rng.random_range(0..state.accounts()))
        .collect();
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let txs = senders
        .par_iter()
        .zip(receivers.par_iter())
        .map(|(&sender, &to)| {
            let signer = LocalSigner::from_secret(&dev_account(sender).secret)?;
            let to = state.address(to);
            let tx = match &token {
                None => builder.transfer(0, to, U256::from(1)),
                Some(token) => builder.erc20_transfer(0, token.address, to, U256::from(1)),
            };
            Ok(RecoveredTx {
                tx: signer.sign_tx(tx),
                sender: signer.address(),
            })
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    Ok(txs.chunks(config.block_txs).map(<[_]>::to_vec).collect())
}

/// Imports `blocks` into a cold copy of `datadir`, prefetching with `prefetcher`.
fn run_once(
    spec: &ChainSpec,
    datadir: &Path,
    blocks: &[Vec<u8>],
    senders: &Arc<SenderCache>,
    prefetcher: Option<Arc<Prefetcher>>,
    os_cache: OsCache,
    progress: &dyn Progress,
) -> Result<Run, BenchError> {
    let dir = tempdir()?;
    let cold = cold_copy(datadir, dir.path(), os_cache, progress)?;
    // Without OS read-ahead, as a node whose state is much larger than RAM effectively
    // runs: one miss, one page read (with it, a few thousand faults would pull this whole
    // data dir into the page cache and no later read would miss).
    let store = LmdbStore::open_with(
        dir.path(),
        LmdbOptions {
            map_size: 1 << 40,
            read_ahead: false,
        },
    )?;
    let used_before = store.space().used_bytes;
    let mut chain = Chain::open_with(
        &store,
        spec,
        threads(),
        Parallelism::Parallel,
        Some(senders.clone()),
    )?
    .with_prefetcher(prefetcher);
    let layers = chain.layers();
    let start = Instant::now();
    let mut last = start;
    let mut block_times = Vec::with_capacity(blocks.len());
    // Steady state: the first block has no block before it to hide its prefetch behind,
    // so reads are counted from the second block on.
    chain.import_stream(blocks.iter().map(Vec::as_slice), |imported| {
        let now = Instant::now();
        block_times.push(now - last);
        last = now;
        if imported.number == 1 {
            layers.take_reads();
        }
    })?;
    let elapsed = start.elapsed();
    // The blocks' state on disk too, for what they cost there.
    chain.flush_all()?;
    layers.clear_origin();
    Ok(Run {
        elapsed,
        block_times,
        head: chain.head()?.1,
        reads: layers.take_reads(),
        cold,
        used_before,
        used_after: store.space().used_bytes,
    })
}

/// A fresh temporary directory.
fn tempdir() -> Result<tempfile::TempDir, BenchError> {
    tempfile::tempdir().map_err(BenchError::io("making a data dir"))
}

/// The process's peak resident memory, from `/proc/self/status` (0 where there is none).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The data dir the runs copy and its chain spec: `--datadir`'s, or one generated in a
/// temporary directory (kept alive by the returned guard).
fn state(
    config: &NodeConfig,
    progress: &dyn Progress,
) -> Result<(PathBuf, ChainSpec, Option<tempfile::TempDir>), BenchError> {
    if let Some(datadir) = &config.datadir {
        let genesis = config
            .genesis
            .clone()
            .unwrap_or_else(|| datadir.join("genesis.json"));
        let json = std::fs::read_to_string(&genesis)
            .map_err(BenchError::io(format!("reading {}", genesis.display())))?;
        let spec = ChainSpec::from_json(&json).map_err(|e| BenchError::Check(e.to_string()))?;
        return Ok((datadir.clone(), spec, None));
    }
    let dir = tempdir()?;
    let keyed = ((config.blocks * config.block_txs) as u64).min(config.accounts);
    let token =
        (config.workload == NodeWorkload::Erc20).then(|| generated_stave_token(config.accounts));
    progress.note(&format!("generating {} accounts…", config.accounts));
    let spec = {
        let store = LmdbStore::open(dir.path(), 1 << 40)?;
        generate_state(
            &store,
            CHAIN_ID,
            keyed,
            config.accounts - keyed,
            token,
            &mut |step| match step {
                GenerateStep::Written(written) => {
                    progress.note(&format!("written {written} accounts…"));
                }
                GenerateStep::WrittenSlots(written) => {
                    progress.note(&format!("written {written} token balances…"));
                }
                GenerateStep::Deriving | GenerateStep::Hashing => {}
            },
        )?
    };
    Ok((dir.path().to_owned(), spec, Some(dir)))
}

/// Runs the node bench.
pub fn run(config: &NodeConfig, progress: &dyn Progress) -> Result<NodeReport, BenchError> {
    let (datadir, spec, _generated) = state(config, progress)?;
    let generated = *spec.generated_state().ok_or_else(|| {
        BenchError::Check("the genesis names no generated state (`stave state generate`)".into())
    })?;
    progress.note(&format!(
        "signing {} blocks of {} transactions…",
        config.blocks, config.block_txs
    ));
    let txs = signed_blocks(config, &generated)?;
    let total_txs = (config.blocks * config.block_txs) as f64;
    let senders = Arc::new(SenderCache::new(config.blocks * config.block_txs));
    for tx in txs.iter().flatten() {
        senders.insert(tx.tx.hash(), tx.sender);
    }
    progress.note("building the blocks on a copy…");
    let blocks = {
        let dir = tempdir()?;
        cold_copy(&datadir, dir.path(), OsCache::Fadvise, progress)?;
        let store = LmdbStore::open(dir.path(), 1 << 40)?;
        let mut producer = Chain::open(&store, &spec, threads())?;
        let blocks = txs
            .into_iter()
            .enumerate()
            .map(|(i, txs)| producer.build(txs, 1_700_000_000 + i as u64))
            .collect::<Result<Vec<_>, _>>()?;
        // A transfer that reverts reads and writes less than one that moves funds.
        let mut failed = 0;
        for number in 1..=blocks.len() as u64 {
            let receipts = stave_storage::read::receipts(&store, number)?.unwrap_or_default();
            failed += receipts
                .iter()
                .filter(|receipt| !receipt.receipt.status.coerce_status())
                .count();
        }
        ensure(failed == 0, || {
            format!("{failed} of the bench's transactions failed")
        })?;
        blocks
    };
    let prefetcher = Prefetcher::with_threads(config.prefetch_threads, stave_node::DISK_LOAD)
        .map_err(BenchError::io("starting the prefetcher"))?;
    progress.note(&format!(
        "importing without prefetch, then with {} prefetch threads…",
        config.prefetch_threads
    ));
    let import = |prefetcher| {
        run_once(
            &spec,
            &datadir,
            &blocks,
            &senders,
            prefetcher,
            config.os_cache,
            progress,
        )
    };
    let plain = import(None)?;
    let prefetched = import(prefetcher)?;
    ensure(plain.head == prefetched.head, || {
        format!(
            "prefetching changed the result: heads {} vs {}",
            plain.head, prefetched.head
        )
    })?;
    let reads = &prefetched.reads;
    let total = reads.total().max(1) as f64;
    let share = |n: u64| ratio(n as f64, total);
    let tps = |run: &Run| ratio(total_txs, run.elapsed.as_secs_f64());
    Ok(NodeReport {
        accounts: generated.accounts(),
        blocks: blocks.len(),
        block_txs: config.block_txs,
        workload: config.workload,
        prefetch_threads: config.prefetch_threads,
        tps_no_prefetch: tps(&plain),
        tps_prefetch: tps(&prefetched),
        speedup: ratio(
            plain.elapsed.as_secs_f64(),
            prefetched.elapsed.as_secs_f64(),
        ),
        block_ms_no_prefetch: Percentiles::of(plain.block_times),
        block_ms_prefetch: Percentiles::of(prefetched.block_times),
        hit_rate: HitRate {
            l1: share(reads.block),
            l15: share(reads.origin),
            l2: share(reads.diff),
            l3: share(reads.clean),
            disk: share(reads.disk),
        },
        hit_rate_above_disk: ratio(total - reads.disk as f64, total),
        wasted_prefetch: reads.wasted_prefetch,
        rss_bytes: peak_rss(),
        disk_bytes_per_tx: ratio(
            prefetched.used_after.saturating_sub(prefetched.used_before) as f64,
            total_txs,
        ),
        disk_bytes_per_account: ratio(prefetched.used_before as f64, generated.accounts() as f64),
        cold: plain.cold,
    })
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "accounts              {}", self.accounts)?;
        let what = match self.workload {
            NodeWorkload::Transfer => "transfers",
            NodeWorkload::Erc20 => "token transfers",
        };
        writeln!(
            f,
            "blocks                {} × {} {what}",
            self.blocks, self.block_txs
        )?;
        writeln!(
            f,
            "no prefetch           {:.0} tx/s  (block p50 {:.1} ms, p99 {:.1} ms)",
            self.tps_no_prefetch, self.block_ms_no_prefetch.p50, self.block_ms_no_prefetch.p99
        )?;
        writeln!(
            f,
            "prefetch ({} threads)  {:.0} tx/s  (block p50 {:.1} ms, p99 {:.1} ms)",
            self.prefetch_threads,
            self.tps_prefetch,
            self.block_ms_prefetch.p50,
            self.block_ms_prefetch.p99
        )?;
        writeln!(f, "speedup               {:.2}x", self.speedup)?;
        writeln!(f, "cold by               {}", self.cold)?;
        writeln!(
            f,
            "reads served (prefetch run): L1 {:.3}  L1.5 {:.3}  L2 {:.3}  L3 {:.3}  disk {:.3}; above disk {:.3}; wasted prefetch loads {}",
            self.hit_rate.l1,
            self.hit_rate.l15,
            self.hit_rate.l2,
            self.hit_rate.l3,
            self.hit_rate.disk,
            self.hit_rate_above_disk,
            self.wasted_prefetch
        )?;
        writeln!(
            f,
            "peak RSS {:.0} MiB; disk {:.0} bytes per account, {:.0} bytes per transaction",
            self.rss_bytes as f64 / (1 << 20) as f64,
            self.disk_bytes_per_account,
            self.disk_bytes_per_tx
        )
    }
}
