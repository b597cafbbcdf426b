//! Timing the stages: each runs in a `stage` tracing span and records its wall time in the
//! [`STAGE_SECONDS`] histogram (through the `metrics` facade: a node installs the
//! Prometheus exporter) and in the block's [`StageTimes`].

use std::time::{Duration, Instant};

/// Wall time each stage spent on one block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Decoding the block and checking its transactions root.
    pub decode: Duration,
    /// Recovering senders.
    pub verify: Duration,
    /// Executing and checking the header's roots.
    pub execute: Duration,
    /// Encoding and writing the block, receipts and state.
    pub commit: Duration,
}

impl std::ops::AddAssign for StageTimes {
    fn add_assign(&mut self, other: Self) {
        self.decode += other.decode;
        self.verify += other.verify;
        self.execute += other.execute;
        self.commit += other.commit;
    }
}

/// Name of the histogram (seconds per block) each stage records into, labelled
/// `stage` = decode | verify | execute | commit (and prefetch, when it runs).
pub const STAGE_SECONDS: &str = "stave_stage_seconds";

/// Runs `work` as stage `stage` of block `number`: inside a tracing span, with its wall
/// time recorded in the [`STAGE_SECONDS`] histogram and returned.
pub(super) fn stage<T>(
    stage: &'static str,
    number: u64,
    work: impl FnOnce() -> T,
) -> (T, Duration) {
    let span = tracing::info_span!("stage", stage, number);
    let _entered = span.enter();
    let clock = Instant::now();
    let result = work();
    let elapsed = clock.elapsed();
    record(stage, elapsed);
    tracing::debug!(elapsed_us = elapsed.as_micros() as u64, "stage done");
    (result, elapsed)
}

/// Records `elapsed` as a block's time in stage `stage` (for a stage timed on a thread
/// of its own and recorded by the thread that waited for it).
pub(super) fn record(stage: &'static str, elapsed: Duration) {
    metrics::histogram!(STAGE_SECONDS, "stage" => stage).record(elapsed.as_secs_f64());
}
