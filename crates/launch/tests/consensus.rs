//! Validators in this process, set up by `stave_launch::testnet`: four agree on one chain
//! under transfers sent to all of them, and with one stopped the other three go on
//! finalizing; a validator started from another genesis, or holding a certificate from
//! another CA, never joins; a full node one of whose peers forges certificates refuses
//! them and follows the honest ones. (Killed, paused and restarted validators and full
//! nodes are real processes: `bin/stave/tests/consensus.rs`.)

mod support;

use std::{path::PathBuf, sync::MutexGuard, time::Duration};

use serde_json::{Value, json};
use stave_launch::{RunningNode, testnet::node_name};
use stave_primitives::dev::DEV_CHAIN_ID;
use stave_sdk::LocalSigner;
use support::{
    JsonRpc, account, block_id, height, included, init_testnet as init,
    init_testnet_with_full_nodes, send_beside, send_transfers, start_testnet, wait_final, wait_for,
};

/// Starts the validators of `configs` in this process, dialling each other directly.
fn start(configs: &[PathBuf]) -> (MutexGuard<'static, ()>, Vec<RunningNode>) {
    start_testnet(configs, |_, _, address| address)
}

#[test]
fn four_validators_agree_and_three_go_on_without_a_stopped_one() {
    let root = tempfile::tempdir().expect("tempdir");
    let (_alone, mut nodes) = start(&init(root.path(), 4));
    assert!(nodes.iter().all(|node| node.validator().is_some()));

    // Eight senders, each sending to one validator; gossip carries the txs to the others.
    let senders: Vec<LocalSigner> = (0..8).map(account).collect();
    let mut hashes = Vec::new();
    for (i, sender) in senders.iter().enumerate() {
        hashes.extend(send_transfers(&nodes[i % 4], sender, 0, 5));
    }
    wait_final(&nodes, &hashes, "all transfers final on every validator");
    let head = nodes.iter().map(height).min().expect("nodes");
    let reference = block_id(&nodes[0], head);
    assert!(!reference.0.is_null());
    for node in &nodes[1..] {
        assert_eq!(block_id(node, head), reference, "block {head} differs");
    }

    // Validator 3 stops cleanly: three of four are a quorum and keep finalizing.
    let stopped = nodes.pop().expect("four").stop().expect("stops");
    assert!(stopped.error.is_none(), "{:?}", stopped.error);
    assert!(stopped.head >= head);
    let more = send_beside(&senders[..3], &nodes, 5, 5);
    wait_final(&nodes, &more, "transfers final without validator 3");
    let later = nodes.iter().map(height).min().expect("nodes");
    assert!(later > stopped.head, "{later} after {}", stopped.head);
    assert_eq!(block_id(&nodes[1], later), block_id(&nodes[0], later));
}

/// Starts `configs`, sends transfers to validator 0, and checks that validators 0 to 2
/// finalize them while validator 3 never imports a block.
fn three_finalize_and_the_fourth_never_joins(configs: &[PathBuf], why: &str) {
    let (_alone, nodes) = start(configs);
    let hashes = send_transfers(&nodes[0], &account(0), 0, 5);
    wait_for(
        "the three honest validators to finalize",
        Duration::from_secs(120),
        || nodes[..3].iter().all(|node| included(node, &hashes)) && height(&nodes[0]) >= 3,
    );
    assert_eq!(height(&nodes[3]), 0, "{why}");
}

#[test]
fn a_validator_started_from_another_genesis_never_joins() {
    let root = tempfile::tempdir().expect("tempdir");
    let configs = init(root.path(), 4);
    // Validator 3 gets the same keys and validator set but another chain id: another
    // genesis block, so another consensus namespace.
    let genesis_path = root.path().join("genesis.json");
    let mut genesis: Value =
        serde_json::from_str(&std::fs::read_to_string(&genesis_path).expect("genesis"))
            .expect("JSON");
    genesis["config"]["chainId"] = json!(DEV_CHAIN_ID + 1);
    std::fs::write(root.path().join("other-genesis.json"), genesis.to_string()).expect("writes");
    let config = std::fs::read_to_string(&configs[3]).expect("config");
    std::fs::write(
        &configs[3],
        config.replace("../genesis.json", "../other-genesis.json"),
    )
    .expect("writes");
    three_finalize_and_the_fourth_never_joins(
        &configs,
        "a node of another genesis imported blocks",
    );
}

