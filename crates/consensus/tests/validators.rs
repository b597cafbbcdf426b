//! Four validators in one process, each with its own data dir, txpool and engine, on
//! loopback: they finalize the same chain, carrying transactions submitted to any of them.
//! Consensus rides on stave-net: one chain CA, each validator's certificate holding its
//! consensus key, the networks running on a tokio runtime of their own (as a node's do)
//! while each engine runs commonware's runtime on its own thread.

use std::{
    collections::HashSet,
    net::{SocketAddr, TcpListener},
    num::NonZeroU64,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_consensus::{Signed, TxEnvelope, crypto::SECP256K1N_HALF};
use alloy_primitives::{B256, Signature};
use commonware_actor::Feedback;
use commonware_codec::{Encode as _, EncodeFixed as _};
use commonware_consensus::{
    Application, Reporter,
    marshal::{Update, ancestry::Ancestry},
    simplex::{
        scheme::ed25519::Scheme,
        types::{Context, Notarize, Proposal, Vote},
    },
    types::{Epoch, Round, View},
};
use commonware_cryptography::{Digested, Digestible as _, Signer as _, ed25519, sha256::Digest};
use commonware_p2p::{Recipients, Sender as _};
use commonware_runtime::Clock;
use commonware_utils::ordered::Set;
use stave_consensus::{
    ConsensusBlock, ConsensusNet, StaveApp, ValidatorConfig, ValidatorSets, chain_actor,
    engine::scheme_namespace, run_validator, validator_node_id,
};
use stave_net::{ChainCa, Network, NetworkConfig, NodeId, NodeTls, StaticPeer};
use stave_node::{BlockProducer, Chain, ChainView, Parallelism, genesis};
use stave_primitives::{
    Address, Block, ChainSpec, DEFAULT_BASE_FEE, SignedTx, U256, dev::dev_account,
};
use stave_sdk::{LocalSigner, TxBuilder};
use stave_storage::LmdbStore;
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::SenderCache;

const CHAIN_ID: u64 = 4242;
const VALIDATORS: u64 = 4;
const SENDERS: u64 = 16;
const TXS_PER_SENDER: u64 = 5;
/// The engine's votes channel (`engine.rs`).
const VOTES_CHANNEL: u64 = 0;

/// Hashes of the blocks a byzantine proposer sent.
type Forged = Arc<Mutex<HashSet<B256>>>;

/// How a byzantine proposer falsifies the block it built honestly.
#[derive(Clone, Copy)]
enum Forgery {
    /// A wrong state root over a valid body: only executing the block shows the lie.
    StateRoot,
    /// The first transaction's signature swapped for its malleable twin (EIP-2 high `s`,
    /// parity flipped: the same sender, so the same execution) and the transactions root
    /// recomputed: every other header field stays right, and only the verify stage's
    /// signature check can refuse the block.
    HighS,
}

/// A byzantine proposer: builds its proposal honestly, then sends it with a `forgery`.
/// Verifies and commits honestly.
#[derive(Clone)]
struct Forger {
    honest: StaveApp,
    forgery: Forgery,
    forged: Forged,
}

/// `tx` with the other valid-looking signature of the same sender: `s` → n − `s`, parity
/// flipped.
fn malleated(tx: &SignedTx) -> SignedTx {
    let TxEnvelope::Eip1559(signed) = tx.envelope().clone() else {
        panic!("the test's transfers are EIP-1559")
    };
    let (inner, signature, _) = signed.into_parts();
    let order = SECP256K1N_HALF * U256::from(2) + U256::from(1);
    let signature = Signature::new(signature.r(), order - signature.s(), !signature.v());
    SignedTx::from_envelope(TxEnvelope::Eip1559(Signed::new_unhashed(inner, signature)))
}

impl<E: Clock + Send + 'static> Application<E> for Forger {
    type SigningScheme = Scheme;
    type Context = Context<Digest, ed25519::PublicKey>;
    type Block = ConsensusBlock;
    type Input = ();

    async fn propose(
        &mut self,
        context: (E, Self::Context),
        ancestry: impl Ancestry<Self::Block>,
        input: (),
    ) -> Option<Digested<Self::Block>> {
        let honest = self.honest.propose(context, ancestry, input).await?;
        let block = stave_codec::decode_block(honest.inner().bytes()).expect("own block");
        let mut forged = Block {
            header: block.header().clone(),
            transactions: block.transactions().to_vec(),
        };
        match self.forgery {
            Forgery::StateRoot => forged.header.state_root = B256::repeat_byte(0xbd),
            Forgery::HighS => {
                // An empty block has no signature to forge.
                let first = forged.transactions.first_mut()?;
                *first = malleated(first);
                forged.header.transactions_root = forged.compute_transactions_root();
            }
        }
        let body = stave_codec::encode_transactions(&forged.transactions).expect("encodes");
        let forged = ConsensusBlock::decode(stave_codec::encode_block_parts(&forged.header, &body))
            .expect("the body matches its root");
        self.forged.lock().expect("lock").insert(forged.hash());
        let digest = forged.digest();
        Some(Digested::precomputed(forged, digest))
    }

    async fn verify(
        &mut self,
        context: (E, Self::Context),
        ancestry: impl Ancestry<Self::Block>,
    ) -> bool {
        self.honest.verify(context, ancestry).await
    }
}

