//! A dev node's JSON-RPC under hostile clients: every list or range a method takes is
//! bounded and over its bound gets a typed error; answers that would outgrow the response
//! cap are refused; and under 64 concurrent full-range log scans and fee histories every
//! request gets an answer or a "busy" error, the node keeps making blocks, and its memory
//! stays bounded. A WebSocket holds at most its cap of subscriptions, and is pinged; one
//! that answers no ping is dropped.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stave_launch::{NodeConfig, RunningNode};
use support::{
    JsonRpc, account, height, send_transfers, transfer, wait_final, wait_for,
    ws::{PING, PONG, WebSocket},
};

/// go-ethereum's and this node's code for a request over a limit, or a busy server.
const LIMIT_EXCEEDED: i64 = -32005;
/// JSON-RPC's code for invalid parameters.
const INVALID_PARAMS: i64 = -32602;
/// jsonrpsee's code for a subscription over a connection's cap.
const TOO_MANY_SUBSCRIPTIONS: i64 = -32006;

/// The error code and message of a failed call.
fn error(response: &Value) -> (i64, String) {
    let code = response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"));
    let message = response["error"]["message"].as_str().unwrap_or_default();
    (code, message.to_owned())
}

/// Asserts `response` is a limit error whose message starts with `message`.
fn assert_limit(response: &Value, message: &str) {
    let (code, text) = error(response);
    assert_eq!(code, LIMIT_EXCEEDED, "{response}");
    assert!(
        text.starts_with(message),
        "{text:?} should start {message:?}"
    );
}

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .expect("resident pages");
    pages * 4096
}

#[test]
fn oversize_lists_and_ranges_get_typed_errors() {
    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.block_time = Duration::from_secs(3);
    config.block_txs = 5;
    config.rpc.max_log_blocks = 2;
    config.rpc.max_response_bytes = 2_000;
    config.rpc.max_filters = 2;
    let node = RunningNode::start(config).expect("starts");
    let alice = account(0);
    // Two full blocks at once (5 transactions make one).
    let hashes = send_transfers(&node, &alice, 0, 10);
    wait_final(std::slice::from_ref(&node), &hashes, "two full blocks");
    assert!(height(&node) >= 2);

    // eth_feeHistory: go-ethereum's limit and checks, in its words.
    let percentiles: Vec<f64> = (0..101).map(|p| f64::from(p) / 2.0).collect();
    assert_limit(
        &node.call("eth_feeHistory", json!(["0x4", "latest", percentiles])),
        "invalid reward percentile: over the query limit 100",
    );
    let (code, text) = error(&node.call("eth_feeHistory", json!(["0x4", "latest", [50, 40]])));
    assert_eq!(code, INVALID_PARAMS);
    assert_eq!(
        text,
        "invalid reward percentile: #0:50.000000 >= #1:40.000000"
    );
    let (code, text) = error(&node.call("eth_feeHistory", json!(["0x4", "latest", [101]])));
    assert_eq!(code, INVALID_PARAMS);
    assert_eq!(text, "invalid reward percentile: 101.000000");
    // A count past the chain is cut to it; 100 percentiles are fine.
    let history = node.result(
        "eth_feeHistory",
        json!(["0xffffffff", "latest", (0..100).collect::<Vec<_>>()]),
    );
    assert_eq!(history["oldestBlock"], json!("0x0"));
    assert_eq!(history["reward"][0].as_array().map(Vec::len), Some(100));

    // Log queries and filters: addresses, topic alternatives, block range.
    let addresses: Vec<String> = (0..1_001).map(|i| format!("0x{i:040x}")).collect();
    let topics: Vec<String> = (0..1_001).map(|i| format!("0x{i:064x}")).collect();
    let wide = [
        (json!({ "address": addresses }), "exceed max addresses"),
        (json!({ "topics": [null, topics] }), "exceed max subtopics"),
    ];
    for (filter, message) in &wide {
        assert_limit(&node.call("eth_getLogs", json!([filter])), message);
        assert_limit(&node.call("eth_newFilter", json!([filter])), message);
    }
    assert_limit(
        &node.call(
            "eth_getLogs",
            json!([{ "fromBlock": "0x0", "toBlock": "latest" }]),
        ),
        "query exceeds max block range 2",
    );

    // Installed filters: at most two.
    node.result("eth_newBlockFilter", json!([]));
    node.result("eth_newPendingTransactionFilter", json!([]));
    assert_limit(
        &node.call("eth_newBlockFilter", json!([])),
        "too many filters installed (at most 2)",
    );

    // Answers over the response cap are refused as they are built: a block's receipts,
    // and the pool's content (four transactions wait for the next block).
    let full_block =
        node.result("eth_getTransactionReceipt", json!([hashes[0]]))["blockNumber"].clone();
    assert_limit(
        &node.call("eth_getBlockReceipts", json!([full_block])),
        "response exceeds the 2000 byte limit",
    );
    for nonce in 10..14 {
        node.result("eth_sendRawTransaction", json!([transfer(&alice, nonce)]));
    }
    assert_limit(
        &node.call("txpool_content", json!([])),
        "response exceeds the 2000 byte limit",
    );
    // The node still answers small requests.
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x539"));
}

