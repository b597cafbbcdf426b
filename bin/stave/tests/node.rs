//! `stave node --dev` as a real process: it runs without transparent huge pages, SIGKILL
//! loses no block that RPC reported, SIGTERM stops it cleanly, a disk that fills up stops
//! it with a clear error and loses no block, a bad config file, a port in use and a key
//! file others can read are clear errors naming the key. What needs no process of its own (JSON-RPC answers, config files,
//! metrics) is tested in process, in `crates/launch/tests`.

mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, TxBuilder};
use support::{JsonRpc, Node, account, quantity, transfer};

/// The first Hardhat/Anvil dev account's key (public knowledge).
const ALICE_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// An unknown key is a clear error, not a silent default (`NodeConfig` tests in
/// `crates/launch` check the rest of the file's reading).
#[test]
fn an_unknown_config_key_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.toml"), "rpc_port = 1\n").expect("writes");
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["node", "--config"])
        .arg(dir.path().join("bad.toml"))
        .output()
        .expect("runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown field"));
}

/// Runs `stave node` with `args`; it must refuse to start. Its stderr.
fn refused(args: &[&std::ffi::OsStr]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .arg("node")
        .args(args)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    stderr
}

/// Values a node cannot run with, a port another process listens on, and private key
/// files others can read are refused before the node starts, with the key named (and, for
/// a key file, the chmod that fixes it).
#[test]
fn bad_values_ports_in_use_and_open_key_files_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    let refused_config = |text: &str| {
        std::fs::write(&config, text).expect("writes");
        refused(&["--config".as_ref(), config.as_os_str()])
    };
    for (text, expected) in [
        ("block_time_ms = 0\n", "`block_time_ms` is 0"),
        ("block_txs = 0\n", "`block_txs` is 0"),
        ("pool_max_txs = 0\n", "`pool_max_txs` is 0"),
        ("map_size = 4096\n", "`map_size` is 4096 bytes"),
    ] {
        let stderr = refused_config(text);
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
    let stderr = refused(&["--dev".as_ref(), "--block-time-ms".as_ref(), "0".as_ref()]);
    assert!(stderr.contains("`block_time_ms` is 0"), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let port = taken.local_addr().expect("an address").port();
    let stderr = refused_config(&format!(
        "rpc_addr = \"127.0.0.1:{port}\"\nmetrics_addr = \"127.0.0.1:0\"\n"
    ));
    assert!(
        stderr.contains(&format!(
            "`rpc_addr` (127.0.0.1:{port}) cannot be listened on"
        )),
        "{stderr}"
    );

    // A validator's key files as `stave testnet init` writes them pass; opened up, each
    // is refused.
    let testnet = dir.path().join("testnet");
    init_one_validator(&testnet);
    let node = testnet.join("node0");
    for (file, key) in [
        ("node.key", "[p2p] key"),
        ("consensus.key", "[consensus] key"),
    ] {
        let path = node.join(file);
        let mode = |mode| {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .expect("chmod")
        };
        let written = std::fs::metadata(&path).expect("written");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&written.permissions()) & 0o777,
            0o600,
            "{file}"
        );
        mode(0o644);
        let stderr = refused(&["--config".as_ref(), node.join("config.toml").as_os_str()]);
        assert!(stderr.contains(&format!("`{key}`")), "{stderr}");
        assert!(
            stderr.contains(&format!("chmod 600 {}", path.display())),
            "{stderr}"
        );
        mode(0o600);
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
fn sigkill_loses_no_block_rpc_reported_nor_any_block_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let datadir = dir.path().join("chain");
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    let builder = TxBuilder::new(1337, 4_000_000_000);
    let mut nonce = 0;
    let mut reported: Vec<(u64, Value)> = Vec::new();
    // The receiver's balance at blocks the state layers have long left: the dev node
    // keeps every block's state, across crashes too.
    let mut balances: Vec<(u64, Value)> = Vec::new();
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
        let receiver = Address::repeat_byte(0x77);
        for (number, balance) in &balances {
            assert_eq!(
                &node.result("eth_getBalance", json!([receiver, format!("{number:#x}")])),
                balance,
                "round {round}: the balance at block {number}"
            );
        }
        let expected_balance = U256::from(nonce);
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
        balances.push((
            head,
            node.result("eth_getBalance", json!([receiver, format!("{head:#x}")])),
        ));
        // Empty blocks, so the oldest layers are flushed and their state read from the
        // history on disk.
        node.result("anvil_mine", json!(["0x50"]));
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
    drop(store);
    // Started keeping no history, the node drops it: the old blocks' state is gone.
    let (mut command, port, metrics_port) = Node::dev_command(&datadir);
    command.args(["--history", "recent"]);
    let node = Node::launch(command, port, metrics_port);
    let (old, _) = &balances[0];
    let refused = node.call(
        "eth_getBalance",
        json!([Address::repeat_byte(0x77), format!("{old:#x}")]),
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("state not available")),
        "{refused}"
    );
}

