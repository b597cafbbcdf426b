//! Stave's measured workloads, one module per bench: each takes a typed config, runs, and
//! returns a report that serializes to the bench's JSON line (the contract
//! `scripts/bench.sh` and `bench/` read) and displays as the table `stave bench` prints.
//! Ratios taken within one run are the figures that count; absolute times on shared
//! machines are context.

mod chart;
pub mod checkqueue;
pub mod codec;
pub mod commit;
mod error;
pub mod exec;
pub mod net;
pub mod node;
pub mod pipeline;
pub mod sign;
pub mod verify;

use std::time::{Duration, Instant};

pub use error::BenchError;

/// Chain id of every bench chain.
const CHAIN_ID: u64 = stave_primitives::dev::DEV_CHAIN_ID;

/// Fee cap (or gas price) of every bench transaction: 1 gwei.
const GAS_PRICE: u128 = 1_000_000_000;

/// Hooks a bench calls as it goes; every method does nothing unless implemented, so `()`
/// reports nothing.
pub trait Progress {
    /// Something the user should read now (a phase starting, a fallback taken).
    fn note(&self, _message: &str) {}
    /// `done` of `total` transactions are signed (called with 0 first, `total` last).
    fn signed(&self, _done: u64, _total: u64) {}
}

impl Progress for () {}

/// Block size and repetitions of the single-stage benches.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct BlockConfig {
    /// Transactions in the block.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub block_txs: usize,
    /// Timed runs per mode; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 9))]
    pub runs: usize,
}

/// Threads rayon and the queues use: all cores.
fn threads() -> usize {
    rayon::current_num_threads()
}

/// Median wall time of `runs` calls of `f`, after one warm-up call.
fn median_time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    std::hint::black_box(f());
    let times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    median(times)
}

/// The median of `times`; `times` is not empty.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Microseconds with two decimals, for JSON.
fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e8).round() / 100.0
}

/// Milliseconds with three decimals, for JSON.
fn ms(d: Duration) -> f64 {
    ratio(d.as_secs_f64() * 1e3, 1.0)
}

/// A ratio with three decimals, for JSON.
fn ratio(numerator: f64, denominator: f64) -> f64 {
    (numerator / denominator * 1000.0).round() / 1000.0
}

/// Fails with `message` unless `holds`: a bench refuses to time a wrong result.
fn ensure(holds: bool, message: impl FnOnce() -> String) -> Result<(), BenchError> {
    if holds {
        Ok(())
    } else {
        Err(BenchError::Check(message()))
    }
}
