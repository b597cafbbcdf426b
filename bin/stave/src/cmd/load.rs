//! `stave load`: runs [`stave_load`] against a node with progress bars on stderr, and
//! prints its report as a table and, with `--json`, one JSON line as the last line of
//! stdout.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;
use serde_json::json;
use stave_load::{LoadConfig, LoadReport, Progress, Rate};

/// Arguments of `stave load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    config: LoadConfig,
    /// Also print the report as one JSON line, the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `stave load`.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    // Refused before the runtime starts, as a usage error.
    args.config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let bars = Arc::new(Bars::new()?);
    let report = runtime.block_on(stave_load::run(&args.config, bars))?;
    print(&args, &report);
    Ok(())
}

/// Two bars on stderr, sent and included, made when sending starts.
struct Bars {
    progress: MultiProgress,
    style: ProgressStyle,
    /// Sent, then included.
    bars: Mutex<Option<[ProgressBar; 2]>>,
}

impl Bars {
    fn new() -> anyhow::Result<Self> {
        let style = ProgressStyle::with_template(
            "{prefix:>9} [{bar:40}] {pos:>8}/{len} {per_sec:>12} {elapsed}",
        )
        .context("progress bar template")?
        .progress_chars("=> ");
        Ok(Bars {
            progress: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            style,
            bars: Mutex::new(None),
        })
    }

    fn with(&self, which: usize, f: impl FnOnce(&ProgressBar)) {
        if let Some(bars) = &*self.bars.lock() {
            f(&bars[which]);
        }
    }
}

impl Progress for Bars {
    fn note(&self, message: &str) {
        self.progress.suspend(|| eprintln!("{message}"));
    }

    fn start(&self, txs: u64) {
        let bar = |prefix: &'static str| {
            self.progress.add(
                ProgressBar::new(txs)
                    .with_style(self.style.clone())
                    .with_prefix(prefix),
            )
        };
        *self.bars.lock() = Some([bar("sent"), bar("included")]);
    }

    fn sent(&self, count: u64) {
        self.with(0, |bar| bar.inc(count));
    }

    fn sending_done(&self) {
        self.with(0, ProgressBar::finish);
    }

    fn included(&self, included: u64) {
        self.with(1, |bar| bar.set_position(included));
    }

    fn done(&self) {
        self.with(1, ProgressBar::finish);
    }
}

/// Prints the report: a table, then with `--json` the JSON line.
fn print(args: &LoadArgs, report: &LoadReport) {
    let config = &args.config;
    print!("{}", report.table(config));
    if args.json {
        let rate = match config.rate {
            Rate::Max => json!("max"),
            Rate::PerSecond(rate) => json!(rate),
        };
        let line = json!({
            "workload": config.workload.name(),
            "accounts": config.accounts,
            "txs": report.txs,
            "rate": rate,
            "connections": config.connections,
            "sent": report.sent,
            "accepted": report.accepted,
            "included": report.included,
            "rejected": report.rejected_total(),
            "rejected_by_reason": report.rejected,
            "sign_tps": report.sign_tps.round(),
            "sent_tps": report.sent_tps.round(),
            "accepted_tps": report.accepted_tps.round(),
            "included_tps": report.included_tps.round(),
            "latency_ms": {
                "p50": report.latency_ms.p50,
                "p90": report.latency_ms.p90,
                "p99": report.latency_ms.p99,
                "max": report.latency_ms.max,
            },
            "duration_s": report.duration.as_secs_f64(),
        });
        println!("{line}");
    }
}