impl Reporter for Forger {
    type Activity = Update<ConsensusBlock>;

    fn report(&mut self, activity: Self::Activity) -> Feedback {
        self.honest.report(activity)
    }
}

/// (number, hash, state root, transactions) of each block a validator committed.
type Commits = Arc<Mutex<Vec<(u64, B256, B256, usize)>>>;

/// A free loopback port, held by the returned listener until the network that will use
/// it starts: released early, the many connections the other networks dial could take it
/// as their local port (seen once: `AddrInUse` at start).
fn reserve_address() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let address = listener.local_addr().expect("its address");
    (listener, address)
}

fn transfer(sender: u64, nonce: u64) -> Vec<u8> {
    let signer = LocalSigner::from_secret(&dev_account(sender).secret).expect("key");
    let tx = TxBuilder::new(CHAIN_ID, 2 * u128::from(DEFAULT_BASE_FEE)).transfer(
        nonce,
        Address::repeat_byte(0x42),
        U256::from(1),
    );
    signer.sign_tx(tx).encoded()
}

/// Held by each test for its whole run: four engines at once are already more than two
/// cores. (A rare stall of this suite was stave-net's dial loop spinning on a connection
/// that had ended but was not yet forgotten, which starved the networks' shared runtime;
/// see `peers.rs`'s test of it.)
static ONE_TEST_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The guard of [`ONE_TEST_AT_A_TIME`], a fresh data dir, the chain, the four validators'
/// keys and the networks' runtime (like a node's: not the one the engines run on).
fn setup() -> (
    MutexGuard<'static, ()>,
    tempfile::TempDir,
    ChainSpec,
    Vec<ed25519::PrivateKey>,
    tokio::runtime::Runtime,
) {
    // The engines' warnings (bans, blocked peers, refused messages), shown when a test
    // fails; `RUST_LOG` picks another level.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let keys = (0..VALIDATORS)
        .map(ed25519::PrivateKey::from_seed)
        .collect();
    (
        ONE_TEST_AT_A_TIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
        tempfile::tempdir().expect("tempdir"),
        // One more funded account than senders: the forger's.
        ChainSpec::dev(CHAIN_ID, SENDERS + 1),
        keys,
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    )
}

/// Lets the networks' runtime go without waiting for its tasks: the engines never stop
/// (a validator runs until its process ends) and keep the networks busy, so a runtime
/// drop, which waits for every worker to go idle, could wait for ever.
fn release(runtime: tokio::runtime::Runtime) {
    runtime.shutdown_background();
}

/// Starts each validator's stave-net network on `runtime`: certificates from one chain CA
/// for the validators' consensus keys, the allow-list their node ids, every other
/// validator a static peer.
fn start_networks(runtime: &tokio::runtime::Runtime, keys: &[ed25519::PrivateKey]) -> Vec<Network> {
    network_starters(runtime, keys)
        .into_iter()
        .map(|start| start())
        .collect()
}

