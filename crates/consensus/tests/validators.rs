//! Four validators in one process, each with its own data dir, txpool and engine, on
//! loopback: they finalize the same chain, carrying transactions submitted to any of them.
//! Consensus rides on stave-net: one chain CA, each validator's certificate holding its
//! consensus key, the networks running on a tokio runtime of their own (as a node's do)
//! while each engine runs commonware's runtime on its own thread.

use std::{
    collections::HashSet,
    net::{SocketAddr, TcpListener},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_primitives::B256;
use commonware_codec::Encode as _;
use commonware_codec::EncodeFixed as _;
use commonware_consensus::{
    simplex::{
        scheme::ed25519::Scheme,
        types::{Notarize, Proposal, Vote},
    },
    types::{Epoch, Round, View},
};
use commonware_cryptography::sha256::Digest;
use commonware_cryptography::{Signer as _, ed25519};
use commonware_p2p::{Recipients, Sender as _};
use commonware_utils::ordered::Set;
use stave_consensus::{
    ConsensusBlock, ConsensusNet, ValidatorConfig, chain_actor, run_validator, validator_node_id,
};
use stave_net::{ChainCa, Network, NetworkConfig, NodeId, NodeTls, StaticPeer};
use stave_node::{BlockProducer, Chain, ChainView, Parallelism, genesis};
use stave_primitives::{Address, ChainSpec, DEFAULT_BASE_FEE, U256, dev::dev_account};
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

/// (number, hash, state root, transactions) of each block a validator committed.
type Commits = Arc<Mutex<Vec<(u64, B256, B256, usize)>>>;

fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
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

fn genesis_block(spec: &ChainSpec) -> ConsensusBlock {
    let (block, _) = genesis(spec);
    let body = stave_codec::encode_transactions(&[]).expect("encodes");
    ConsensusBlock::new(
        &block,
        stave_codec::encode_block_parts(block.header(), &body),
    )
}

/// Starts each validator's stave-net network on `runtime`: certificates from one chain CA
/// for the validators' consensus keys, the allow-list their node ids, every other
/// validator a static peer.
fn start_networks(runtime: &tokio::runtime::Runtime, keys: &[ed25519::PrivateKey]) -> Vec<Network> {
    let ca = ChainCa::generate("stave test chain").expect("ca");
    let names: Vec<String> = (0..keys.len())
        .map(|i| format!("validator{i}.stave"))
        .collect();
    let addresses: Vec<SocketAddr> = keys.iter().map(|_| free_address()).collect();
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
            let id = identity.node_id().expect("id");
            runtime
                .block_on(Network::start(config, tls, id))
                .expect("network starts")
        })
        .collect()
}

/// Starts validator `index` on its own threads; returns its pool and its commits.
fn start(
    index: usize,
    keys: &[ed25519::PrivateKey],
    network: Network,
    spec: &ChainSpec,
    dir: &std::path::Path,
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
    std::thread::spawn(move || actor.run().expect("chain actor"));
    let config = ValidatorConfig {
        key: keys[index].clone(),
        validators: keys.iter().map(|key| key.public_key()).collect(),
        network,
        storage: data.join("consensus"),
        namespace: [b"stave-test-".as_slice(), genesis(spec).0.hash().as_slice()].concat(),
        genesis: genesis_block(spec),
        leader_timeout: Duration::from_secs(1),
    };
    std::thread::spawn(move || run_validator(config, app));
    (pool, commits)
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
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = ChainSpec::dev(CHAIN_ID, SENDERS);
    let keys: Vec<_> = (0..VALIDATORS)
        .map(ed25519::PrivateKey::from_seed)
        .collect();
    // The networks' runtime, like a node's: not the one the engines run on.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let networks = start_networks(&runtime, &keys);
    let nodes: Vec<_> = networks
        .into_iter()
        .enumerate()
        .map(|(index, network)| start(index, &keys, network, &spec, dir.path()))
        .collect();

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
}

#[test]
fn a_validator_flooding_votes_for_far_future_views_does_not_stall_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = ChainSpec::dev(CHAIN_ID, SENDERS);
    let keys: Vec<_> = (0..VALIDATORS)
        .map(ed25519::PrivateKey::from_seed)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut networks = start_networks(&runtime, &keys);
    let flooder = networks.pop().expect("four networks");
    let honest: Vec<_> = networks
        .into_iter()
        .enumerate()
        .map(|(index, network)| start(index, &keys, network, &spec, dir.path()))
        .collect();

    // Validator 3 runs no engine: it signs notarize votes with its real key for views
    // 2^40 and up, each for a different payload, and sends them as fast as its queues
    // take them.
    let validators: Vec<_> = keys.iter().map(|key| key.public_key()).collect();
    let net = ConsensusNet::new(flooder, &validators).expect("validator network");
    let (mut votes, _) = net.register(VOTES_CHANNEL).expect("votes channel");
    let namespace = [
        b"stave-test-".as_slice(),
        genesis(&spec).0.hash().as_slice(),
        b"_CONSENSUS",
    ]
    .concat();
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
                if !votes.send(Recipients::All, vote.encode(), false).is_empty() {
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
}
