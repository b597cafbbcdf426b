//! The `[p2p.limits]` table: what the P2P network lets peers (authenticated or not) hold
//! of this node, and how it tells a dead link. Every key is optional; zero is refused
//! with the key named.
//!
//! ```toml
//! [p2p.limits]
//! max_pending_handshakes = 256        # TLS handshakes in progress, in total ...
//! max_pending_handshakes_per_ip = 16  # ... and from one IP address
//! handshake_timeout_ms = 10000
//! send_queue_bytes = 134217728        # queued for one peer (votes, blocks, answers)
//! bulk_queue_bytes = 33554432         # queued transaction gossip for one peer
//! recv_queue_bytes = 134217728        # one peer's frames not yet taken by the node
//! keepalive_interval_ms = 5000        # an idle connection sends a keepalive this often
//! keepalive_timeout_ms = 20000        # nothing received this long: the link is dead
//! future_blocks = 256                 # a follower holds blocks at most this far ahead
//! ```

use std::time::Duration;

use serde::Deserialize;
use stave_net::NetworkConfig;

use super::{positive, positive_millis};
use crate::LaunchError;

/// How the keys of this table are named in errors.
const SECTION: &str = "p2p.limits.";

/// The `[p2p.limits]` table, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pLimits {
    /// Accepted connections whose TLS handshake has not finished, at most.
    pub max_pending_handshakes: usize,
    /// Of those, at most this many from one IP address.
    pub max_pending_handshakes_per_ip: usize,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Bytes queued for one peer before sends to it wait or fail.
    pub send_queue_bytes: usize,
    /// Bytes of transaction gossip queued for one peer before more is dropped.
    pub bulk_queue_bytes: usize,
    /// Bytes of one peer's received frames the node has not taken yet; beyond it, more
    /// are dropped.
    pub recv_queue_bytes: usize,
    /// An idle connection sends a keepalive this often.
    pub keepalive_interval: Duration,
    /// A connection on which nothing arrives for this long is closed and redialled.
    pub keepalive_timeout: Duration,
    /// A follower holds peers' blocks at most this many blocks ahead of its head.
    pub future_blocks: u64,
}

impl Default for P2pLimits {
    fn default() -> Self {
        let network = NetworkConfig::new(([0, 0, 0, 0], 0).into(), Vec::new());
        Self {
            max_pending_handshakes: network.max_pending_handshakes,
            max_pending_handshakes_per_ip: network.max_pending_handshakes_per_ip,
            handshake_timeout: network.handshake_timeout,
            send_queue_bytes: network.send_queue_bytes,
            bulk_queue_bytes: network.bulk_queue_bytes,
            recv_queue_bytes: network.recv_queue_bytes,
            keepalive_interval: network.keepalive_interval,
            keepalive_timeout: network.keepalive_timeout,
            future_blocks: 256,
        }
    }
}

impl P2pLimits {
    /// Lays these limits over the network's config.
    pub(crate) fn apply(&self, network: &mut NetworkConfig) {
        network.max_pending_handshakes = self.max_pending_handshakes;
        network.max_pending_handshakes_per_ip = self.max_pending_handshakes_per_ip;
        network.handshake_timeout = self.handshake_timeout;
        network.send_queue_bytes = self.send_queue_bytes;
        network.bulk_queue_bytes = self.bulk_queue_bytes;
        network.recv_queue_bytes = self.recv_queue_bytes;
        network.keepalive_interval = self.keepalive_interval;
        network.keepalive_timeout = self.keepalive_timeout;
    }
}

/// The `[p2p.limits]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsSection {
    max_pending_handshakes: Option<usize>,
    max_pending_handshakes_per_ip: Option<usize>,
    handshake_timeout_ms: Option<u64>,
    send_queue_bytes: Option<usize>,
    bulk_queue_bytes: Option<usize>,
    recv_queue_bytes: Option<usize>,
    keepalive_interval_ms: Option<u64>,
    keepalive_timeout_ms: Option<u64>,
    future_blocks: Option<u64>,
}

