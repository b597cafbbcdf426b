//! A dev node started in this process: it answers JSON-RPC, makes blocks with the
//! transactions sent to it and stops cleanly; hostile JSON-RPC input gets error responses
//! and never a crash; a config file sets its genesis, data dir and ports.

mod support;

use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use stave_launch::{NodeConfig, Role, RunningNode};
use stave_primitives::Address;
use support::{JsonRpc, account, dev_node, free_port, send_transfers, wait_final, wait_for};

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

#[test]
fn a_dev_node_serves_json_rpc_makes_blocks_and_stops() {
    let node = dev_node(50);
    assert_ne!(
        node.rpc_addr().expect("JSON-RPC on").port(),
        0,
        "the bound port"
    );
    assert!(node.p2p_addr().is_none() && node.validator().is_none());
    assert!(node.metrics_addr().is_none());
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x539"));
    let alice = account(0);
    let hashes = send_transfers(&node, &alice, 0, 5);
    wait_final(std::slice::from_ref(&node), &hashes, "the transfers");
    assert_eq!(
        node.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"])
        ),
        json!("0x5")
    );
    // Empty blocks keep coming.
    let (head, _) = node.head().expect("a head");
    wait_for("an empty block", Duration::from_secs(10), || {
        node.head().expect("a head").0 > head
    });
    let datadir = node.datadir().to_path_buf();
    assert!(datadir.is_dir());
    let rpc = node.rpc_addr().expect("JSON-RPC on");
    let stopped = node.stop().expect("stops");
    assert!(stopped.error.is_none(), "{:?}", stopped.error);
    assert!(stopped.head > head);
    // The RPC server is gone, and so is the temporary data dir.
    assert!(std::net::TcpStream::connect(rpc).is_err());
    assert!(!datadir.exists());
}

#[test]
fn hostile_json_rpc_gets_errors_and_the_node_stays_up() {
    let node = dev_node(100);
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
        "datadir = \"data\"\ngenesis = \"genesis.json\"\nrpc_addr = \"127.0.0.1:{port}\"\nmetrics_addr = \"127.0.0.1:{metrics_port}\"\nblock_time_ms = 50\n",
    );
    std::fs::write(dir.path().join("node.toml"), config).expect("writes");
    let mut config = NodeConfig::from_toml_file(&dir.path().join("node.toml")).expect("reads");
    assert!(matches!(config.role, Role::Producer));
    assert!(config.dev_accounts.is_empty(), "not the dev chain");
    assert_eq!(
        config.metrics_addr.map(|addr| addr.port()),
        Some(metrics_port)
    );
    // The process's one metrics recorder is not this test's to take.
    config.metrics_addr = None;
    let node = RunningNode::start(config).expect("starts");
    assert_eq!(node.rpc_addr().expect("JSON-RPC on").port(), port);
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x1092"));
    let funded = stave_primitives::dev::dev_account(1).address;
    assert_ne!(
        node.result("eth_getBalance", json!([funded, "latest"])),
        json!("0x0")
    );
    assert_eq!(node.datadir(), dir.path().join("data"));
    assert!(dir.path().join("data").is_dir());
}
