//! [`RunningNode`]: a node started from a [`NodeConfig`], in this process, until stopped.
//!
//! Starting opens the data dir's store, the chain, the txpool and the producer, then
//! (on the node's own tokio runtime) the P2P network and gossip, the JSON-RPC server (on a
//! runtime of its own, unless turned off) and the thread that makes or takes blocks: the
//! producer loop, the follower loop, a validator's chain actor and consensus engine, or a
//! full node's chain actor.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, atomic::AtomicU64},
    thread::JoinHandle,
    time::Duration,
};

use stave_consensus::StaveApp;
use stave_exec::ParallelExecutor;
use stave_net::{Network, NodeId};
use stave_node::{BlockProducer, Chain, ChainView, ImportError, Parallelism, Prefetcher, Produced};
use stave_primitives::{B256, ChainSpec};
use stave_rpc::{NodeContext, RpcServer, SyncProgress};
use stave_storage::LmdbStore;
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::SenderCache;
use tokio::{
    runtime::Runtime,
    sync::{broadcast, watch},
};

use crate::{
    LaunchError, NodeConfig, Role, allow_list, follower,
    full_node::{self, FullNodeParts},
    metrics,
    p2p::{self, Admission, P2p},
    producer::{self, Rhythm},
    supervisor::{Part, Supervisor},
    validator::{self, ValidatorParts},
};

/// How long the node's async tasks get to finish once it has stopped: tasks that never
/// end on their own (a validator's engine keeps the network busy) must not hold up the
/// stop; everything committed is already durable.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A node running in this process: its RPC server bound, its block-making thread started.
///
/// [`RunningNode::stop`] (or dropping it) stops it cleanly. What it cannot give back:
/// its LMDB store is leaked (the RPC server, the chain view and the producer borrow it
/// for `'static`; one leak per node started), and the store stays open, so a process
/// cannot start a node on the same data dir twice (heed refuses to open one environment
/// twice): a restart of the same data dir takes a new process.
pub struct RunningNode {
    spec: ChainSpec,
    datadir: PathBuf,
    view: Arc<ChainView<'static>>,
    rpc_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    network: Option<Network>,
    validator: Option<B256>,
    /// The first vital part that ended (see `supervisor`).
    ended: watch::Receiver<Option<Part>>,
    /// Set by `start`; taken by `stop` or `drop`.
    running: Option<Running>,
}

/// What stopping a node has to stop.
struct Running {
    /// The node's async runtime: the network and gossip run on it (the RPC server runs on
    /// its own).
    runtime: Runtime,
    /// What runs on it and beside it.
    tasks: Tasks,
}

/// The threads and servers of a node.
struct Tasks {
    /// Watches the vital parts; tells the producer or follower loop to stop.
    supervisor: Supervisor,
    /// The thread that makes blocks (the producer or follower loop, or a validator's
    /// chain actor); it writes the state layers to disk before it ends.
    making_blocks: JoinHandle<()>,
    /// A validator's or full node's handle on its chain actor.
    chain: Option<StaveApp>,
    /// A validator's or full node's P2P side (a producer's or follower's lives in its
    /// thread).
    p2p: Option<P2p>,
    /// The JSON-RPC server, on its own runtime, unless the config turned it off.
    server: Option<RpcServer>,
    /// The temporary data dir, removed once the node stopped.
    temp_dir: Option<tempfile::TempDir>,
}

/// Why [`RunningNode::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The process got SIGINT.
    Interrupted,
    /// The process got SIGTERM.
    Terminated,
    /// A part the node cannot live without ended by itself: the thread that makes
    /// blocks, a validator's consensus engine, the JSON-RPC server or a task of the P2P
    /// network or gossip failed (an error, a panic; see [`Stopped::error`]).
    Ended,
}

/// Where a stopped node's chain stands.
#[derive(Debug)]
pub struct Stopped {
    /// The head's number.
    pub head: u64,
    /// The head's hash.
    pub hash: B256,
    /// The first failure of a part the node cannot live without, if one failed (storage
    /// full, a block that cannot be committed, a consensus engine that panicked...).
    pub error: Option<LaunchError>,
}