/// What [`start_networks`] does, one validator's network at a time, whenever each is
/// called: a validator that joins late starts its network with its engine, as a node
/// does. Each network takes the consensus group as a late one, as `stave node` does.
fn network_starters<'a>(
    runtime: &'a tokio::runtime::Runtime,
    keys: &[ed25519::PrivateKey],
) -> Vec<Box<dyn FnOnce() -> Network + 'a>> {
    let ca = ChainCa::generate("stave test chain").expect("ca");
    let names: Vec<String> = (0..keys.len())
        .map(|i| format!("validator{i}.stave"))
        .collect();
    let (mut reserved, addresses): (Vec<Option<TcpListener>>, Vec<SocketAddr>) = keys
        .iter()
        .map(|_| {
            let (listener, address) = reserve_address();
            (Some(listener), address)
        })
        .unzip();
    let allowed: HashSet<NodeId> = keys
        .iter()
        .map(|key| validator_node_id(&key.public_key()))
        .collect();
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            let identity = ca
                .issue_for_key(&names[i], &key.encode_fixed())
                .expect("certificate");
            let tls = NodeTls::new(&ca.certificate(), &identity, allowed.clone()).expect("tls");
            let peers = (0..keys.len())
                .filter(|&j| j != i)
                .map(|j| StaticPeer {
                    name: names[j].clone(),
                    address: addresses[j],
                })
                .collect();
            let mut config = NetworkConfig::new(addresses[i], peers);
            config.backoff_min = Duration::from_millis(20);
            config.backoff_max = Duration::from_millis(500);
            config.late_groups = vec![stave_consensus::transport::GROUP];
            let id = identity.node_id().expect("id");
            let listener = reserved[i].take();
            Box::new(move || {
                drop(listener);
                runtime
                    .block_on(Network::start(config, tls, id))
                    .expect("network starts")
            }) as Box<dyn FnOnce() -> Network + 'a>
        })
        .collect()
}

/// Starts validator `index` on its own threads; returns its pool and its commits. With
/// `forger`, it is a byzantine proposer: every block it proposes carries that forgery,
/// and the hashes of those blocks go to the set.
/// The namespace the test chain of `spec` runs under.
fn chain_namespace(spec: &ChainSpec) -> Vec<u8> {
    [b"stave-test-".as_slice(), genesis(spec).0.hash().as_slice()].concat()
}

fn start(
    index: usize,
    keys: &[ed25519::PrivateKey],
    network: Network,
    spec: &ChainSpec,
    dir: &std::path::Path,
    forger: Option<(Forgery, Forged)>,
) -> (Arc<TxPool>, Commits) {
    let data = dir.join(format!("node{index}"));
    std::fs::create_dir_all(data.join("db")).expect("mkdir");
    // The chain borrows its store for the life of the process.
    let store: &'static LmdbStore = Box::leak(Box::new(
        LmdbStore::open(&data.join("db"), 256 << 20).expect("opens"),
    ));
    let cache = Arc::new(SenderCache::new(4096));
    let chain = Chain::open_with(store, spec, 1, Parallelism::Parallel, Some(cache.clone()))
        .expect("opens");
    let view = Arc::new(ChainView::new(&chain, spec.clone()));
    let pool = Arc::new(TxPool::new(
        PoolConfig::new(CHAIN_ID, spec.gas_limit()),
        cache,
    ));
    let producer = BlockProducer::new(chain, view, pool.clone(), 1000);
    let commits: Commits = Arc::default();
    let recorded = commits.clone();
    let (actor, app) = chain_actor(
        producer,
        pool.clone(),
        Duration::from_millis(200),
        move |produced| {
            let header = produced.block.header();
            recorded.lock().expect("lock").push((
                header.number,
                produced.block.hash(),
                header.state_root,
                produced.block.transactions().len(),
            ));
        },
    )
    .expect("actor");
    let public: Vec<_> = keys.iter().map(|key| key.public_key()).collect();
    let sets = Arc::new(ValidatorSets::new(&public));
    let (actor, epoch_starts) = actor
        .with_epochs(spec.epoch_length(), sets.clone())
        .expect("epochs");
    std::thread::spawn(move || actor.run().expect("chain actor"));
    let config = ValidatorConfig {
        key: keys[index].clone(),
        finalizations: app.finalizations(sets.clone()),
        sets,
        network,
        storage: data.join("consensus"),
        namespace: chain_namespace(spec),
        genesis: ConsensusBlock::genesis(spec),
        leader_timeout: Duration::from_secs(1),
        epoch_length: NonZeroU64::new(spec.epoch_length()).expect("at least 2"),
        epoch_starts,
        committed_tips: app.committed_tips(),
    };
    std::thread::spawn(move || match forger {
        Some((forgery, forged)) => run_validator(
            config,
            Forger {
                honest: app,
                forgery,
                forged,
            },
        ),
        None => run_validator(config, app),
    });
    (pool, commits)
}

