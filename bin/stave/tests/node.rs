//! `stave node --dev` as a real process: hostile JSON-RPC input gets error responses and
//! never a crash, SIGKILL loses no block that RPC reported, SIGTERM stops it cleanly.

mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, TxBuilder};
use support::{Node, free_port, quantity};

/// The first Hardhat/Anvil dev account's key (public knowledge).
const ALICE_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

#[test]
fn hostile_json_rpc_gets_errors_and_the_node_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&dir.path().join("chain"));
    let parse = |body: &str| -> Value { serde_json::from_str(&node.post(body).1).expect("JSON") };

    // Malformed JSON: a parse error.
    assert_eq!(
        error_code(&parse(r#"{"jsonrpc":"2.0","id":1,"method":"#)),
        -32700
    );
    assert_eq!(error_code(&parse("\u{0}\u{1}garbage")), -32700);
    // Unknown method; wrong parameter types; a number too large for its type.
    assert_eq!(
        error_code(&node.call("eth_noSuchMethod", json!([]))),
        -32601
    );
    assert_eq!(
        error_code(&node.call("eth_getBalance", json!([42, "latest"]))),
        -32602
    );
    assert_eq!(
        error_code(&node.call(
            "eth_getBlockByNumber",
            json!(["0x1ffffffffffffffffffff", false])
        )),
        -32602
    );
    assert_eq!(
        error_code(&node.call("eth_getBalance", json!({"not": "a list"}))),
        -32602
    );
    // Garbage as a transaction.
    let garbage = node.call("eth_sendRawTransaction", json!(["0xdeadbeef"]));
    assert_eq!(error_code(&garbage), -32000);
    // A batch over the limit of 1,000 calls is refused as a whole.
    let batch: Vec<Value> = (0..1_001)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId"}))
        .collect();
    let (_, body) = node.post(&Value::from(batch).to_string());
    assert!(body.contains("error"), "{body}");
    // A batch at the limit is served.
    let batch: Vec<Value> = (0..1_000)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId"}))
        .collect();
    let answers: Vec<Value> =
        serde_json::from_str(&node.post(&Value::from(batch).to_string()).1).expect("JSON");
    assert_eq!(answers.len(), 1_000);
    // A body over 25 MB is refused without being served.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x{}"]}}"#,
        "00".repeat(13 << 20)
    );
    let (status, body) = node.post(&huge);
    assert!(
        status.contains("413") || body.contains("error"),
        "{status} {body}"
    );
    // A state query before the kept history gets a clear error.
    let old = node.call("eth_getBalance", json!([Address::ZERO, "0x7fffffff"]));
    assert!(
        old["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not found"),
        "{old}"
    );

    // Random mutations of valid requests: each gets an answer (HTTP error or JSON).
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let valid = [
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000000","latest"]}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0x00000000000000000000000000000000000000ff","data":"0x"},"latest"]}]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"latest","topics":[null]}]}"#,
    ];
    for _ in 0..300 {
        let mut bytes = valid[rng.random_range(0..valid.len())].as_bytes().to_vec();
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(0..bytes.len());
            match rng.random_range(0..3) {
                0 => bytes[at] = rng.random(),
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, rng.random()),
            }
        }
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let (status, _) = node.post(&body);
        assert!(status.starts_with("HTTP/1.1"), "no answer to {body:?}");
    }

    // Still serving.
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x539"));
}

#[test]
fn a_config_file_sets_genesis_datadir_and_ports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let genesis = stave_primitives::ChainSpec::dev(4242, 2);
    std::fs::write(dir.path().join("genesis.json"), genesis.to_json()).expect("writes");
    let (port, metrics_port) = (free_port(), free_port());
    let config = format!(
        "datadir = \"data\"\ngenesis = \"genesis.json\"\nrpc_addr = \"127.0.0.1:{port}\"\nmetrics_addr = \"127.0.0.1:{}\"\nblock_time_ms = 50\n",
        metrics_port
    );
    std::fs::write(dir.path().join("node.toml"), config).expect("writes");
    let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
    command
        .args(["node", "--config"])
        .arg(dir.path().join("node.toml"));
    let node = Node::launch(command, port, metrics_port);
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x1092"));
    let funded = stave_primitives::dev::dev_account(1).address;
    assert_ne!(
        node.result("eth_getBalance", json!([funded, "latest"])),
        json!("0x0")
    );
    assert!(dir.path().join("data").is_dir());

    // An unknown key is a clear error, not a silent default.
    std::fs::write(dir.path().join("bad.toml"), "rpc_port = 1\n").expect("writes");
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["node", "--config"])
        .arg(dir.path().join("bad.toml"))
        .output()
        .expect("runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown field"));
}

