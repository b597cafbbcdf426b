//! `stave node`: a running node. `--dev` is a single-validator chain on the embedded
//! default (`stave_primitives::dev`): chain id 1337, the Hardhat/Anvil mnemonic's first 10 accounts
//! funded with 10,000 ETH, JSON-RPC on 8545, Prometheus metrics on 9001. A block is
//! produced every `block_time_ms` (empty if need be: clients waiting for the next block
//! must get one), or as soon as the pool holds a full block, through the import
//! pipeline's execute and commit stages.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use stave_node::{BlockProducer, Chain, ChainView, Parallelism, unix_seconds};
use stave_primitives::{ChainSpec, dev::DEV_MNEMONIC};
use stave_rpc::{NodeContext, RpcConfig};
use stave_storage::{DEFAULT_MAP_SIZE, LmdbStore};
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::{DEFAULT_SENDER_CACHE_CAPACITY, SenderCache};
use tokio::sync::broadcast;

use super::{
    p2p::{self, P2pConfig},
    validator::{self, ConsensusConfig, ValidatorParts},
};

/// How long the node's async tasks get to finish once it has stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Arguments of `stave node`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Run a single-validator dev chain (chain id 1337, funded Hardhat/Anvil accounts).
    #[arg(long, conflicts_with = "config")]
    dev: bool,
    /// A TOML config file (datadir, genesis, ports, limits).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The data dir (with --dev: default a fresh temporary one).
    #[arg(long)]
    datadir: Option<PathBuf>,
    /// JSON-RPC address (HTTP and WebSocket).
    #[arg(long)]
    rpc_addr: Option<SocketAddr>,
    /// Prometheus metrics address.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Longest time between blocks, in milliseconds.
    #[arg(long)]
    block_time_ms: Option<u64>,
    /// Most transactions per block; a full pool produces a block at once.
    #[arg(long)]
    block_txs: Option<usize>,
}

/// The TOML config of `stave node --config FILE`. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Data dir (relative paths are relative to the config file).
    datadir: Option<PathBuf>,
    /// Genesis file in go-ethereum's format (relative to the config file).
    genesis: Option<PathBuf>,
    /// LMDB map size in bytes.
    map_size: Option<usize>,
    rpc_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    block_time_ms: Option<u64>,
    block_txs: Option<usize>,
    /// Most transactions in the txpool.
    pool_max_txs: Option<usize>,
    /// Most transactions per sender in the txpool.
    pool_max_per_sender: Option<usize>,
    /// Whether this node produces blocks alone (default true, without `[consensus]`).
    /// One node of such a network produces; the others follow it over P2P.
    producer: Option<bool>,
    /// Peers, certificates and gossip.
    p2p: Option<P2pConfig>,
    /// This node is one of the genesis's validators, agreeing on blocks with the others.
    consensus: Option<ConsensusConfig>,
}