/// Starts honest validators 0, 1, ... on `networks` (one each, in order); their pools and
/// commits.
fn start_honest(
    networks: Vec<Network>,
    keys: &[ed25519::PrivateKey],
    spec: &ChainSpec,
    dir: &std::path::Path,
) -> Vec<(Arc<TxPool>, Commits)> {
    networks
        .into_iter()
        .enumerate()
        .map(|(index, network)| start(index, keys, network, spec, dir, None))
        .collect()
}

/// Submits every sender's transfers, each sender to one validator's pool in nonce order,
/// and waits until every validator in `nodes` has committed all of them.
fn finalize_every_transaction(nodes: &[(Arc<TxPool>, Commits)], spec: &ChainSpec) {
    // Each sender's transactions go to one validator's pool, in nonce order.
    let state = stave_exec::MemoryState::from_genesis(spec);
    for sender in 0..SENDERS {
        let (pool, _) = &nodes[sender as usize % nodes.len()];
        let txs: Vec<Vec<u8>> = (0..TXS_PER_SENDER).map(|n| transfer(sender, n)).collect();
        let added = pool.add(&txs, &state, DEFAULT_BASE_FEE);
        assert!(added.iter().all(Result::is_ok), "{added:?}");
    }

    let total = SENDERS * TXS_PER_SENDER;
    let deadline = Instant::now() + Duration::from_secs(120);
    let included = |commits: &Commits| -> u64 {
        let commits = commits.lock().expect("lock");
        commits.iter().map(|(.., txs)| *txs as u64).sum()
    };
    loop {
        let counts: Vec<u64> = nodes.iter().map(|(_, c)| included(c)).collect();
        if counts.iter().all(|&count| count == total) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every transaction finalized in time: included {counts:?} of {total}, pending {:?}",
            nodes
                .iter()
                .map(|(pool, _)| pool.status().pending)
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn four_validators_finalize_one_chain_with_every_submitted_transaction() {
    let (_one_at_a_time, dir, spec, keys, runtime) = setup();
    let nodes = start_honest(start_networks(&runtime, &keys), &keys, &spec, dir.path());

    finalize_every_transaction(&nodes, &spec);

    // Every validator committed the same blocks, in order, from block 1.
    let chains: Vec<Vec<(u64, B256, B256, usize)>> = nodes
        .iter()
        .map(|(_, commits)| commits.lock().expect("lock").clone())
        .collect();
    let common = chains.iter().map(Vec::len).min().expect("validators");
    for chain in &chains {
        let numbers: Vec<u64> = chain.iter().map(|(number, ..)| *number).collect();
        assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
        assert_eq!(chain[..common], chains[0][..common]);
    }
    // Finalized transactions leave every pool, not only the proposer's.
    for (pool, _) in &nodes {
        assert_eq!(pool.status().pending, 0);
    }
    release(runtime);
}

#[test]
fn a_validator_started_late_without_a_catch_up_source_commits_the_chain_it_missed() {
    let (_one_at_a_time, dir, spec, keys, runtime) = setup();
    let mut networks = network_starters(&runtime, &keys);
    let late = networks.pop().expect("four networks");
    let networks = networks.into_iter().map(|start| start()).collect();
    let early = start_honest(networks, &keys, &spec, dir.path());
    finalize_every_transaction(&early, &spec);
    let missed = early[0].1.lock().expect("lock").clone();

    // Validator 3 joins with none of those blocks and no catch-up source: marshal fetches
    // the finalized blocks (and the ancestry of the proposals it is asked to verify), and
    // its chain actor runs each block it never saw through the pipeline, in order.
    let (_, commits) = start(3, &keys, late(), &spec, dir.path(), None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while commits.lock().expect("lock").len() < missed.len() {
        assert!(
            Instant::now() < deadline,
            "validator 3 committed {} of the {} blocks it missed",
            commits.lock().expect("lock").len(),
            missed.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(commits.lock().expect("lock")[..missed.len()], missed[..]);
    release(runtime);
}

/// Blocks per epoch in the test that crosses epochs: a handful, so it crosses several.
const EPOCH_LENGTH: u64 = 5;

/// The height every validator in `nodes` has committed.
fn common_height(nodes: &[Commits]) -> u64 {
    nodes
        .iter()
        .map(|commits| commits.lock().expect("lock").last().map_or(0, |(n, ..)| *n))
        .min()
        .unwrap_or(0)
}

/// Waits until every validator in `nodes` has committed block `height`.
fn wait_for_height(nodes: &[Commits], height: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while common_height(nodes) < height {
        assert!(
            Instant::now() < deadline,
            "the validators reached only block {} of {height}",
            common_height(nodes)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn validators_cross_epochs_on_one_chain_and_a_late_one_follows_them_across() {
    let (_one_at_a_time, dir, spec, keys, runtime) = setup();
    let spec = spec.with_epoch_length(EPOCH_LENGTH).expect("valid length");
    let mut networks = network_starters(&runtime, &keys);
    let late = networks.pop().expect("four networks");
    let networks = networks.into_iter().map(|start| start()).collect();
    // Three of four validators are a quorum: each epoch's engine finalizes with them.
    let early = start_honest(networks, &keys, &spec, dir.path());
    finalize_every_transaction(&early, &spec);
    let early: Vec<Commits> = early.into_iter().map(|(_, commits)| commits).collect();
    wait_for_height(&early, 3 * EPOCH_LENGTH + 1);

    // Validator 3 starts in epoch 0 while the others vote in a later one: their votes
    // make it fetch each boundary's finalization, and it follows them epoch by epoch.
    let (_, late) = start(3, &keys, late(), &spec, dir.path(), None);
    let target = common_height(&early) + 2 * EPOCH_LENGTH;
    let all: Vec<Commits> = early.iter().cloned().chain([late]).collect();
    wait_for_height(&all, target);

    // One chain: every validator committed the same blocks, in order, from block 1.
    let chains: Vec<Vec<(u64, B256, B256, usize)>> = all
        .iter()
        .map(|commits| commits.lock().expect("lock")[..target as usize].to_vec())
        .collect();
    for chain in &chains {
        let numbers: Vec<u64> = chain.iter().map(|(number, ..)| *number).collect();
        assert_eq!(numbers, (1..=target).collect::<Vec<_>>());
        assert_eq!(chain, &chains[0]);
    }
    release(runtime);
}

#[test]
fn a_validator_flooding_votes_for_far_future_views_does_not_stall_the_others() {
    let (_one_at_a_time, dir, spec, keys, runtime) = setup();
    let mut networks = start_networks(&runtime, &keys);
    let flooder = networks.pop().expect("four networks");
    let honest = start_honest(networks, &keys, &spec, dir.path());

    // Validator 3 runs no engine: it signs notarize votes with its real key for views
    // 2^40 and up, each for a different payload, and sends them as fast as its queues
    // take them.
    let validators: Vec<_> = keys.iter().map(|key| key.public_key()).collect();
    let net = ConsensusNet::new(flooder, &validators).expect("validator network");
    let (mut votes, _) = net.register(VOTES_CHANNEL).expect("votes channel");
    let namespace = scheme_namespace(&chain_namespace(&spec));
    let participants = Set::try_from(validators).expect("distinct keys");
    let scheme = Scheme::signer(&namespace, participants, keys[3].clone()).expect("a validator");
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            for view in (1u64 << 40).. {
                // Relaxed: a stop flag, read once a vote; nothing else is published.
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut payload = [0u8; 32];
                payload[..8].copy_from_slice(&view.to_be_bytes());
                let proposal = Proposal::new(
                    Round::new(Epoch::zero(), View::new(view)),
                    View::new(view - 1),
                    Digest(payload),
                );
                let vote: Vote<Scheme, Digest> =
                    Vote::Notarize(Notarize::sign(&scheme, proposal).expect("signs"));
                // On epoch 0's sub-channel of the votes channel: its id, a varint, first.
                let muxed = [[0u8].as_slice(), &vote.encode()].concat();
                if !votes.send(Recipients::All, muxed, false).is_empty() {
                    sent += 1;
                }
            }
            sent
        })
    };

    // Three of four validators are a quorum: they finalize every transaction regardless.
    finalize_every_transaction(&honest, &spec);
    stop.store(true, Ordering::Relaxed);
    let sent = flooding.join().expect("flooder");
    assert!(sent >= 1_000, "the flood sent only {sent} votes");
    release(runtime);
}

/// Runs the honest three beside a validator proposing only blocks with `forgery`, whose
/// own pool holds `forger_txs`; checks that the three finalize every transaction sent to
/// them, that the forger led views, and that none of its blocks was finalized.
fn forged_blocks_are_never_finalized(forgery: Forgery, forger_txs: &[Vec<u8>]) {
    let (_one_at_a_time, dir, spec, keys, runtime) = setup();
    let forged: Forged = Arc::default();
    let nodes: Vec<_> = start_networks(&runtime, &keys)
        .into_iter()
        .enumerate()
        .map(|(index, network)| {
            let byzantine = (index == 3).then(|| (forgery, forged.clone()));
            start(index, &keys, network, &spec, dir.path(), byzantine)
        })
        .collect();
    let state = stave_exec::MemoryState::from_genesis(&spec);
    let added = nodes[3].0.add(forger_txs, &state, DEFAULT_BASE_FEE);
    assert!(added.iter().all(Result::is_ok), "{added:?}");

    // The honest three finalize every transaction sent to them; the forger's turns as
    // leader time out.
    finalize_every_transaction(&nodes[..3], &spec);
    let deadline = Instant::now() + Duration::from_secs(60);
    while forged.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "the forger never led a view");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Two more honest blocks: had a forged block been finalized, it would be below them.
    let committed = |index: usize| nodes[index].1.lock().expect("lock").len();
    let target = committed(0) + 2;
    while committed(0) < target {
        assert!(Instant::now() < deadline, "the honest validators stalled");
        std::thread::sleep(Duration::from_millis(100));
    }
    let forged = forged.lock().expect("lock").clone();
    for (_, commits) in &nodes {
        let commits = commits.lock().expect("lock");
        assert!(!commits.is_empty());
        for (number, hash, ..) in commits.iter() {
            assert!(
                !forged.contains(hash),
                "forged block {number} was finalized"
            );
        }
    }
    release(runtime);
}

#[test]
fn blocks_from_a_proposer_that_forges_state_roots_are_never_finalized() {
    forged_blocks_are_never_finalized(Forgery::StateRoot, &[]);
}

#[test]
fn blocks_from_a_proposer_that_malleates_a_signature_are_never_finalized() {
    // The forger's own transactions, from a sender no one else uses: its blocks carry
    // them, so there is always a signature to forge.
    let txs: Vec<Vec<u8>> = (0..TXS_PER_SENDER)
        .map(|nonce| transfer(SENDERS, nonce))
        .collect();
    forged_blocks_are_never_finalized(Forgery::HighS, &txs);
}