fn signed_transfer(nonce: u64, max_fee: u128) -> String {
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    let tx = alice.sign_tx(TxBuilder::new(1337, max_fee).transfer(
        nonce,
        Address::repeat_byte(0x77),
        U256::from(1),
    ));
    format!("0x{}", hex::encode(tx.encoded()))
}

#[test]
fn the_grafana_dashboard_uses_only_metrics_the_node_exports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&dir.path().join("chain"));
    // One admission, one refusal, one drop (a queued tx replaced), one included tx.
    node.result(
        "eth_sendRawTransaction",
        json!([signed_transfer(5, 4_000_000_000)]),
    );
    node.result(
        "eth_sendRawTransaction",
        json!([signed_transfer(5, 8_000_000_000)]),
    );
    assert_eq!(
        error_code(&node.call("eth_sendRawTransaction", json!(["0x00"]))),
        -32000
    );
    node.result(
        "eth_sendRawTransaction",
        json!([signed_transfer(0, 4_000_000_000)]),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    while node.result(
        "eth_getTransactionCount",
        json!([alice.address(), "latest"]),
    ) != json!("0x1")
    {
        assert!(Instant::now() < deadline, "the tx was not included");
        std::thread::sleep(Duration::from_millis(20));
    }
    let exported = node.metrics();
    let used = Node::dashboard_metrics();
    assert!(used.len() >= 6, "{used:?}");
    // The network's metrics come from a node with peers: tests/p2p.rs checks those.
    for name in used.iter().filter(|name| !name.starts_with("stave_net_")) {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{exported}"
        );
    }
}

/// mimalloc madvises its arena for huge pages; the node turns them off for itself, so
/// memory it reuses after mimalloc returned it is not zeroed 2 MiB at a time.
#[test]
fn the_node_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path());
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id()))
        .expect("reads the node's status");
    let thp = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .expect("the kernel reports THP_enabled");
    assert_eq!(thp.trim(), "0", "{status}");
}

#[test]
fn sigkill_loses_no_block_rpc_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let datadir = dir.path().join("chain");
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    let builder = TxBuilder::new(1337, 4_000_000_000);
    let mut nonce = 0;
    let mut reported: Vec<(u64, Value)> = Vec::new();
    let mut sent: Vec<Value> = Vec::new();
    let mut included: Vec<Value> = Vec::new();
    for round in 0..5 {
        let node = Node::start(&datadir);
        // Every block reported before the crash is still there, unchanged.
        for (number, hash) in &reported {
            let block = node.result(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            );
            assert_eq!(&block["hash"], hash, "round {round}: block {number}");
        }
        // And every transaction included before the crash is found by its hash, in one of
        // those blocks.
        for hash in &included {
            let receipt = node.result("eth_getTransactionReceipt", json!([hash]));
            let number = quantity(&receipt["blockNumber"])
                .unwrap_or_else(|| panic!("round {round}: no receipt for {hash}: {receipt}"));
            assert_eq!(
                Some(&receipt["blockHash"]),
                reported.get(number as usize).map(|(_, hash)| hash),
                "round {round}: {hash}"
            );
        }
        let expected_balance = U256::from(nonce);
        let receiver = Address::repeat_byte(0x77);
        let balance = node.result("eth_getBalance", json!([receiver, "latest"]));
        assert_eq!(
            balance,
            json!(format!("{expected_balance:#x}")),
            "round {round}"
        );
        for _ in 0..20 {
            let tx = alice.sign_tx(builder.transfer(nonce, receiver, U256::from(1)));
            let raw = format!("0x{}", hex::encode(tx.encoded()));
            sent.push(node.result("eth_sendRawTransaction", json!([raw])));
            nonce += 1;
        }
        // Wait until the txs are in, then remember what RPC reported.
        let deadline = Instant::now() + Duration::from_secs(20);
        while node.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"]),
        ) != json!(format!("{nonce:#x}"))
        {
            assert!(Instant::now() < deadline, "txs were not included");
            std::thread::sleep(Duration::from_millis(20));
        }
        let head = node.head();
        for number in reported.len() as u64..=head {
            let block = node.result(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            );
            reported.push((number, block["hash"].clone()));
        }
        included.append(&mut sent);
        // SIGKILL while blocks keep coming.
        std::thread::sleep(Duration::from_millis(30 * round));
        drop(node);
    }
    // And a clean stop on SIGTERM.
    let mut node = Node::start(&datadir);
    let status = Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = node.child.wait().expect("exits");
    assert!(exit.success(), "{exit:?}");
    // A clean stop writes the state layers to disk: the next start re-executes nothing.
    let store = stave_storage::LmdbStore::open(&datadir, 1 << 30).expect("opens");
    let (head, _) = stave_storage::read::head(&store)
        .expect("reads")
        .expect("a head");
    assert!(head as usize >= reported.len() - 1);
    assert_eq!(
        stave_storage::read::flushed_height(&store).expect("reads"),
        Some(head)
    );
}