/// Runs `stave node` until SIGINT or SIGTERM.
pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let (config, base) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let config: Config =
                toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
            (
                config,
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            )
        }
        None if args.dev => (Config::default(), PathBuf::from(".")),
        None => anyhow::bail!("give --dev for a dev chain, or --config FILE"),
    };
    let (spec, dev_accounts) = match &config.genesis {
        Some(path) => {
            let path = base.join(path);
            let json = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            (
                ChainSpec::from_json(&json).with_context(|| format!("in {}", path.display()))?,
                Vec::new(),
            )
        }
        None => stave_primitives::dev::dev_chain()?,
    };
    let temp_dir;
    let datadir = match args.datadir.or(config.datadir.map(|dir| base.join(dir))) {
        Some(dir) => dir,
        None => {
            temp_dir = tempfile::tempdir().context("creating a temporary data dir")?;
            temp_dir.path().to_path_buf()
        }
    };
    let rpc_addr = args
        .rpc_addr
        .or(config.rpc_addr)
        .unwrap_or_else(|| RpcConfig::default().addr);
    let metrics_addr = args
        .metrics_addr
        .or(config.metrics_addr)
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9001)));
    let block_time =
        Duration::from_millis(args.block_time_ms.or(config.block_time_ms).unwrap_or(1_000));
    let block_txs = args.block_txs.or(config.block_txs).unwrap_or(2_500);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The exporter goes first, so metrics recorded while the chain opens are kept.
    {
        let _runtime = runtime.enter();
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(metrics_addr)
            .install()
            .with_context(|| format!("serving metrics on {metrics_addr}"))?;
    }
    std::fs::create_dir_all(&datadir).with_context(|| format!("creating {}", datadir.display()))?;
    // The store lives as long as the process; the RPC server's tasks need it 'static.
    let store: &'static LmdbStore = Box::leak(Box::new(
        LmdbStore::open(&datadir, config.map_size.unwrap_or(DEFAULT_MAP_SIZE))
            .with_context(|| format!("opening {}", datadir.display()))?,
    ));
    let threads = rayon::current_num_threads();
    let cache = Arc::new(SenderCache::new(DEFAULT_SENDER_CACHE_CAPACITY));
    let chain = Chain::open_with(
        store,
        &spec,
        threads,
        Parallelism::Parallel,
        Some(cache.clone()),
    )
    .context("opening the chain (is the data dir from another genesis?)")?;
    let view = Arc::new(ChainView::new(&chain, spec.clone()));
    let mut pool_config = PoolConfig::new(spec.chain_id(), spec.gas_limit());
    if let Some(max) = config.pool_max_txs {
        pool_config.max_txs = max;
    }
    if let Some(max) = config.pool_max_per_sender {
        pool_config.max_per_sender = max;
    }
    let pool = Arc::new(TxPool::new(pool_config, cache));
    let producer = BlockProducer::new(chain, view.clone(), pool.clone(), block_txs);
    let produces = config.producer.unwrap_or(true);
    anyhow::ensure!(
        produces || config.p2p.is_some(),
        "a node that does not produce blocks needs a [p2p] section with peers to follow"
    );
    anyhow::ensure!(
        config.consensus.is_none() || (config.p2p.is_some() && config.producer.is_none()),
        "a [consensus] node needs a [p2p] section (its validators are its peers) and no `producer` key (the validators take turns)"
    );
    let handle = runtime.handle().clone();

    let result = runtime.block_on(async move {
        let (heads, _) = broadcast::channel(1_024);
        let p2p = match &config.p2p {
            Some(p2p_config) => {
                // A validator's consensus channels register once its engine is built, while
                // the other validators already send to it.
                let late_groups = match &config.consensus {
                    Some(_) => vec![stave_consensus::transport::GROUP],
                    None => Vec::new(),
                };
                let admission = p2p::Admission {
                    view: view.clone(),
                    pool: pool.clone(),
                    head_stale_after: config
                        .consensus
                        .as_ref()
                        .map(|consensus| consensus.head_stale_after(block_time)),
                };
                let p2p = p2p::start(p2p_config, &base, admission, late_groups);
                Some(p2p.await?)
            }
            None => None,
        };
        let ctx = NodeContext {
            view: view.clone(),
            pool: pool.clone(),
            heads: heads.clone(),
            admitted: p2p.as_ref().map(|p2p| p2p.admitted.clone()),
            config: RpcConfig {
                addr: rpc_addr,
                ..RpcConfig::default()
            },
        };
        let (bound, server) = stave_rpc::start(ctx).await?;
        let (head, _) = view.head()?;
        println!(
            "stave node: chain id {}, head {head}, data dir {}",
            spec.chain_id(),
            datadir.display()
        );
        if !dev_accounts.is_empty() {
            println!("dev accounts (mnemonic \"{DEV_MNEMONIC}\"), 10,000 ETH each:");
            for (index, account) in dev_accounts.iter().enumerate() {
                println!(
                    "  ({index}) {}  key {}",
                    account.address.to_checksum(None),
                    account.secret
                );
            }
        }
        println!(
            "JSON-RPC on http://{bound} and ws://{bound}; metrics on http://{metrics_addr}/metrics"
        );

        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        // The thread that makes blocks: the validator's chain actor (which ends on an error
        // or when asked to stop) or the producer/follower loop (which ends at `stop`).
        // `p2p` outlives it in this scope, so gossip keeps running.
        let (producing, p2p_kept, chain_actor) = match (&config.consensus, p2p) {
            (Some(consensus), Some(p2p)) => {
                let (actor, chain) = validator::start(
                    consensus,
                    ValidatorParts {
                        spec: &spec,
                        base: &base,
                        datadir: &datadir,
                        producer,
                        pool,
                        p2p: &p2p,
                        heads,
                        idle_wait: block_time,
                    },
                    done_tx,
                )?;
                (actor, Some(p2p), Some(chain))
            }
            (_, p2p) => {
                let stop = stop.clone();
                let producer = std::thread::Builder::new()
                    .name("block-producer".into())
                    .spawn(move || {
                        let result = match p2p {
                            Some(p2p) if !produces => {
                                p2p::follow_blocks(producer, p2p, handle, &heads, &stop)
                            }
                            p2p => {
                                let gossip = p2p.map(|p2p| p2p.gossip);
                                let rhythm = Rhythm {
                                    block_time,
                                    block_txs,
                                };
                                produce_blocks(
                                    producer,
                                    &pool,
                                    &heads,
                                    gossip.as_ref(),
                                    &stop,
                                    rhythm,
                                )
                            }
                        };
                        let _ = done_tx.send(());
                        result
                    })
                    .context("starting the block producer")?;
                (producer, None, None)
            }
        };
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => println!("SIGINT: stopping"),
            _ = terminate.recv() => println!("SIGTERM: stopping"),
            _ = done_rx => {}
        }
        stop.store(true, Ordering::Relaxed);
        // A validator's chain actor stops after the request it is answering (each block
        // commits in one atomic write; the engine replays what is not final) and writes
        // its state layers; the producer or follower loop does the same at `stop`.
        if let Some(chain) = &chain_actor {
            chain.stop_chain();
        }
        let produced = producing
            .join()
            .map_err(|_| anyhow::anyhow!("the block producer panicked"))?;
        drop(p2p_kept);
        let _ = server.stop();
        server.stopped().await;
        let (head, hash) = view.head()?;
        println!("stopped at block {head} ({hash})");
        produced
    });
    // Tasks that never end on their own (a validator's engine keeps the network busy)
    // must not hold up the exit; everything committed is already durable.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

