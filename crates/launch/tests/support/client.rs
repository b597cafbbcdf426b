//! JSON-RPC over plain HTTP/1.1 (one request per connection), transfers on the dev chain,
//! free ports and metrics scrapes: what the tests that start nodes need to talk to them,
//! whether the node runs in the test's process (`crates/launch/tests`) or as a child
//! process (`bin/stave/tests`, which includes this file by path). Plain sockets rather
//! than a client library, so tests can send malformed requests too.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stave_primitives::{
    Address, U256,
    dev::{DEV_CHAIN_ID, dev_chain},
};
use stave_sdk::{LocalSigner, TxBuilder};

/// A port free on localhost right now, below the kernel's ephemeral range.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `count` consecutive ports that are all free on localhost right now.
///
/// They are taken below the kernel's ephemeral range (`ip_local_port_range`): a port the
/// kernel hands out for `bind(0)` is one it may also give the next outgoing connection
/// as its local port, and a node started later than its peers, which already dial each
/// other, then failed to bind the port it was given ("Address already in use"). Below
/// that range only a listener takes a port. Processes start apart (by pid) and threads
/// of one process take turns, so tests running side by side rarely pick the same ones.
pub fn free_ports(count: u16) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST + u32::from(count)).max(1);
    let start = std::process::id().wrapping_mul(7_919);
    loop {
        let offset = start.wrapping_add(NEXT.fetch_add(u32::from(count), Ordering::Relaxed));
        let base = u16::try_from(LOWEST + offset % span).expect("below the ephemeral range");
        let listeners: Vec<TcpListener> = (base..base + count)
            .map_while(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        if listeners.len() == usize::from(count) {
            return base;
        }
    }
}

/// A JSON-RPC quantity (`"0x1f"`) as a number; `None` if it is not one.
pub fn quantity(value: &Value) -> Option<u64> {
    u64::from_str_radix(value.as_str()?.trim_start_matches("0x"), 16).ok()
}

/// A node serving JSON-RPC, and the calls tests make to it.
pub trait JsonRpc {
    /// Where it serves JSON-RPC.
    fn rpc_addr(&self) -> SocketAddr;

    /// POSTs `body`; returns the HTTP status line and the body.
    fn try_post(&self, body: &str) -> std::io::Result<(String, String)> {
        post_to(self.rpc_addr(), body)
    }

    /// POSTs `body`; the node must answer.
    fn post(&self, body: &str) -> (String, String) {
        self.try_post(body).expect("the node answers")
    }

    /// One JSON-RPC call; the whole response.
    fn call(&self, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (_, body) = self.post(&request.to_string());
        serde_json::from_str(&body).expect("a JSON response")
    }