/// The result of one JSON-RPC call, `None` if the node did not answer it (it is gone) or
/// answered with an error.
fn try_result(node: &Node, method: &str, params: Value) -> Option<Value> {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (_, body) = node.try_post(&request.to_string()).ok()?;
    let response: Value = serde_json::from_str(&body).ok()?;
    response.get("result").cloned()
}

/// A disk that fills up under a running node (here a file-size limit on its process, so
/// no root is needed; the node turns the kernel's SIGXFSZ into a failed write) stops it
/// within a bounded time with exit code 1 and one line saying what failed; started again
/// with room, it is at the same head or later, with every block it reported before.
#[test]
fn a_full_disk_stops_the_node_with_a_clear_error_and_a_restart_keeps_every_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let datadir = dir.path().join("chain");
    // A first run makes the data dir; the limit then leaves it room for a few blocks.
    let mut node = Node::start(&datadir);
    assert!(
        Command::new("kill")
            .args(["-TERM", &node.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success()
    );
    assert!(
        node.exit_within(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
    let size = std::fs::metadata(datadir.join("data.mdb"))
        .expect("the store")
        .len();
    let (command, port, metrics_port) = Node::dev_command(&datadir);
    let mut limited = Command::new("bash");
    limited
        .arg("-c")
        .arg(format!("ulimit -f {}; exec \"$@\"", size / 1024 + 512))
        .arg("bash")
        .arg(command.get_program())
        .args(command.get_args());
    let mut node = Node::launch(limited, port, metrics_port);

    let (reported, error) = load_until_it_fails(&mut node);
    assert!(error.contains("the disk may be full"), "{error}");

    // With room again it starts where it stopped, every reported block in place.
    keeps_every_block(&Node::start(&datadir), &reported);
}

/// A store whose map fills up under a running node stops it within a bounded time with
/// exit code 1 and one line naming the config key to raise (`map_size`); restarted with a
/// larger map, it has every block it reported before.
#[test]
fn a_full_map_stops_the_node_naming_map_size_and_a_larger_map_keeps_every_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    let start = |map_size: usize| {
        std::fs::write(
            &config,
            format!("datadir = \"chain\"\nblock_time_ms = 100\nmap_size = {map_size}\n"),
        )
        .expect("writes");
        let (port, metrics_port) = (support::free_port(), support::free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command
            .args(["node", "--config"])
            .arg(&config)
            .args(["--rpc-addr", &format!("127.0.0.1:{port}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")]);
        Node::launch(command, port, metrics_port)
    };
    let mut node = start(stave_launch::MIN_MAP_SIZE);
    let (reported, error) = load_until_it_fails(&mut node);
    assert!(error.contains("raise `map_size`"), "{error}");
    keeps_every_block(&start(64 << 20), &reported);
}

/// Sends `node` transfers from ten senders, a batch at a time, until it exits (within a
/// minute); it must exit with code 1 and one `error:` line. The hashes of the blocks
/// JSON-RPC reported on the way (by number, from 0), and that line.
fn load_until_it_fails(node: &mut Node) -> (Vec<Value>, String) {
    let senders: Vec<LocalSigner> = (0..10).map(account).collect();
    let mut reported: Vec<Value> = Vec::new();
    let started = Instant::now();
    let mut nonce = 0;
    let status = loop {
        if let Some(status) = node.child.try_wait().expect("the node's status") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the node still runs without room; stderr:\n{}",
            node.stderr()
        );
        let batch: Vec<Value> = senders
            .iter()
            .flat_map(|sender| (nonce..nonce + 20).map(move |n| transfer(sender, n)))
            .enumerate()
            .map(|(id, raw)| {
                json!({"jsonrpc": "2.0", "id": id, "method": "eth_sendRawTransaction", "params": [raw]})
            })
            .collect();
        if node.try_post(&Value::Array(batch).to_string()).is_ok() {
            nonce += 20;
        }
        let head = try_result(node, "eth_blockNumber", json!([])).and_then(|n| quantity(&n));
        for number in reported.len() as u64..=head.unwrap_or(0) {
            let block = try_result(
                node,
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            );
            match block {
                Some(block) if !block.is_null() => reported.push(block["hash"].clone()),
                _ => break,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = node.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one line says what failed:\n{stderr}");
    assert!(reported.len() > 1, "blocks were made before it failed");
    (reported, errors[0].to_owned())
}

/// `node`, restarted after a failure, is at the head it reported or later, with every
/// block of `reported` (hashes by number) in place.
fn keeps_every_block(node: &Node, reported: &[Value]) {
    assert!(node.head() as usize >= reported.len() - 1);
    for (number, hash) in reported.iter().enumerate() {
        let block = node.result(
            "eth_getBlockByNumber",
            json!([format!("{number:#x}"), false]),
        );
        assert_eq!(&block["hash"], hash, "block {number}");
    }
}

#[test]
fn log_format_json_writes_one_json_object_an_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut command, port, metrics_port) = Node::dev_command(dir.path());
    command
        .arg("--log-format")
        .arg("json")
        .env("RUST_LOG", "info");
    let mut node = Node::launch(command, port, metrics_port);
    support::wait_for("two blocks", std::time::Duration::from_secs(30), || {
        node.head() >= 2
    });
    let stderr = node.stderr();
    let events: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let block = events
        .iter()
        .find(|event| event["fields"]["message"] == "block")
        .unwrap_or_else(|| panic!("no block event in {stderr}"));
    assert_eq!(block["level"], "INFO");
    assert!(block["timestamp"].is_string());
    assert!(block["fields"]["number"].is_u64());
}

/// `ops/systemd/stave.service` runs a node as written (its config where the unit expects
/// it: a one-validator chain's), the node logs to the journal in JSON, and the unit's stop
/// signal stops it cleanly.
#[test]
fn the_systemd_unit_runs_a_node_and_its_stop_signal_stops_it_cleanly() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../ops/systemd/stave.service"
    ))
    .expect("the unit");
    let setting = |key: &str| {
        unit.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key} in the unit"))
    };
    assert_eq!(setting("KillSignal"), "SIGTERM");
    let mut words = setting("ExecStart").split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/stave"));
    let dir = tempfile::tempdir().expect("tempdir");
    let (rpc, metrics) = init_one_validator(&dir.path().join("net"));
    let config = dir.path().join("net/node0/config.toml");
    let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
    for word in words {
        match word {
            "/etc/stave/config.toml" => command.arg(&config),
            other => command.arg(other),
        };
    }
    command.env("RUST_LOG", "info");
    let mut node = Node::launch(command, rpc, metrics);
    support::wait_for("a block", Duration::from_secs(30), || node.head() >= 1);
    let pid = libc::pid_t::try_from(node.child.id()).expect("a pid");
    // SAFETY: `kill` only sends a signal to the test's own child process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let exit = node.exit_within(Duration::from_secs(30)).expect("stops");
    assert!(exit.success(), "{exit:?}");
    let stderr = node.stderr();
    assert!(stderr.lines().count() >= 2, "{stderr}");
    for line in stderr.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|_| panic!("not JSON: {line}"));
    }
}