impl RunningNode {
    /// Starts a node; returns once its JSON-RPC server is bound and it makes blocks.
    /// Call it outside any async runtime: the node runs its own.
    pub fn start(config: NodeConfig) -> Result<Self, LaunchError> {
        config.check()?;
        config.check_machine()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(LaunchError::io("starting the async runtime"))?;
        match Self::start_on(&runtime, config) {
            Ok((mut node, tasks)) => {
                node.running = Some(Running { runtime, tasks });
                Ok(node)
            }
            Err(error) => {
                runtime.shutdown_timeout(SHUTDOWN_GRACE);
                Err(error)
            }
        }
    }

    /// Everything [`RunningNode::start`] does but build the runtime.
    fn start_on(runtime: &Runtime, config: NodeConfig) -> Result<(Self, Tasks), LaunchError> {
        // The exporter goes first, so metrics recorded while the chain opens are kept;
        // `/ready` says "starting" until the parts it checks are known.
        let readiness = metrics::Readiness::default();
        let metrics_addr = match config.metrics_addr {
            Some(addr) => {
                let _runtime = runtime.enter();
                metrics::serve(addr, readiness.clone())?
            }
            None => None,
        };
        let (datadir, temp_dir) = match &config.datadir {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::tempdir()
                    .map_err(LaunchError::io("creating a temporary data dir"))?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        std::fs::create_dir_all(&datadir)
            .map_err(LaunchError::io(format!("creating {}", datadir.display())))?;
        // Leaked: see `RunningNode`.
        let store: &'static LmdbStore = Box::leak(Box::new(
            LmdbStore::open(&datadir, config.map_size).map_err(|source| {
                LaunchError::OpenStore {
                    path: datadir.clone(),
                    source,
                }
            })?,
        ));
        let spec = config.genesis.clone();
        let cache = Arc::new(SenderCache::new(config.sender_cache_entries));
        let executor = ParallelExecutor::new(rayon::current_num_threads()).map_err(|error| {
            LaunchError::import("starting the executor")(ImportError::Threads(error))
        })?;
        let chain = Chain::open_on(
            store,
            &spec,
            executor,
            Parallelism::Parallel,
            Some(cache.clone()),
            stave_state::StateOptions {
                cache_entries: config.state_cache_entries,
                history: config.history,
            },
        )
        .map_err(LaunchError::import(
            "opening the chain (is the data dir from another genesis?)",
        ))?
        .with_prefetcher(
            Prefetcher::with_threads(config.prefetch_threads, config.prefetch_disk_load)
                .map_err(LaunchError::io("starting the prefetch threads"))?,
        );
        let view = Arc::new(ChainView::new(&chain, spec.clone()));
        let mut pool_config = PoolConfig::new(spec.chain_id(), spec.gas_limit());
        if let Some(max) = config.pool_max_txs {
            pool_config.max_txs = max;
        }
        if let Some(max) = config.pool_max_per_sender {
            pool_config.max_per_sender = max;
        }
        let pool = Arc::new(TxPool::new(pool_config, cache));
        let producer = BlockProducer::new(chain, view.clone(), pool.clone(), config.block_txs)
            .with_fill_rounds(config.block_fill_rounds);
        let parts = Parts {
            config,
            store,
            datadir,
            view,
            pool,
            producer,
            readiness,
        };
        let (mut node, mut tasks) = runtime.block_on(parts.launch(runtime))?;
        node.metrics_addr = metrics_addr;
        tasks.temp_dir = temp_dir;
        Ok((node, tasks))
    }

    /// The chain's genesis.
    pub fn spec(&self) -> &ChainSpec {
        &self.spec
    }

    /// The data dir (a temporary one unless the config named one).
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// Where JSON-RPC is served (HTTP and WebSocket), with the port bound; `None` when
    /// the config turned it off.
    pub fn rpc_addr(&self) -> Option<SocketAddr> {
        self.rpc_addr
    }

    /// Where Prometheus metrics are served; `None` when the config asked for none, or
    /// when an earlier node of this process installed the process's one recorder (its
    /// endpoint then shows this node's metrics too, while it runs).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where the P2P network listens, with the port bound; `None` without `[p2p]`.
    pub fn p2p_addr(&self) -> Option<SocketAddr> {
        self.network.as_ref().map(Network::local_addr)
    }

    /// This node's P2P id (from its certificate's key); `None` without `[p2p]`.
    pub fn node_id(&self) -> Option<NodeId> {
        self.network.as_ref().map(Network::local_id)
    }

    /// A validator's consensus public key, as the genesis names it.
    pub fn validator(&self) -> Option<B256> {
        self.validator
    }

    /// The head block's number and hash.
    pub fn head(&self) -> Result<(u64, B256), LaunchError> {
        Ok(self.view.head()?)
    }

    /// Blocks until the process gets SIGINT or SIGTERM, or a part the node cannot live
    /// without (the thread that makes blocks, a validator's consensus engine, the JSON-RPC
    /// server, the P2P network and gossip) ends by itself. Installs the process's handlers
    /// for both signals, for good.
    pub fn wait(&self) -> Result<Exit, LaunchError> {
        let running = self
            .running
            .as_ref()
            .expect("a started node runs until stopped");
        let mut ended = self.ended.clone();
        running.runtime.block_on(async move {
            let mut terminate =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .map_err(LaunchError::io("installing the SIGTERM handler"))?;
            Ok(tokio::select! {
                _ = tokio::signal::ctrl_c() => Exit::Interrupted,
                _ = terminate.recv() => Exit::Terminated,
                // The supervisor catches panics too; a dropped sender (it cannot be, while
                // the node runs) ends the wait as well.
                _ = ended.wait_for(Option::is_some) => Exit::Ended,
            })
        })
    }

    /// Stops the node: the thread that makes blocks finishes the block at hand and writes
    /// the state layers to disk (the next start re-executes nothing), then the network
    /// and the RPC server stop and the runtime shuts down.
    pub fn stop(mut self) -> Result<Stopped, LaunchError> {
        // `start` set it and only `stop` or `drop`, which consume the node, take it.
        let running = self
            .running
            .take()
            .expect("a started node runs until stopped");
        running.stop(&self.view, self.network.as_ref())
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.stop(&self.view, self.network.as_ref());
        }
    }
}