    /// One JSON-RPC call that must succeed; its result.
    fn result(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// The head block number.
    fn head(&self) -> u64 {
        quantity(&self.result("eth_blockNumber", json!([]))).expect("a block number")
    }
}

/// Waits until `done`, for `limit` at most.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Dev mnemonic account `index`, funded by the dev genesis (and a testnet's).
pub fn account(index: usize) -> LocalSigner {
    let (_, accounts) = dev_chain().expect("the dev chain");
    LocalSigner::from_secret(&accounts[index].secret).expect("key")
}

/// A signed transfer of 1 wei from `sender` on the dev chain, as JSON-RPC takes it.
pub fn transfer(sender: &LocalSigner, nonce: u64) -> Value {
    transfer_with_fee(sender, nonce, 4_000_000_000)
}

/// [`transfer`] paying at most `max_fee` wei per gas.
pub fn transfer_with_fee(sender: &LocalSigner, nonce: u64, max_fee: u128) -> Value {
    let tx = sender.sign_tx(TxBuilder::new(DEV_CHAIN_ID, max_fee).transfer(
        nonce,
        Address::repeat_byte(0x77),
        U256::from(1),
    ));
    json!(format!("0x{}", hex::encode(tx.encoded())))
}

/// Sends `sender` a transfer at nonce 5 (queued behind a gap on a fresh chain) and then
/// its replacement paying twice the fee: one admission, one drop for reason "replaced".
pub fn replace_a_queued_transfer(node: &impl JsonRpc, sender: &LocalSigner) {
    node.result("eth_sendRawTransaction", json!([transfer(sender, 5)]));
    node.result(
        "eth_sendRawTransaction",
        json!([transfer_with_fee(sender, 5, 8_000_000_000)]),
    );
}

/// Sends `count` transfers from `sender` (nonces from `first`) to `node`; their hashes.
pub fn send_transfers(
    node: &impl JsonRpc,
    sender: &LocalSigner,
    first: u64,
    count: u64,
) -> Vec<Value> {
    (first..first + count)
        .map(|nonce| node.result("eth_sendRawTransaction", json!([transfer(sender, nonce)])))
        .collect()
}

/// Sends `count` transfers (nonces from `first`) from each of `senders` to the node at the
/// same place in `nodes`, as far as both go; returns their hashes.
pub fn send_beside(
    senders: &[LocalSigner],
    nodes: &[impl JsonRpc],
    first: u64,
    count: u64,
) -> Vec<Value> {
    senders
        .iter()
        .zip(nodes)
        .flat_map(|(sender, node)| send_transfers(node, sender, first, count))
        .collect()
}

/// True once every one of `hashes` has a receipt on `node`.
pub fn included(node: &impl JsonRpc, hashes: &[Value]) -> bool {
    hashes.iter().all(|hash| {
        !node
            .result("eth_getTransactionReceipt", json!([hash]))
            .is_null()
    })
}

/// Waits until every one of `hashes` is final on each of `nodes`.
pub fn wait_final(nodes: &[impl JsonRpc], hashes: &[Value], what: &str) {
    for node in nodes {
        wait_for(what, Duration::from_secs(120), || included(node, hashes));
    }
}

/// (hash, state root) of block `number` on `node` (nulls while it has no such block).
pub fn block_id(node: &impl JsonRpc, number: u64) -> (Value, Value) {
    let block = node.result(
        "eth_getBlockByNumber",
        json!([format!("0x{number:x}"), false]),
    );
    (block["hash"].clone(), block["stateRoot"].clone())
}

/// The head of whatever node serves JSON-RPC on localhost:`port`, if one answers.
pub fn probe(port: u16) -> Option<u64> {
    let (_, body) = post_to(
        SocketAddr::from(([127, 0, 0, 1], port)),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    )
    .ok()?;
    let response: Value = serde_json::from_str(&body).ok()?;
    quantity(&response["result"])
}

/// What the Prometheus endpoint at `addr` exports now.
pub fn scrape(addr: SocketAddr) -> String {
    get(addr, "/metrics")
}

/// The whole HTTP answer (status line, headers, body) to `GET path` at `addr`.
pub fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("metrics port");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    answer
}

/// The names of the metrics the Grafana dashboard in `ops/grafana` queries (the node's
/// `stave_` ones and the `process_` ones), each as the `# TYPE` line of a scrape names
/// it: a histogram's `_bucket`, `_sum` and `_count` series under its own name.
pub fn dashboard_metrics() -> Vec<String> {
    // Both crates that include this file sit two levels below the workspace root.
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../ops/grafana/stave-dashboard.json"
    ))
    .expect("dashboard");
    let dashboard: Value = serde_json::from_str(&dashboard).expect("valid JSON");
    let mut used = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(at) = ["stave_", "process_"]
                .iter()
                .filter_map(|prefix| rest.find(prefix))
                .min()
            {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(&name);
                used.push(base.to_owned());
            }
        }
    }
    used.sort();
    used.dedup();
    used
}

/// POSTs `body` to the JSON-RPC server at `addr`; returns the HTTP status line and the
/// body.
fn post_to(addr: SocketAddr, body: &str) -> std::io::Result<(String, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    // A server may refuse an oversized body before reading all of it.
    let _ = stream.write_all(body.as_bytes());
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}
