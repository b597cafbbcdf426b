//! Helpers shared by the integration tests that run a real `stave node`.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::{
    io::{Read, Seek, SeekFrom, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

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

/// A `stave node` process, killed on drop.
pub struct Node {
    /// The process.
    pub child: Child,
    /// Its JSON-RPC port.
    pub port: u16,
    /// Its metrics port.
    pub metrics_port: u16,
}

impl Node {
    /// Starts `stave node --dev` (blocks every 100 ms) on free ports and waits until it
    /// answers JSON-RPC.
    pub fn start(datadir: &Path) -> Self {
        let (port, metrics_port) = (free_port(), free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command
            .args(["node", "--dev", "--block-time-ms", "100", "--datadir"])
            .arg(datadir)
            .args(["--rpc-addr", &format!("127.0.0.1:{port}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")]);
        Self::launch(command, port, metrics_port)
    }

    /// Runs `command` (a `stave node` serving JSON-RPC on `port` and metrics on
    /// `metrics_port`) and waits until it answers JSON-RPC.
    pub fn launch(mut command: Command, port: u16, metrics_port: u16) -> Self {
        // The node's stderr goes to an unnamed file, so a node that fails to start says why.
        let mut stderr = tempfile::tempfile().expect("a file for the node's stderr");
        let child = command
            .stdout(Stdio::null())
            .stderr(stderr.try_clone().expect("the file's handle clones"))
            .spawn()
            .expect("starts");
        let mut node = Self {
            child,
            port,
            metrics_port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while node
            .try_post(r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#)
            .is_err()
        {
            let exited = node.child.try_wait().expect("the node's status");
            if exited.is_some() || Instant::now() >= deadline {
                let mut said = String::new();
                let _ = stderr.seek(SeekFrom::Start(0));
                let _ = stderr.read_to_string(&mut said);
                let how = exited.map_or("no answer in 20 s".to_string(), |s| s.to_string());
                panic!("the node did not start ({how}); its stderr:\n{said}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }

    /// POSTs `body`; returns the HTTP status line and the body.
    pub fn try_post(&self, body: &str) -> std::io::Result<(String, String)> {
        post_to(self.port, body)
    }

    /// The head of whatever node serves JSON-RPC on `port`, if one answers.
    pub fn probe(port: u16) -> Option<u64> {
        let (_, body) = post_to(
            port,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        )
        .ok()?;
        let response: Value = serde_json::from_str(&body).ok()?;
        quantity(&response["result"])
    }

    /// POSTs `body`; the node must answer.
    pub fn post(&self, body: &str) -> (String, String) {
        self.try_post(body).expect("the node answers")
    }

    /// One JSON-RPC call; the whole response.
    pub fn call(&self, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (_, body) = self.post(&request.to_string());
        serde_json::from_str(&body).expect("a JSON response")
    }

    /// One JSON-RPC call that must succeed; its result.
    pub fn result(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// What its Prometheus endpoint exports now.
    pub fn metrics(&self) -> String {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.metrics_port)).expect("metrics port");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .expect("writes");
        let mut exported = String::new();
        stream.read_to_string(&mut exported).expect("reads");
        exported
    }

    /// The names of the `stave_` metrics the Grafana dashboard in `ops/grafana` queries.
    pub fn dashboard_metrics() -> Vec<String> {
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
                while let Some(at) = rest.find("stave_") {
                    let name: String = rest[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    rest = &rest[at + name.len()..];
                    used.push(name);
                }
            }
        }
        used
    }

    /// The head block number.
    pub fn head(&self) -> u64 {
        quantity(&self.result("eth_blockNumber", json!([]))).expect("a block number")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs `body` to the JSON-RPC server on localhost:`port`; returns the HTTP status line
/// and the body.
fn post_to(port: u16, body: &str) -> std::io::Result<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
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