/// When the producer makes a block.
#[derive(Debug, Clone, Copy)]
struct Rhythm {
    /// Longest time between blocks.
    block_time: Duration,
    /// A pool holding this many transactions makes a block at once.
    block_txs: usize,
}

/// The producer loop: a block whenever the pool holds a full one or `block_time` passed,
/// sent to peers through `gossip`. Stops at `stop`, or on the first error (storage
/// full...).
fn produce_blocks(
    mut producer: BlockProducer<'static>,
    pool: &TxPool,
    heads: &broadcast::Sender<Arc<stave_node::Produced>>,
    gossip: Option<&stave_net::Gossip>,
    stop: &AtomicBool,
    rhythm: Rhythm,
) -> anyhow::Result<()> {
    let Rhythm {
        block_time,
        block_txs,
    } = rhythm;
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if pool.len() < block_txs && last.elapsed() < block_time {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        last = Instant::now();
        let produced = producer
            .produce(unix_seconds())
            .context("producing a block")?;
        tracing::info!(
            number = produced.block.number(),
            txs = produced.block.transactions().len(),
            "block"
        );
        if let Some(gossip) = gossip {
            let encoded = produced.encode().context("encoding a block for peers")?;
            if let Err(error) = gossip.announce_block(&encoded) {
                tracing::warn!(%error, "block not announced");
            }
        }
        // No subscriber is not an error.
        let _ = heads.send(Arc::new(produced));
    }
    producer
        .close()
        .context("writing the state to disk before stopping")
}
