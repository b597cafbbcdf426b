//! Helpers shared by the integration tests that run a real `stave node`. The JSON-RPC
//! client, ports and metrics scrapes are the in-process tests' (`crates/launch/tests`).

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

#[path = "../../../../crates/launch/tests/support/client.rs"]
mod client;

use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub use client::*;

/// Runs `command` to its end; it must succeed (the command and its stderr are shown if
/// not). Its output.
pub fn succeeds(command: &mut Command) -> std::process::Output {
    let output = command.output().expect("runs");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A `stave node` process, killed on drop.
pub struct Node {
    /// The process.
    pub child: Child,
    /// Its JSON-RPC port.
    pub port: u16,
    /// Its metrics port.
    pub metrics_port: u16,
    /// Where its stderr goes (an unnamed file).
    stderr: File,
}

impl JsonRpc for Node {
    fn rpc_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Node {
    /// Starts `stave node --dev` (blocks every 100 ms) on free ports and waits until it
    /// answers JSON-RPC.
    pub fn start(datadir: &Path) -> Self {
        let (command, port, metrics_port) = Self::dev_command(datadir);
        Self::launch(command, port, metrics_port)
    }

    /// Starts `stave node --config` on a chain whose genesis is `genesis` (the JSON
    /// `ChainSpec::to_json` writes), blocks every 100 ms, its files in `dir`, on free
    /// ports; waits until it answers JSON-RPC.
    pub fn with_genesis(dir: &Path, genesis: &str) -> Self {
        std::fs::write(dir.join("genesis.json"), genesis).expect("writes the genesis");
        let (port, metrics) = (free_port(), free_port());
        std::fs::write(
            dir.join("node.toml"),
            format!(
                "genesis = \"genesis.json\"\ndatadir = \"data\"\nblock_time_ms = 100\nrpc_addr = \"127.0.0.1:{port}\"\nmetrics_addr = \"127.0.0.1:{metrics}\"\n"
            ),
        )
        .expect("writes the config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command
            .args(["node", "--config"])
            .arg(dir.join("node.toml"));
        Self::launch(command, port, metrics)
    }

    /// The command [`Node::start`] runs, with the ports it serves JSON-RPC and metrics on.
    pub fn dev_command(datadir: &Path) -> (Command, u16, u16) {
        let (port, metrics_port) = (free_port(), free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command
            .args(["node", "--dev", "--block-time-ms", "100", "--datadir"])
            .arg(datadir)
            .args(["--rpc-addr", &format!("127.0.0.1:{port}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")]);
        (command, port, metrics_port)
    }

    /// Runs `command` (a `stave node` serving JSON-RPC on `port` and metrics on
    /// `metrics_port`) and waits until it answers JSON-RPC.
    pub fn launch(command: Command, port: u16, metrics_port: u16) -> Self {
        Self::launch_when(command, port, metrics_port, |node| {
            node.try_post(r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#)
                .is_ok()
        })
    }

    /// Runs `command` (a `stave node` that serves no JSON-RPC, and metrics on
    /// `metrics_port`) and waits until its metrics endpoint accepts connections.
    pub fn launch_without_rpc(command: Command, metrics_port: u16) -> Self {
        Self::launch_when(command, 0, metrics_port, |node| {
            std::net::TcpStream::connect(("127.0.0.1", node.metrics_port)).is_ok()
        })
    }

    /// Runs `command` and waits until `started` says it is up.
    fn launch_when(
        mut command: Command,
        port: u16,
        metrics_port: u16,
        started: impl Fn(&Self) -> bool,
    ) -> Self {
        // The node's stderr goes to an unnamed file, so a node that fails to start says why.
        let stderr = tempfile::tempfile().expect("a file for the node's stderr");
        let child = command
            .stdout(Stdio::null())
            .stderr(stderr.try_clone().expect("the file's handle clones"))
            .spawn()
            .expect("starts");
        let mut node = Self {
            child,
            port,
            metrics_port,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !started(&node) {
            let exited = node.child.try_wait().expect("the node's status");
            if exited.is_some() || Instant::now() >= deadline {
                let said = node.stderr();
                let how = exited.map_or("no answer in 20 s".to_string(), |s| s.to_string());
                panic!("the node did not start ({how}); its stderr:\n{said}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }

    /// Stops it as an operator does, with SIGTERM, and waits for it to exit.
    pub fn terminate(mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: `kill` only sends a signal to the test's own child process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        assert!(
            self.exit_within(Duration::from_secs(30)).is_some(),
            "the node did not stop on SIGTERM"
        );
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&mut self) -> String {
        let mut said = String::new();
        let _ = self.stderr.seek(SeekFrom::Start(0));
        let _ = self.stderr.read_to_string(&mut said);
        said
    }

    /// Waits up to `limit` for the process to exit; its status, `None` if it still runs.
    pub fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("the node's status") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What its Prometheus endpoint exports now.
    pub fn metrics(&self) -> String {
        scrape(SocketAddr::from(([127, 0, 0, 1], self.metrics_port)))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