/// `stave testnet init` of one validator into `dir`, on free ports; its JSON-RPC and
/// metrics ports.
fn init_one_validator(dir: &std::path::Path) -> (u16, u16) {
    let ports = support::free_ports(3);
    support::succeeds(
        Command::new(env!("CARGO_BIN_EXE_stave"))
            .args(["testnet", "init", "--nodes", "1", "--dir"])
            .arg(dir)
            .args(["--rpc-port", &ports.to_string()])
            .args(["--metrics-port", &(ports + 1).to_string()])
            .args(["--p2p-port", &(ports + 2).to_string()]),
    );
    (ports, ports + 1)
}

/// `stave state generate` writes a data dir and its genesis file: a node on them serves
/// the generated accounts and the token they hold, and block 0 holds the root the
/// command printed; generating into it again is refused, and so is a node given the
/// genesis but an empty data dir.
#[test]
fn a_generated_state_serves_its_accounts_and_is_made_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let generated = dir.path().join("generated.json");
    let generate = || {
        Command::new(env!("CARGO_BIN_EXE_stave"))
            .args(["state", "generate", "--accounts", "5000", "--keyed", "20"])
            .args(["--token-holders", "3000"])
            .arg("--datadir")
            .arg(&data)
            .arg("--genesis-out")
            .arg(&generated)
            .output()
            .expect("runs")
    };
    let output = generate();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let report: Value = serde_json::from_str(stdout.lines().last().expect("a line")).expect("JSON");
    assert_eq!(report["accounts"], 5000);
    assert_eq!(report["keyed"], 20);
    let token: Address = serde_json::from_value(report["token"].clone()).expect("a token");

    let genesis = std::fs::read_to_string(&generated).expect("genesis written");
    let node = Node::with_genesis(dir.path(), &genesis);
    let rich = U256::from(stave_primitives::DEV_BALANCE_WEI);
    for address in [
        stave_primitives::dev::dev_account(19).address,
        stave_primitives::dev::filler_address(4_979),
    ] {
        let balance: U256 =
            serde_json::from_value(node.result("eth_getBalance", json!([address, "latest"])))
                .expect("a balance");
        assert_eq!(balance, rich, "{address}");
    }
    // The token's real code answers from the generated storage: holders 0..3000 (20
    // keyed accounts, then filler accounts 0..2980) hold a million tokens each.
    let call = |data: String| -> U256 {
        let result = node.result("eth_call", json!([{"to": token, "data": data}, "latest"]));
        serde_json::from_value(result).expect("a word")
    };
    let balance_of = |holder: Address| call(format!("0x70a08231{:0>64}", hex::encode(holder)));
    let million = U256::from(10u128.pow(24));
    assert_eq!(
        balance_of(stave_primitives::dev::dev_account(0).address),
        million
    );
    assert_eq!(
        balance_of(stave_primitives::dev::filler_address(2_979)),
        million
    );
    assert_eq!(
        balance_of(stave_primitives::dev::filler_address(2_980)),
        U256::ZERO
    );
    assert_eq!(call("0x18160ddd".into()), million * U256::from(3000));
    let block = node.result("eth_getBlockByNumber", json!(["0x0", false]));
    assert_eq!(block["stateRoot"], report["state_root"]);
    drop(node);

    let again = generate();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a chain"));

    let elsewhere = tempfile::tempdir().expect("tempdir");
    std::fs::write(elsewhere.path().join("genesis.json"), &genesis).expect("writes");
    std::fs::write(
        elsewhere.path().join("node.toml"),
        "genesis = \"genesis.json\"\ndatadir = \"data\"\nrpc_addr = \"127.0.0.1:0\"\nmetrics_addr = \"127.0.0.1:0\"\n",
    )
    .expect("writes");
    let refused = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["node", "--config"])
        .arg(elsewhere.path().join("node.toml"))
        .output()
        .expect("runs");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("stave state generate"),
        "{refused:?}"
    );
}