impl Running {
    /// See [`RunningNode::stop`].
    fn stop(
        self,
        view: &ChainView<'static>,
        network: Option<&Network>,
    ) -> Result<Stopped, LaunchError> {
        let Running { runtime, tasks } = self;
        tasks.supervisor.stop();
        // A validator's chain actor stops after the request it is answering (each block
        // commits in one atomic write; the engine replays what is not final) and writes
        // its state layers; the producer or follower loop does the same at `stop`.
        if let Some(chain) = &tasks.chain {
            chain.stop_chain();
        }
        // Its panics are caught and recorded by the supervisor, as its errors are.
        let _ = tasks.making_blocks.join();
        if let Some(network) = network {
            network.shutdown();
        }
        drop(tasks.p2p);
        if let Some(server) = tasks.server {
            server.stop();
        }
        let head = view.head();
        runtime.shutdown_timeout(SHUTDOWN_GRACE);
        drop(tasks.temp_dir);
        let (head, hash) = head?;
        Ok(Stopped {
            head,
            hash,
            error: tasks.supervisor.take_failure(),
        })
    }
}

/// What the async part of the start needs.
struct Parts {
    config: NodeConfig,
    store: &'static LmdbStore,
    datadir: PathBuf,
    view: Arc<ChainView<'static>>,
    pool: Arc<TxPool>,
    producer: BlockProducer<'static>,
    readiness: metrics::Readiness,
}