#[test]
fn concurrent_full_range_scans_get_answers_or_busy_while_blocks_keep_coming() {
    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.block_time = Duration::from_millis(100);
    config.block_txs = 20;
    // A small pool and queue, so 64 clients overflow it.
    config.rpc.worker_threads = 2;
    config.rpc.worker_queue = 8;
    let node = Arc::new(RunningNode::start(config).expect("starts"));
    wait_for("a few blocks", Duration::from_secs(10), || {
        height(&node) >= 5
    });
    let rss_before = rss();
    let stop = Arc::new(AtomicBool::new(false));

    // Transactions keep coming while the scans run.
    let sender = {
        let (node, stop) = (node.clone(), stop.clone());
        std::thread::spawn(move || {
            let alice = account(1);
            let mut nonce = 0;
            while !stop.load(Ordering::Relaxed) {
                send_transfers(&*node, &alice, nonce, 10);
                nonce += 10;
                std::thread::sleep(Duration::from_millis(50));
            }
            nonce
        })
    };
    let (answered, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started_at = height(&node);
    let load = Duration::from_secs(8);
    let deadline = Instant::now() + load;
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let (node, answered, busy) = (node.clone(), answered.clone(), busy.clone());
            std::thread::spawn(move || {
                let percentiles: Vec<u32> = (0..100).collect();
                while Instant::now() < deadline {
                    let response = if i % 2 == 0 {
                        node.call(
                            "eth_getLogs",
                            json!([{ "fromBlock": "earliest", "toBlock": "latest" }]),
                        )
                    } else {
                        node.call("eth_feeHistory", json!(["0x400", "latest", percentiles]))
                    };
                    if response.get("result").is_some() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let (code, message) = error(&response);
                        assert_eq!(code, LIMIT_EXCEEDED, "{response}");
                        assert!(message.starts_with("server busy"), "{message}");
                        busy.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("every request got an answer or busy");
    }
    let made = height(&node) - started_at;
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().expect("sender");
    let grown = rss().saturating_sub(rss_before);
    let (answered, busy) = (
        answered.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed),
    );
    eprintln!(
        "{answered} answered, {busy} busy, {made} blocks and {sent} transactions in {load:?}, RSS +{} MB",
        grown >> 20
    );
    assert!(answered > 0, "some scans were served");
    // A block at least every 100 ms when idle; under load at least a block a second.
    assert!(made >= 8, "only {made} blocks in {load:?} under load");
    assert!(grown < 256 << 20, "RSS grew {} MB", grown >> 20);
    // Everything sent was included.
    wait_for("the transfers", Duration::from_secs(30), || {
        node.result(
            "eth_getTransactionCount",
            json!([account(1).address(), "latest"]),
        ) == json!(format!("{sent:#x}"))
    });
}

#[test]
fn connections_per_address_are_capped_and_idle_ones_closed() {
    use std::{io::Read, net::TcpStream};

    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.rpc.max_connections_per_ip = 3;
    config.rpc.idle_timeout = Duration::from_secs(3);
    config.rpc.ws_ping_interval = Duration::from_secs(1);
    let node = RunningNode::start(config).expect("starts");
    let open = |read_timeout: Duration| {
        let stream = TcpStream::connect(node.rpc_addr().expect("JSON-RPC on")).expect("connects");
        stream
            .set_read_timeout(Some(read_timeout))
            .expect("a timeout");
        stream
    };
    // Closed by the server: the read ends (EOF or reset) instead of timing out.
    let closed = |mut stream: TcpStream| match stream.read(&mut [0; 16]) {
        Ok(n) => n == 0,
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    let idle: Vec<TcpStream> = (0..3).map(|_| open(Duration::from_secs(10))).collect();
    // A fourth from the same address is closed at once, long before the idle timeout.
    let started = Instant::now();
    assert!(closed(open(Duration::from_secs(2))), "a fourth connection");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The three that never sent a byte are closed after the idle timeout...
    for stream in idle {
        assert!(closed(stream), "an idle connection");
    }
    assert!(started.elapsed() >= Duration::from_secs(2));
    // ...which frees their slots.
    assert_eq!(node.result("eth_chainId", json!([])), json!("0x539"));
}

#[test]
fn an_rpc_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.rpc.addr = taken.local_addr().expect("bound");
    let Err(error) = RunningNode::start(config) else {
        panic!("started on a port in use");
    };
    // The start's config check finds the port taken before the server binds, and names
    // the key.
    let error = error.to_string();
    assert!(
        error.contains("`rpc_addr`") && error.contains("cannot be listened on"),
        "{error}"
    );
}

#[test]
fn a_websocket_holds_at_most_its_cap_of_subscriptions_and_the_earlier_ones_keep_working() {
    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.block_time = Duration::from_millis(200);
    config.rpc.max_subscriptions_per_connection = 2;
    let node = RunningNode::start(config).expect("starts");
    let connect = || {
        WebSocket::connect(
            node.rpc_addr().expect("JSON-RPC on"),
            Duration::from_secs(10),
        )
    };
    let subscribe = |ws: &mut WebSocket| {
        let id = ws.request("eth_subscribe", json!(["newHeads"]));
        ws.answer(id)
    };
    let mut ws = connect();
    let ids: Vec<Value> = (0..2)
        .map(|_| subscribe(&mut ws)["result"].clone())
        .collect();
    assert!(ids.iter().all(Value::is_string), "{ids:?}");
    let refused = subscribe(&mut ws);
    let (code, message) = error(&refused);
    assert_eq!(code, TOO_MANY_SUBSCRIPTIONS, "{refused}");
    assert_eq!(message, "Too many subscriptions on the connection");
    assert_eq!(refused["error"]["data"], json!("Exceeded max limit of 2"));

    // Both earlier subscriptions still hear of new blocks.
    let mut heard = std::collections::HashSet::new();
    while heard.len() < 2 {
        let message = ws.message().expect("notifications");
        if message["method"] == json!("eth_subscription") {
            let subscription = message["params"]["subscription"].clone();
            assert!(ids.contains(&subscription), "{message}");
            assert!(
                message["params"]["result"]["number"].is_string(),
                "{message}"
            );
            heard.insert(subscription.to_string());
        }
    }

    // Unsubscribing frees a slot (once the subscription's task has ended).
    let id = ws.request("eth_unsubscribe", json!([ids[0]]));
    assert_eq!(ws.answer(id)["result"], json!(true));
    let mut again = Value::Null;
    wait_for("a freed slot", Duration::from_secs(5), || {
        again = subscribe(&mut ws);
        again["result"].is_string()
    });
    assert!(subscribe(&mut ws)["error"].is_object(), "full again");
    // The cap is per connection.
    assert!(subscribe(&mut connect())["result"].is_string());
}

#[test]
fn websockets_are_pinged_and_one_that_never_answers_is_dropped() {
    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.rpc.ws_ping_interval = Duration::from_millis(300);
    config.rpc.idle_timeout = Duration::from_secs(1);
    let node = RunningNode::start(config).expect("starts");
    let addr = node.rpc_addr().expect("JSON-RPC on");
    // A client that reads but never answers a ping.
    let silent = std::thread::spawn(move || {
        let mut ws = WebSocket::connect(addr, Duration::from_secs(10));
        let started = Instant::now();
        let mut pings = 0;
        while let Some((opcode, _)) = ws.frame() {
            pings += u32::from(opcode == PING);
        }
        (pings, started.elapsed())
    });
    // A client that answers every ping, and sends nothing else.
    let mut answering = WebSocket::connect(addr, Duration::from_secs(10));
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let (opcode, payload) = answering.frame().expect("still connected");
        if opcode == PING {
            pings += 1;
            answering.send(PONG, &payload);
        }
    }
    // One every 300 ms: about 10 in 3 s.
    assert!((5..=20).contains(&pings), "{pings} pings in 3 s");
    // Three idle timeouts on, the answering client is still served.
    let id = answering.request("eth_chainId", json!([]));
    assert_eq!(answering.answer(id)["result"], json!("0x539"));
    let (pings, lived) = silent.join().expect("the silent client");
    assert!(pings >= 1, "the silent client was pinged");
    assert!(
        lived >= Duration::from_secs(1) && lived < Duration::from_secs(3),
        "the silent client was dropped after {lived:?}"
    );
}

/// `request` (a whole HTTP/1.1 request) sent to `node`'s JSON-RPC; the answer's status line
/// and headers, lower-cased.
fn http_head(node: &RunningNode, request: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream =
        std::net::TcpStream::connect(node.rpc_addr().expect("JSON-RPC on")).expect("connects");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    head.to_ascii_lowercase()
}

/// A browser's preflight for a JSON-RPC POST from a page at `origin`.
fn preflight(node: &RunningNode, origin: &str) -> String {
    http_head(
        node,
        &format!(
            "OPTIONS / HTTP/1.1\r\nHost: localhost\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n\
             Connection: close\r\n\r\n"
        ),
    )
}

/// A page's JSON-RPC POST from `origin`.
fn post_from(node: &RunningNode, origin: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    http_head(
        node,
        &format!(
            "POST / HTTP/1.1\r\nHost: localhost\r\nOrigin: {origin}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Browser access: the dev node answers pages of any origin (CORS `*`); a node with
/// `cors_origins` listed answers those origins only; a node with none sends no CORS
/// headers, so browsers refuse cross-origin calls.
#[test]
fn cors_lets_the_configured_origins_call_and_no_other() {
    let page = "http://page.example:3000";
    let dev =
        RunningNode::start(NodeConfig::dev().expect("dev chain").in_process()).expect("starts");
    let allowed = preflight(&dev, page);
    assert!(
        allowed.contains("access-control-allow-origin: *"),
        "{allowed}"
    );
    assert!(
        allowed.contains("access-control-allow-methods"),
        "{allowed}"
    );
    let answered = post_from(&dev, page);
    assert!(answered.starts_with("http/1.1 200"), "{answered}");
    assert!(
        answered.contains("access-control-allow-origin: *"),
        "{answered}"
    );
    drop(dev);

    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.rpc.cors_origins = vec![page.to_owned()];
    let listed = RunningNode::start(config).expect("starts");
    let allowed = preflight(&listed, page);
    assert!(
        allowed.contains(&format!("access-control-allow-origin: {page}")),
        "{allowed}"
    );
    let other = preflight(&listed, "http://elsewhere.example");
    assert!(!other.contains("access-control-allow-origin"), "{other}");
    drop(listed);

    let mut config = NodeConfig::dev().expect("dev chain").in_process();
    config.rpc.cors_origins = Vec::new();
    let closed = RunningNode::start(config).expect("starts");
    let answered = post_from(&closed, page);
    assert!(answered.starts_with("http/1.1 200"), "{answered}");
    assert!(
        !answered.contains("access-control-allow-origin"),
        "{answered}"
    );
}
