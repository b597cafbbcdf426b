//! The `[rpc]` section of the node's TOML file: the JSON-RPC server's address and every
//! limit of [`RpcConfig`], each key optional with `RpcConfig::default()`'s value. A zero
//! where zero cannot work is refused with the key named.

use std::{net::SocketAddr, time::Duration};

use serde::Deserialize;
use stave_rpc::RpcConfig;

use super::{positive, positive_millis};
use crate::LaunchError;

/// The largest nice value: the lowest scheduling priority Linux has.
const MAX_NICE: u8 = 19;

/// How the keys of this section are named in errors.
const SECTION: &str = "[rpc] ";

/// The `[rpc]` section as written; durations in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RpcSection {
    /// `false`: the node serves no JSON-RPC at all (a validator whose applications use
    /// full nodes).
    enabled: Option<bool>,
    addr: Option<SocketAddr>,
    max_batch: Option<u32>,
    max_request_bytes: Option<u32>,
    max_response_bytes: Option<u32>,
    max_connections: Option<u32>,
    max_connections_per_ip: Option<u32>,
    idle_timeout_ms: Option<u64>,
    ws_ping_interval_ms: Option<u64>,
    max_subscriptions_per_connection: Option<u32>,
    gas_cap: Option<u64>,
    evm_timeout_ms: Option<u64>,
    max_log_blocks: Option<u64>,
    max_logs: Option<usize>,
    max_filters: Option<usize>,
    max_filter_addresses: Option<usize>,
    max_filter_topics: Option<usize>,
    fee_history_max_blocks: Option<u64>,
    fee_history_max_percentiles: Option<usize>,
    simulate_max_blocks: Option<u64>,
    simulate_max_calls: Option<usize>,
    runtime_threads: Option<usize>,
    worker_threads: Option<usize>,
    /// May be zero: then a heavy request that finds every worker busy is refused at once.
    worker_queue: Option<usize>,
    /// May be zero: then RPC threads run at the priority of the rest.
    nice: Option<u8>,
    /// May be zero: a chain whose blocks are never full needs no tip.
    suggested_tip: Option<u128>,
    /// Origins a web page may call from: `["*"]`, or exact origins.
    cors_origins: Option<Vec<String>>,
}

/// Sets `*into` to `value`'s content if given, refusing a zero with `key` named.
fn set<T: Copy + Default + PartialEq>(
    into: &mut T,
    key: &str,
    value: Option<T>,
) -> Result<(), LaunchError> {
    *into = positive(SECTION, key, value, *into)?;
    Ok(())
}

/// Sets `*into` to `millis` milliseconds if given, refusing zero with `key` named.
fn set_millis(into: &mut Duration, key: &str, millis: Option<u64>) -> Result<(), LaunchError> {
    *into = positive_millis(SECTION, key, millis, *into)?;
    Ok(())
}