impl LimitsSection {
    /// The limits, with defaults for keys left out.
    pub(super) fn resolve(self) -> Result<P2pLimits, LaunchError> {
        let default = P2pLimits::default();
        let limits = P2pLimits {
            max_pending_handshakes: positive(
                SECTION,
                "max_pending_handshakes",
                self.max_pending_handshakes,
                default.max_pending_handshakes,
            )?,
            max_pending_handshakes_per_ip: positive(
                SECTION,
                "max_pending_handshakes_per_ip",
                self.max_pending_handshakes_per_ip,
                default.max_pending_handshakes_per_ip,
            )?,
            handshake_timeout: positive_millis(
                SECTION,
                "handshake_timeout_ms",
                self.handshake_timeout_ms,
                default.handshake_timeout,
            )?,
            send_queue_bytes: positive(
                SECTION,
                "send_queue_bytes",
                self.send_queue_bytes,
                default.send_queue_bytes,
            )?,
            bulk_queue_bytes: positive(
                SECTION,
                "bulk_queue_bytes",
                self.bulk_queue_bytes,
                default.bulk_queue_bytes,
            )?,
            recv_queue_bytes: positive(
                SECTION,
                "recv_queue_bytes",
                self.recv_queue_bytes,
                default.recv_queue_bytes,
            )?,
            keepalive_interval: positive_millis(
                SECTION,
                "keepalive_interval_ms",
                self.keepalive_interval_ms,
                default.keepalive_interval,
            )?,
            keepalive_timeout: positive_millis(
                SECTION,
                "keepalive_timeout_ms",
                self.keepalive_timeout_ms,
                default.keepalive_timeout,
            )?,
            future_blocks: positive(
                SECTION,
                "future_blocks",
                self.future_blocks,
                default.future_blocks,
            )?,
        };
        // A peer's keepalives arrive every interval (its own is the same key on a network
        // configured alike): a timeout no longer than that would close live links.
        if limits.keepalive_timeout <= limits.keepalive_interval {
            return Err(LaunchError::Config(format!(
                "p2p.limits.keepalive_timeout_ms ({} ms) must exceed p2p.limits.keepalive_interval_ms ({} ms)",
                limits.keepalive_timeout.as_millis(),
                limits.keepalive_interval.as_millis()
            )));
        }
        if limits.max_pending_handshakes_per_ip > limits.max_pending_handshakes {
            return Err(LaunchError::Config(format!(
                "p2p.limits.max_pending_handshakes_per_ip ({}) must not exceed p2p.limits.max_pending_handshakes ({})",
                limits.max_pending_handshakes_per_ip, limits.max_pending_handshakes
            )));
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<P2pLimits, LaunchError> {
        let section: LimitsSection = toml::from_str(text).map_err(|source| LaunchError::Toml {
            path: "test.toml".into(),
            source,
        })?;
        section.resolve()
    }

    #[test]
    fn keys_left_out_take_the_defaults_and_given_ones_replace_them() {
        assert_eq!(parse("").expect("parses"), P2pLimits::default());
        let limits =
            parse("keepalive_interval_ms = 100\nkeepalive_timeout_ms = 500\nfuture_blocks = 8")
                .expect("parses");
        assert_eq!(limits.keepalive_interval, Duration::from_millis(100));
        assert_eq!(limits.keepalive_timeout, Duration::from_millis(500));
        assert_eq!(limits.future_blocks, 8);
        let mut network = NetworkConfig::new(([127, 0, 0, 1], 0).into(), Vec::new());
        limits.apply(&mut network);
        assert_eq!(network.keepalive_timeout, Duration::from_millis(500));
    }

    #[test]
    fn zero_and_nonsense_are_refused_with_the_key_named() {
        for key in [
            "max_pending_handshakes",
            "max_pending_handshakes_per_ip",
            "handshake_timeout_ms",
            "send_queue_bytes",
            "bulk_queue_bytes",
            "recv_queue_bytes",
            "keepalive_interval_ms",
            "keepalive_timeout_ms",
            "future_blocks",
        ] {
            let error = parse(&format!("{key} = 0")).expect_err("zero");
            assert!(
                error
                    .to_string()
                    .contains(&format!("p2p.limits.{key} must be greater than 0")),
                "{key}: {error}"
            );
        }
        let error = parse("keepalive_interval_ms = 30000").expect_err("interval past the timeout");
        assert!(
            error.to_string().contains("keepalive_timeout_ms"),
            "{error}"
        );
        let error = parse("max_pending_handshakes = 4").expect_err("per IP above the total");
        assert!(
            error.to_string().contains("max_pending_handshakes_per_ip"),
            "{error}"
        );
        assert!(parse("pending = 1").is_err(), "an unknown key");
    }
}