impl Parts {
    /// Starts P2P, the RPC server and the thread that makes blocks, on `runtime` (which
    /// this runs within).
    async fn launch(self, runtime: &Runtime) -> Result<(RunningNode, Tasks), LaunchError> {
        let Parts {
            config,
            store,
            datadir,
            view,
            pool,
            producer,
            readiness,
        } = self;
        let (heads, _) = broadcast::channel::<Arc<Produced>>(1_024);
        let (supervisor, ended) = Supervisor::new();
        let mut p2p = match &config.p2p {
            Some(p2p_config) => {
                // A validator's consensus channels register once its engine is built,
                // while the other validators already send to it.
                let (late_groups, head_stale_after, validators) = match &config.role {
                    Role::Validator(consensus) => (
                        vec![stave_consensus::transport::GROUP],
                        Some(consensus.head_stale_after(config.block_time)),
                        Some(p2p::validator_ids(&config.genesis)?),
                    ),
                    Role::FullNode => {
                        (Vec::new(), None, Some(p2p::validator_ids(&config.genesis)?))
                    }
                    _ => (Vec::new(), None, None),
                };
                let admission = Admission {
                    view: view.clone(),
                    pool: pool.clone(),
                    head_stale_after,
                };
                Some(p2p::start(p2p_config, admission, late_groups, validators).await?)
            }
            None => None,
        };
        for (part, task) in p2p
            .iter_mut()
            .flat_map(|p2p| std::mem::take(&mut p2p.tasks))
        {
            supervisor.watch(part, task);
        }
        let network = p2p.as_ref().map(|p2p| p2p.network.clone());
        // A node that takes its blocks from others reports how far it has to go.
        let (head, _) = view.head()?;
        let highest_block = Arc::new(AtomicU64::new(head));
        let sync = (!matches!(config.role, Role::Producer)).then(|| SyncProgress {
            starting_block: head,
            highest_block: highest_block.clone(),
        });
        // A dev node's JSON-RPC signs with its funded accounts and steers block making.
        let dev_mining = (matches!(config.role, Role::Producer) && !config.dev_accounts.is_empty())
            .then(|| Arc::new(producer::DevMining::default()));
        let dev = match &dev_mining {
            Some(mining) => Some(stave_rpc::dev::DevChain {
                signers: config
                    .dev_accounts
                    .iter()
                    .map(|account| stave_sdk::LocalSigner::from_secret(&account.secret))
                    .collect::<Result<_, _>>()
                    .map_err(|error| {
                        LaunchError::Config(format!("a dev account's key: {error}"))
                    })?,
                mining: mining.clone(),
                impersonation: Default::default(),
            }),
            None => None,
        };
        let ctx = NodeContext {
            view: view.clone(),
            pool: pool.clone(),
            heads: heads.clone(),
            admitted: p2p.as_ref().map(|p2p| p2p.admitted.clone()),
            config: config.rpc.clone(),
            sync,
            peer_count: network.clone().map(|network| {
                let count: stave_rpc::PeerCount = Arc::new(move || network.peers().len());
                count
            }),
            dev,
        };
        let _ = readiness.set(metrics::ReadyParts {
            console: stave_rpc::ConsoleRpc::new(ctx.clone())?,
            store,
            view: view.clone(),
            sync: ctx.sync.clone(),
            network: network.clone(),
            datadir: datadir.clone(),
        });
        let server = match config.rpc_enabled {
            true => {
                let mut server = stave_rpc::start(ctx).await?;
                if let Some(task) = server.take_task() {
                    supervisor.watch("JSON-RPC server", task);
                }
                Some(server)
            }
            false => None,
        };
        let rpc_addr = server.as_ref().map(RpcServer::addr);
        let allow_list = network.clone().map(|network| (network, heads.subscribe()));
        let (making_blocks, chain, validator, p2p, epochs) = match (&config.role, p2p) {
            (Role::Validator(consensus), Some(p2p)) => {
                let started = validator::start(
                    consensus,
                    ValidatorParts {
                        spec: &config.genesis,
                        datadir: &datadir,
                        producer,
                        pool,
                        p2p: &p2p,
                        heads,
                        idle_wait: config.block_time,
                        highest_block,
                    },
                    &supervisor,
                )?;
                (
                    started.actor,
                    Some(started.chain),
                    Some(started.public),
                    Some(p2p),
                    Some(started.epochs),
                )
            }
            (Role::FullNode, Some(mut p2p)) => {
                let started = full_node::start(
                    FullNodeParts {
                        spec: &config.genesis,
                        producer,
                        pool,
                        p2p: &mut p2p,
                        heads,
                        highest_block,
                    },
                    &supervisor,
                )?;
                (
                    started.actor,
                    Some(started.chain),
                    None,
                    Some(p2p),
                    Some(started.epochs),
                )
            }
            (role, p2p) => {
                let follows = matches!(role, Role::Follower);
                let handle = runtime.handle().clone();
                let rhythm = Rhythm {
                    block_time: config.block_time,
                    block_txs: config.block_txs,
                };
                let part = if follows {
                    "block follower"
                } else {
                    "block producer"
                };
                let watched = supervisor.clone();
                let thread = supervisor.spawn(part, "block-producer", move || {
                    let stop = watched.stop_flag();
                    match p2p {
                        Some(p2p) if follows => follower::follow_blocks(
                            producer,
                            p2p,
                            handle,
                            &heads,
                            &highest_block,
                            stop,
                        ),
                        p2p => {
                            let gossip = p2p.map(|p2p| p2p.gossip);
                            producer::produce_blocks(
                                producer,
                                &pool,
                                &heads,
                                gossip.as_ref(),
                                stop,
                                rhythm,
                                dev_mining.as_deref(),
                            )
                        }
                    }
                })?;
                (thread, None, None, None, None)
            }
        };
        if let Some((network, heads)) = allow_list {
            runtime.spawn(allow_list::follow(view.clone(), network, heads, epochs));
        }
        let node = RunningNode {
            spec: config.genesis,
            datadir,
            view,
            rpc_addr,
            metrics_addr: None,
            network,
            validator,
            ended,
            running: None,
        };
        let tasks = Tasks {
            supervisor,
            making_blocks,
            chain,
            p2p,
            server,
            temp_dir: None,
        };
        Ok((node, tasks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{P2pConfig, P2pLimits, files::write_new};

    /// A dev producer with a `[p2p]` section (an identity of a fresh chain CA, no peers).
    fn producer_with_p2p(dir: &Path) -> NodeConfig {
        let ca = stave_net::ChainCa::generate("test chain").expect("a CA");
        let identity = ca.issue("node0.stave").expect("a certificate");
        let ((ca_pem, _), (cert, key)) = (ca.to_pem(), identity.to_pem());
        let path = |name: &str| dir.join(name);
        write_new(&path("ca.pem"), &ca_pem, false).expect("writes");
        write_new(&path("node.pem"), &cert, false).expect("writes");
        write_new(&path("node.key"), &key, true).expect("writes");
        let mut config = NodeConfig::dev().expect("the dev chain");
        config.p2p = Some(P2pConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ca: path("ca.pem"),
            cert: path("node.pem"),
            key: path("node.key"),
            allowed: vec![identity.node_id().expect("an id")],
            peers: Vec::new(),
            block_sources: Vec::new(),
            limits: P2pLimits::default(),
        });
        config.in_process()
    }

    #[test]
    fn a_node_whose_network_stops_by_itself_ends_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = RunningNode::start(producer_with_p2p(dir.path())).expect("starts");
        // The network's tasks end as if they had died (the node is not stopping).
        node.network.as_ref().expect("P2P").shutdown();
        assert_eq!(node.wait().expect("waits"), Exit::Ended);
        let error = node.stop().expect("stops").error.expect("a failure");
        assert!(
            matches!(error, LaunchError::Ended("P2P accept loop")),
            "{error}"
        );
    }
}