#[test]
fn a_validator_whose_certificate_comes_from_another_ca_never_joins() {
    let root = tempfile::tempdir().expect("tempdir");
    let configs = init(root.path(), 4);
    // Validator 3 keeps its consensus key, but its certificate for that key is issued by
    // a CA the others do not trust: their TLS handshakes refuse it.
    let node3 = root.path().join("node3");
    let seed = stave_consensus::keys::parse_seed(
        &std::fs::read_to_string(node3.join("consensus.key")).expect("key"),
    )
    .expect("seed");
    let rogue = stave_net::ChainCa::generate("another chain")
        .expect("ca")
        .issue_for_key(&node_name(3), &seed)
        .expect("certificate");
    let (cert, key) = rogue.to_pem();
    std::fs::write(node3.join("node.pem"), cert).expect("writes");
    std::fs::write(node3.join("node.key"), key).expect("writes");
    three_finalize_and_the_fourth_never_joins(&configs, "a node from another CA imported blocks");
}

/// 5,000 connections that never finish a TLS handshake against validator 0's P2P port
/// (fewer if this process may not open that many descriptors): the four validators keep
/// finalizing transfers sent to validator 0, so it stays connected to the others.
#[test]
fn a_handshake_flood_on_a_validator_leaves_the_chain_finalizing() {
    let flood = 5_000.min(
        stave_net::raise_fd_limit()
            .unwrap_or(1_024)
            .saturating_sub(2_048) as usize,
    );
    assert!(flood >= 500, "too few descriptors for a meaningful flood");
    let root = tempfile::tempdir().expect("tempdir");
    let (_alone, nodes) = start(&init(root.path(), 4));
    let first = send_transfers(&nodes[0], &account(0), 0, 3);
    wait_final(&nodes, &first, "transfers final before the flood");

    let target = nodes[0].p2p_addr().expect("P2P");
    let silent: Vec<std::net::TcpStream> = (0..flood)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok())
        .collect();
    assert!(
        silent.len() >= flood * 9 / 10,
        "only {} of {flood} connections opened",
        silent.len()
    );
    let before = height(&nodes[0]);
    let during = send_transfers(&nodes[0], &account(1), 0, 5);
    wait_final(&nodes, &during, "transfers final during the flood");
    wait_for("blocks during the flood", Duration::from_secs(60), || {
        nodes.iter().all(|node| height(node) >= before + 5)
    });
    drop(silent);
}

/// The peer that forges: for block `n` it serves a made-up header on the full node's
/// block `n - 1` (read over its JSON-RPC) and a finalization certificate of it that four
/// keys of its own signed, in the right epoch, under the chain's namespace or not: a
/// certificate that decodes and names the block, but not by the chain's validators.
struct Forger {
    /// The full node's JSON-RPC.
    victim: Victim,
    /// Certificates served.
    forged: std::sync::atomic::AtomicUsize,
}

impl Forger {
    /// The made-up header of block `number`, on the full node's block `number - 1`.
    fn header(&self, number: u64) -> Option<stave_primitives::Header> {
        let parent = number.checked_sub(1)?;
        let (_, body) = self
            .victim
            .try_post(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
                "params": [format!("0x{parent:x}"), false]})
                .to_string(),
            )
            .ok()?;
        let block: Value = serde_json::from_str(&body).ok()?;
        let parent_hash = block["result"]["hash"].as_str()?.parse().ok()?;
        let mut block = stave_primitives::Block {
            header: stave_primitives::Header {
                number,
                parent_hash,
                extra_data: b"forged".to_vec().into(),
                ..Default::default()
            },
            transactions: Vec::new(),
        };
        // An empty body that matches it, so a push of it rebuilds and reaches the check.
        block.header.transactions_root = block.compute_transactions_root();
        Some(block.header)
    }
}

/// The full node, as the forger reads it.
struct Victim(std::net::SocketAddr);

impl JsonRpc for Victim {
    fn rpc_addr(&self) -> std::net::SocketAddr {
        self.0
    }
}

impl stave_net::BlockSource for Forger {
    fn block(&self, number: u64) -> Option<Vec<u8>> {
        let block = stave_primitives::Block {
            header: self.header(number)?,
            transactions: Vec::new(),
        };
        stave_codec::encode_block(&block).ok()
    }

    fn header_senders(&self, number: u64) -> Option<stave_net::HeaderSenders> {
        let header = self.header(number)?;
        Some(stave_net::HeaderSenders {
            header: alloy_rlp::encode(&header).into(),
            senders: Vec::new(),
        })
    }

