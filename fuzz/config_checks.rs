//! The property the `config_toml` fuzz target checks, shared with
//! `crates/launch/tests/fuzz_corpus.rs`, which replays the checked-in corpus under
//! `cargo test`: any text given to the node's TOML config reader is a config or a typed
//! error, never a panic, and a config it returns holds only values a node can run with.

use std::path::Path;

use stave_launch::{MIN_MAP_SIZE, NodeConfig, Role};

/// Where the text is taken to come from: a directory that does not exist, so a genesis
/// file the text names is a read error rather than a file of the machine.
const CONFIG_PATH: &str = "/nonexistent/stave-fuzz/config.toml";

/// `NodeConfig::from_toml_str` over arbitrary bytes (as text, lossily).
pub fn config_toml(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = NodeConfig::from_toml_str(&text, Path::new(CONFIG_PATH)) {
        assert!(!config.block_time.is_zero(), "a zero block time passed");
        assert!(config.block_txs > 0, "zero transactions per block passed");
        assert!(config.block_fill_rounds > 0, "zero builds per block passed");
        assert!(
            config.rpc.ws_ping_interval < config.rpc.idle_timeout,
            "WebSocket pings rarer than the idle timeout passed"
        );
        assert!(config.map_size >= MIN_MAP_SIZE, "a tiny map passed");
        assert_ne!(config.pool_max_txs, Some(0), "an empty pool passed");
        assert_ne!(config.pool_max_per_sender, Some(0), "an empty pool passed");
        if let Role::Validator(consensus) = &config.role {
            assert!(consensus.leader_timeout > config.block_time);
            // What the node derives from the timeouts must not overflow.
            let _ = consensus.head_stale_after(config.block_time);
        }
    }
}
