//! What a run measured: [`LoadReport`].

use std::{collections::BTreeMap, fmt, time::Duration};

use hdrhistogram::Histogram;

use crate::{
    LoadConfig, Rate,
    error::LoadError,
    ledger::{Fate, Ledger},
};

/// What a run measured. Rates are per second; sending is timed from the first send to the
/// answer of the last batch of the send phase, inclusion to the last inclusion.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// Transactions signed (the run's size).
    pub txs: usize,
    /// Transactions sent.
    pub sent: u64,
    /// Transactions the node accepted (or included).
    pub accepted: u64,
    /// Transactions seen in a block.
    pub included: u64,
    /// Transactions refused, by the node's reason without its details.
    pub rejected: BTreeMap<String, u64>,
    /// Transactions signed per second before sending.
    pub sign_tps: f64,
    /// Sent per second over the send phase.
    pub sent_tps: f64,
    /// Accepted per second over the send phase.
    pub accepted_tps: f64,
    /// Included per second, first send to last inclusion.
    pub included_tps: f64,
    /// Confirmation latency (send to first seen included) of the included transactions.
    pub latency_ms: Latency,
    /// First send to last inclusion (or to the end of sending if nothing was included).
    pub duration: Duration,
}

impl LoadReport {
    /// The report as `stave load` prints it: a line naming the run `config` describes,
    /// then counts and rates by stage, the rejections by reason and the latency quantiles.
    pub fn table<'a>(&'a self, config: &'a LoadConfig) -> LoadTable<'a> {
        LoadTable {
            report: self,
            config,
        }
    }
}

/// A [`LoadReport`] as text, from [`LoadReport::table`].
#[derive(Debug)]
pub struct LoadTable<'a> {
    report: &'a LoadReport,
    config: &'a LoadConfig,
}

impl fmt::Display for LoadTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { report, config } = self;
        let txs = report.txs;
        let rate = match config.rate {
            Rate::Max => "max".to_owned(),
            Rate::PerSecond(rate) => format!("{rate} tx/s"),
        };
        let latency = report.latency_ms;
        writeln!(
            f,
            "stave load: {} workload, {} accounts, {txs} txs, rate {rate}, {} connections",
            config.workload.name(),
            config.accounts,
            config.connections
        )?;
        writeln!(f, "{:<10} {:>10} {:>12}", "", "txs", "tx/s")?;
        for (name, count, tps) in [
            ("signed", txs as u64, report.sign_tps),
            ("sent", report.sent, report.sent_tps),
            ("accepted", report.accepted, report.accepted_tps),
            ("included", report.included, report.included_tps),
        ] {
            writeln!(f, "{name:<10} {count:>10} {tps:>12.0}")?;
        }
        writeln!(f, "{:<10} {:>10}", "rejected", report.rejected_total())?;
        for (reason, count) in &report.rejected {
            writeln!(f, "  {count:>8}  {reason}")?;
        }
        writeln!(
            f,
            "latency ms p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}; {:.2} s first send to last inclusion",
            latency.p50,
            latency.p90,
            latency.p99,
            latency.max,
            report.duration.as_secs_f64()
        )
    }
}

/// Quantiles of the confirmation latency, in milliseconds (all zero with nothing
/// included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The slowest.
    pub max: f64,
}

/// `count` over `span`, per second; zero over no time.
fn per_second(count: u64, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}

impl LoadReport {
    /// Transactions refused, whatever the reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    /// The report of a run whose `txs` transactions were signed in `signing`.
    pub(crate) fn of(ledger: &Ledger, txs: usize, signing: Duration) -> Result<Self, LoadError> {
        let mut latency = Histogram::<u64>::new(3).map_err(LoadError::Histogram)?;
        let (mut sent, mut accepted, mut included) = (0, 0, 0);
        let mut rejected = BTreeMap::new();
        let mut last_inclusion = Duration::ZERO;
        for item in &ledger.items {
            let Some(sent_at) = item.sent_at else {
                continue;
            };
            sent += 1;
            if let Some(included_at) = item.included_at {
                included += 1;
                accepted += 1;
                last_inclusion = last_inclusion.max(included_at);
                let micros = included_at.saturating_sub(sent_at).as_micros();
                // An auto-resizing histogram takes any value.
                let _ = latency.record(u64::try_from(micros).unwrap_or(u64::MAX));
                continue;
            }
            match &item.fate {
                Fate::Accepted => accepted += 1,
                Fate::Retry(reason) | Fate::Refused(reason) => {
                    *rejected.entry(reason.clone()).or_default() += 1;
                }
                Fate::Unsent | Fate::InFlight => {}
            }
        }
        let quantile = |q: f64| {
            if latency.is_empty() {
                0.0
            } else {
                latency.value_at_quantile(q) as f64 / 1_000.0
            }
        };
        Ok(LoadReport {
            txs,
            sent,
            accepted,
            included,
            rejected,
            sign_tps: per_second(txs as u64, signing),
            sent_tps: per_second(sent, ledger.send_end),
            accepted_tps: per_second(accepted, ledger.send_end),
            included_tps: per_second(included, last_inclusion),
            latency_ms: Latency {
                p50: quantile(0.5),
                p90: quantile(0.9),
                p99: quantile(0.99),
                max: quantile(1.0),
            },
            duration: ledger.send_end.max(last_inclusion),
        })
    }
}