impl RpcSection {
    /// Lays the section over `config`. `top_level_addr` says whether the file also has
    /// the older top-level `rpc_addr` key, which may not be given twice.
    /// Whether the section leaves JSON-RPC on (the default).
    pub(super) fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub(super) fn apply(
        self,
        config: &mut RpcConfig,
        top_level_addr: bool,
    ) -> Result<(), LaunchError> {
        if let Some(addr) = self.addr {
            if top_level_addr {
                return Err(LaunchError::Config(
                    "both rpc_addr and [rpc] addr are set: keep one".into(),
                ));
            }
            config.addr = addr;
        }
        set(&mut config.max_batch, "max_batch", self.max_batch)?;
        set(
            &mut config.max_request_bytes,
            "max_request_bytes",
            self.max_request_bytes,
        )?;
        set(
            &mut config.max_response_bytes,
            "max_response_bytes",
            self.max_response_bytes,
        )?;
        set(
            &mut config.max_connections,
            "max_connections",
            self.max_connections,
        )?;
        set(
            &mut config.max_connections_per_ip,
            "max_connections_per_ip",
            self.max_connections_per_ip,
        )?;
        set_millis(
            &mut config.idle_timeout,
            "idle_timeout_ms",
            self.idle_timeout_ms,
        )?;
        set_millis(
            &mut config.ws_ping_interval,
            "ws_ping_interval_ms",
            self.ws_ping_interval_ms,
        )?;
        set(
            &mut config.max_subscriptions_per_connection,
            "max_subscriptions_per_connection",
            self.max_subscriptions_per_connection,
        )?;
        set(&mut config.gas_cap, "gas_cap", self.gas_cap)?;
        set_millis(
            &mut config.evm_timeout,
            "evm_timeout_ms",
            self.evm_timeout_ms,
        )?;
        set(
            &mut config.max_log_blocks,
            "max_log_blocks",
            self.max_log_blocks,
        )?;
        set(&mut config.max_logs, "max_logs", self.max_logs)?;
        set(&mut config.max_filters, "max_filters", self.max_filters)?;
        set(
            &mut config.max_filter_addresses,
            "max_filter_addresses",
            self.max_filter_addresses,
        )?;
        set(
            &mut config.max_filter_topics,
            "max_filter_topics",
            self.max_filter_topics,
        )?;
        set(
            &mut config.fee_history_max_blocks,
            "fee_history_max_blocks",
            self.fee_history_max_blocks,
        )?;
        set(
            &mut config.fee_history_max_percentiles,
            "fee_history_max_percentiles",
            self.fee_history_max_percentiles,
        )?;
        set(
            &mut config.simulate_max_blocks,
            "simulate_max_blocks",
            self.simulate_max_blocks,
        )?;
        set(
            &mut config.simulate_max_calls,
            "simulate_max_calls",
            self.simulate_max_calls,
        )?;
        set(
            &mut config.runtime_threads,
            "runtime_threads",
            self.runtime_threads,
        )?;
        set(
            &mut config.worker_threads,
            "worker_threads",
            self.worker_threads,
        )?;
        config.worker_queue = self.worker_queue.unwrap_or(config.worker_queue);
        config.suggested_tip = self.suggested_tip.unwrap_or(config.suggested_tip);
        if let Some(origins) = self.cors_origins {
            stave_rpc::cors::check(&origins)
                .map_err(|error| LaunchError::Config(format!("{SECTION}cors_origins: {error}")))?;
            config.cors_origins = origins;
        }
        match self.nice {
            Some(nice) if nice > MAX_NICE => {
                return Err(LaunchError::Config(format!(
                    "{SECTION}nice must be at most {MAX_NICE} (a nice value), not {nice}"
                )));
            }
            Some(nice) => config.nice = nice,
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(text: &str, top_level_addr: bool) -> Result<RpcConfig, LaunchError> {
        let section: RpcSection = toml::from_str(text).expect("parses");
        let mut config = RpcConfig::default();
        section.apply(&mut config, top_level_addr)?;
        Ok(config)
    }

    #[test]
    fn cors_origins_are_checked_and_kept() {
        let config = apply("cors_origins = [\"*\"]", false).expect("any origin");
        assert_eq!(config.cors_origins, vec!["*".to_owned()]);
        let config = apply("cors_origins = [\"http://localhost:3000\"]", false).expect("one");
        assert_eq!(
            config.cors_origins,
            vec!["http://localhost:3000".to_owned()]
        );
        let error = apply("cors_origins = [\"localhost:3000\"]", false).unwrap_err();
        assert!(error.to_string().contains("[rpc] cors_origins"), "{error}");
        assert!(apply("", false).expect("none").cors_origins.is_empty());
    }

    #[test]
    fn an_empty_section_keeps_every_default_and_keys_replace_them() {
        let config = apply("", false).expect("empty");
        assert_eq!(config.max_logs, RpcConfig::default().max_logs);
        let config = apply(
            "addr = \"127.0.0.1:9\"\nmax_logs = 7\nevm_timeout_ms = 250\nworker_queue = 0",
            false,
        )
        .expect("applies");
        assert_eq!(config.addr.port(), 9);
        assert_eq!(config.max_logs, 7);
        assert_eq!(config.evm_timeout, Duration::from_millis(250));
        assert_eq!(config.worker_queue, 0);
        assert_eq!(config.nice, RpcConfig::default().nice);
        assert_eq!(apply("nice = 0", false).expect("zero").nice, 0);
        let config =
            apply("simulate_max_blocks = 16\nsimulate_max_calls = 100", false).expect("applies");
        assert_eq!(
            (config.simulate_max_blocks, config.simulate_max_calls),
            (16, 100)
        );
        let error = apply("nice = 20", false).expect_err("past 19");
        assert_eq!(
            error.to_string(),
            "[rpc] nice must be at most 19 (a nice value), not 20"
        );
    }

    #[test]
    fn zeros_and_a_second_address_are_refused_by_key() {
        for key in [
            "max_logs",
            "worker_threads",
            "idle_timeout_ms",
            "max_batch",
            "simulate_max_blocks",
        ] {
            let error = apply(&format!("{key} = 0"), false).expect_err("zero");
            assert_eq!(
                error.to_string(),
                format!("[rpc] {key} must be greater than 0")
            );
        }
        let error = apply("addr = \"127.0.0.1:9\"", true).expect_err("two addresses");
        assert!(
            error.to_string().contains("both rpc_addr and [rpc] addr"),
            "{error}"
        );
        assert!(
            toml::from_str::<RpcSection>("max_log = 1").is_err(),
            "an unknown key"
        );
    }
}