    fn finalization(&self, number: u64) -> Option<Vec<u8>> {
        use commonware_codec::Encode as _;
        use commonware_consensus::{
            simplex::{
                scheme::ed25519::Scheme,
                types::{Finalization, Finalize, Proposal},
            },
            types::{Epoch, Round, View},
        };
        use commonware_cryptography::{Signer as _, ed25519, sha256::Digest};
        let hash = alloy_rlp::encode(&self.header(number)?);
        let keys: Vec<ed25519::PrivateKey> = (90..94).map(ed25519::PrivateKey::from_seed).collect();
        let set = commonware_utils::ordered::Set::from_iter_dedup(
            keys.iter().map(|key| key.public_key()),
        );
        let proposal = Proposal::new(
            Round::new(Epoch::zero(), View::new(number)),
            View::new(number - 1),
            Digest(stave_primitives::keccak256(&hash).0),
        );
        let schemes: Vec<Scheme> = keys
            .iter()
            .map(|key| Scheme::signer(b"stave-forged_CONSENSUS", set.clone(), key.clone()))
            .collect::<Option<_>>()?;
        let votes: Vec<Finalize<Scheme, Digest>> = schemes
            .iter()
            .map(|scheme| Finalize::sign(scheme, proposal.clone()))
            .collect::<Option<_>>()?;
        let finalization = Finalization::from_finalizes(
            &schemes[0],
            commonware_utils::non_empty![@&votes],
            &commonware_parallel::Sequential,
        )
        .ok()?;
        self.forged
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(finalization.encode().to_vec())
    }
}

/// Admits nothing: the forger keeps no pool.
struct NoPool;

impl stave_net::TxAdmission for NoPool {
    fn admit(&self, txs: &[bytes::Bytes]) -> Vec<bool> {
        vec![false; txs.len()]
    }
}

/// A full node (the testnet's node 4) connected to four validators and to a peer (with
/// node 5's admitted identity) that pushes it made-up blocks on its head with forged
/// certificates, and answers its requests for certified runs with them: the full node
/// refuses each, charges the peer until it bans it, and keeps following the validators.
#[test]
fn a_full_node_refuses_forged_certificates_and_follows_the_honest_peers() {
    let root = tempfile::tempdir().expect("tempdir");
    let configs = init_testnet_with_full_nodes(root.path(), 4, 2);
    let (_alone, nodes) = start(&configs[..5]);
    let full = &nodes[4];
    assert!(full.validator().is_none());
    // Transactions sent to the full node reach the validators by gossip (the first, sent
    // as the validators start and defer gossip, by the full node's rebroadcast).
    let hashes = send_transfers(full, &account(0), 0, 5);
    wait_final(
        &nodes,
        &hashes,
        "transfers sent to the full node final everywhere",
    );

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let dir = root.path().join("node5");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect("reads");
    let ca = stave_net::tls::ca_certificate_from_pem(&read("ca.pem")).expect("the CA");
    let identity =
        stave_net::NodeIdentity::from_pem("node5.stave", &read("node.pem"), &read("node.key"))
            .expect("node 5's identity");
    let full_id = full.node_id().expect("P2P");
    let tls =
        stave_net::NodeTls::new(&ca, &identity, [full_id].into_iter().collect()).expect("TLS");
    let forger = std::sync::Arc::new(Forger {
        victim: Victim(JsonRpc::rpc_addr(full)),
        forged: Default::default(),
    });
    let peer = stave_net::StaticPeer {
        name: node_name(4),
        address: full.p2p_addr().expect("P2P"),
    };
    let network = runtime.block_on(async {
        let network = stave_net::Network::start(
            stave_net::NetworkConfig::new("127.0.0.1:0".parse().expect("an address"), vec![peer]),
            tls,
            identity.node_id().expect("an id"),
        )
        .await
        .expect("the forger's network");
        let (gossip, _) = stave_net::Gossip::start(
            network.clone(),
            std::sync::Arc::new(NoPool),
            Some(forger.clone()),
            stave_net::GossipConfig::default(),
        );
        (network, gossip)
    });
    wait_for("the forger to connect", Duration::from_secs(30), || {
        network.0.peers().contains(&full_id)
    });

    // The forger pushes a made-up child of the full node's head every 50 ms.
    let pushing = {
        let (forger, gossip) = (forger.clone(), network.1.clone());
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let forger = forger.clone();
                let made_up = tokio::task::spawn_blocking(move || {
                    let next = forger.victim.head() + 1;
                    Some((next, stave_net::BlockSource::finalization(&*forger, next)?))
                });
                if let Ok(Some((next, certificate))) = made_up.await {
                    let _ = gossip
                        .push_finalized(next, certificate.into(), &[full_id])
                        .await;
                }
            }
        })
    };
    // The full node keeps up with the validators while it is fed forgeries...
    let hashes = send_transfers(full, &account(0), 5, 5);
    wait_final(&nodes, &hashes, "more transfers final everywhere");
    // ... and the forger, having served forged certificates, is cut off (banned).
    wait_for("the forger to be banned", Duration::from_secs(60), || {
        !network.0.peers().contains(&full_id)
    });
    pushing.abort();
    assert!(forger.forged.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    let target = nodes[..4].iter().map(height).max().expect("validators") + 5;
    wait_for(
        "the full node to follow on",
        Duration::from_secs(60),
        || height(full) >= target,
    );
    assert_eq!(block_id(full, target), block_id(&nodes[0], target));
}
