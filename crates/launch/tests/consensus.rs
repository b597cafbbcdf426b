//! Validators in this process, set up by `stave_launch::testnet`: four agree on one chain
//! under transfers sent to all of them, and with one stopped the other three go on
//! finalizing; a validator started from another genesis, or holding a certificate from
//! another CA, never joins. (Killed, paused and restarted validators are real processes:
//! `bin/stave/tests/consensus.rs`.)

mod support;

use std::{path::PathBuf, sync::MutexGuard, time::Duration};

use serde_json::{Value, json};
use stave_launch::{RunningNode, testnet::node_name};
use stave_primitives::dev::DEV_CHAIN_ID;
use stave_sdk::LocalSigner;
use support::{
    account, block_id, height, included, init_testnet as init, send_beside, send_transfers,
    start_testnet, wait_final, wait_for,
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
