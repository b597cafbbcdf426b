//! What a run is asked to do: [`LoadConfig`], its [`Rate`], and their text forms.

use std::{str::FromStr, time::Duration};

use stave_primitives::B256;
use stave_sdk::Workload;

use crate::error::LoadError;

/// Most connections ([`LoadConfig::connections`]): with at most this many batches in
/// flight, a sender's in-flight nonces stay within the pool's default `max_nonce_gap`
/// (see `send::NONCES_PER_BATCH`).
pub const MAX_CONNECTIONS: usize = 8;

/// A load run: where to send, how much, how fast, and what. With the `clap` feature these
/// are the arguments of `stave load`, each field the flag of the same name.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct LoadConfig {
    /// The node's JSON-RPC URL.
    #[cfg_attr(feature = "clap", arg(long))]
    pub rpc: String,
    /// Sender accounts (deterministic dev accounts K..K+N, K `--first-account`, funded by
    /// the run).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 100))]
    pub accounts: usize,
    /// The first sender account's index: loads run side by side (say, one per node)
    /// need senders of their own, or their nonces collide.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub first_account: u64,
    /// Transactions to send [default: rate × duration at a fixed rate with --duration,
    /// else 10,000].
    #[cfg_attr(feature = "clap", arg(long))]
    pub txs: Option<usize>,
    /// Transactions per second, or `max`.
    #[cfg_attr(feature = "clap", arg(long, default_value = "max"))]
    pub rate: Rate,
    /// Stop sending after this long (`30s`, `500ms`, `2m`; plain numbers are seconds).
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_duration))]
    pub duration: Option<Duration>,
    /// What the transactions do.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Workload::Transfer))]
    pub workload: Workload,
    /// The funder's secret key (hex) [default: the dev mnemonic's first account].
    #[cfg_attr(feature = "clap", arg(long, value_parser = parse_key))]
    pub key: Option<B256>,
    /// The chain id the node must have [default: 1337 without --key, else the node's].
    #[cfg_attr(feature = "clap", arg(long))]
    pub chain_id: Option<u64>,
    /// HTTP clients sending in parallel (1 to 8).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 4))]
    pub connections: usize,
}

impl LoadConfig {
    /// How many transactions the run signs and sends: `txs`, else rate × duration at a
    /// fixed rate with a duration, else 10,000.
    pub fn tx_count(&self) -> usize {
        match (self.txs, self.rate, self.duration) {
            (Some(txs), ..) => txs,
            (None, Rate::PerSecond(rate), Some(duration)) => {
                (rate * duration.as_secs_f64()).ceil() as usize
            }
            (None, ..) => 10_000,
        }
    }

    /// Refuses a run that cannot start: no senders, no transactions, or a connection
    /// count out of range.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.accounts == 0 {
            return Err(LoadError::Config("--accounts must be at least 1".into()));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(LoadError::Config(format!(
                "--connections must be 1 to {MAX_CONNECTIONS}"
            )));
        }
        if self
            .first_account
            .checked_add(self.accounts as u64)
            .is_none()
        {
            return Err(LoadError::Config(
                "--first-account plus --accounts is past the last account".into(),
            ));
        }
        if self.tx_count() == 0 {
            return Err(LoadError::Config("--txs must be at least 1".into()));
        }
        Ok(())
    }
}

/// The send rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// As fast as the node answers: one batch in flight per connection.
    Max,
    /// Transactions per second, kept whatever the node answers.
    PerSecond(f64),
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        match text.parse::<f64>() {
            Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(Rate::PerSecond(rate)),
            _ => Err(format!(
                "{text:?} is not a rate: a positive number of tx/s or `max`"
            )),
        }
    }
}

/// `30s`, `500ms`, `2m`, or seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        (text, 1.0)
    };
    match number.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(Duration::from_secs_f64(value * unit)),
        _ => Err(format!("{text:?} is not a duration like 30s, 500ms or 2m")),
    }
}

/// A secret key as 32 bytes of hex, `0x` optional.
pub fn parse_key(text: &str) -> Result<B256, String> {
    text.trim()
        .parse()
        .map_err(|error| format!("not 32 bytes of hex: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_durations_and_keys_parse() {
        assert_eq!("max".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("250".parse::<Rate>(), Ok(Rate::PerSecond(250.0)));
        assert!("0".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("-1s").is_err());
        assert_eq!(
            parse_key(&format!(" {} ", B256::repeat_byte(1))),
            Ok(B256::repeat_byte(1))
        );
        assert!(parse_key("0x12").is_err());
    }

    #[test]
    fn the_count_follows_rate_and_duration_unless_given() {
        let mut config = LoadConfig {
            rpc: String::new(),
            accounts: 1,
            first_account: 0,
            txs: None,
            rate: Rate::PerSecond(250.0),
            duration: Some(Duration::from_secs(2)),
            workload: Workload::Transfer,
            key: None,
            chain_id: None,
            connections: 4,
        };
        assert_eq!(config.tx_count(), 500);
        config.txs = Some(7);
        assert_eq!(config.tx_count(), 7);
        config.txs = None;
        config.rate = Rate::Max;
        assert_eq!(config.tx_count(), 10_000);
        config.connections = 9;
        assert!(config.validate().is_err());
    }
}
