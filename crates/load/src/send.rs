//! The send phase: every pre-signed transaction in index order, in JSON-RPC batches over
//! several connections, at a fixed rate (open loop) or as fast as the node answers.

use std::{sync::Arc, time::Duration};

use stave_sdk::{RpcClient, SdkError};
use tokio::{sync::Semaphore, task::JoinSet};

use crate::{
    config::{MAX_CONNECTIONS, Rate},
    error::LoadError,
    fund::is_already_known,
    ledger::{Fate, Run},
};

/// Most transactions in one JSON-RPC batch: half the node's limit of 1,000 calls, so
/// batches pipeline over the connections instead of one batch holding the pool's lock
/// for long.
pub(crate) const MAX_BATCH: usize = 500;

/// Most nonces of one sender in one batch. With at most [`MAX_CONNECTIONS`] batches in
/// flight, a sender's in-flight nonces span at most `8 * 8 = 64` values, the pool's
/// default `max_nonce_gap`: a batch overtaking an earlier one is queued, not refused.
const NONCES_PER_BATCH: usize = 64 / MAX_CONNECTIONS;

/// At a fixed rate, a batch carries this much time's worth of transactions: small enough
/// that the offered load is smooth, large enough that a batch amortises its request.
const RATE_TICK: Duration = Duration::from_millis(20);

/// Most batches in flight at a fixed rate. The rate is kept whatever the node answers
/// (open loop) until this many are outstanding; then sending waits, and the sent TPS
/// shows the node fell behind.
const MAX_IN_FLIGHT: usize = 1_024;

/// How often the poller asks for the head (and other waits look again).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Transactions per batch: see [`MAX_BATCH`], [`NONCES_PER_BATCH`] and [`RATE_TICK`].
fn batch_size(rate: Rate, accounts: usize) -> usize {
    let by_nonces = accounts.saturating_mul(NONCES_PER_BATCH);
    let by_rate = match rate {
        Rate::Max => MAX_BATCH,
        Rate::PerSecond(rate) => (rate * RATE_TICK.as_secs_f64()).ceil() as usize,
    };
    by_rate.min(by_nonces).clamp(1, MAX_BATCH)
}

/// The reason to count a refusal under: the node's message without its details (the
/// part after the first `:` names nonces and balances, which differ per transaction).
fn reason(error: &SdkError) -> String {
    let text = match error {
        SdkError::Rpc { message, .. } => message.clone(),
        other => other.to_string(),
    };
    match text.split_once(": ") {
        Some((head, _)) if !matches!(error, SdkError::Transport(_)) => head.to_owned(),
        _ => text,
    }
}

/// Sends the items of `indices` as one batch on `client` and records the answers.
pub(crate) async fn send_batch(run: &Run, client: &RpcClient, indices: &[usize]) {
    let bytes: Vec<Vec<u8>> = {
        let mut ledger = run.ledger.lock();
        let now = run.start.elapsed();
        indices
            .iter()
            .map(|&index| {
                let item = &mut ledger.items[index];
                item.sent_at = Some(now);
                item.fate = Fate::InFlight;
                item.raw.bytes.clone()
            })
            .collect()
    };
    let answers = client.send_raw_transactions(&bytes).await;
    let mut ledger = run.ledger.lock();
    match answers {
        Ok(answers) => {
            for (&index, answer) in indices.iter().zip(answers) {
                let item = &mut ledger.items[index];
                let address = run.address(item.sender);
                item.fate = match answer {
                    Ok(_) => Fate::Accepted,
                    Err(error) if is_already_known(&error) => Fate::Accepted,
                    Err(error) if error.is_nonce_error() => {
                        run.nonces.refused(address);
                        Fate::Retry(reason(&error))
                    }
                    Err(error) => Fate::Refused(reason(&error)),
                };
                if item.fate == Fate::Accepted {
                    run.nonces.accepted(address, item.nonce);
                }
            }
        }
        // No answer: the node may or may not have them; a resend tells.
        Err(error) => {
            let reason = reason(&error);
            for &index in indices {
                ledger.items[index].fate = Fate::Retry(reason.clone());
            }
        }
    }
    run.progress.sent(indices.len() as u64);
}

/// The send phase: every item in index order, in batches over `clients`, at `rate`, until
/// all are sent or `duration` is over.
pub(crate) async fn dispatch(
    run: &Arc<Run>,
    clients: &[RpcClient],
    rate: Rate,
    duration: Option<Duration>,
) -> Result<(), LoadError> {
    let txs = run.ledger.lock().items.len();
    let batch = batch_size(rate, run.senders.len());
    let permits = Arc::new(Semaphore::new(match rate {
        Rate::Max => clients.len(),
        Rate::PerSecond(_) => MAX_IN_FLIGHT,
    }));
    let failed = |source| LoadError::Task {
        context: "a send task failed",
        source,
    };
    let mut tasks = JoinSet::new();
    for (number, first) in (0..txs).step_by(batch).enumerate() {
        if let Rate::PerSecond(rate) = rate {
            let due = run.start + Duration::from_secs_f64(first as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        if duration.is_some_and(|duration| run.start.elapsed() >= duration) {
            break;
        }
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LoadError::PermitsClosed)?;
        let (run, client) = (run.clone(), clients[number % clients.len()].clone());
        let indices: Vec<usize> = (first..(first + batch).min(txs)).collect();
        tasks.spawn(async move {
            send_batch(&run, &client, &indices).await;
            drop(permit);
        });
        while let Some(done) = tasks.try_join_next() {
            done.map_err(failed)?;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_bound_each_senders_nonces_and_the_node_limit() {
        assert_eq!(batch_size(Rate::Max, 200), MAX_BATCH);
        assert_eq!(batch_size(Rate::Max, 20), 20 * NONCES_PER_BATCH);
        assert_eq!(batch_size(Rate::PerSecond(1_000.0), 200), 20);
        assert_eq!(batch_size(Rate::PerSecond(1.0), 200), 1);
    }

    #[test]
    fn refusals_are_counted_without_their_details() {
        let error = SdkError::Rpc {
            code: -32000,
            message: "nonce too low: next nonce 4, tx nonce 2".into(),
        };
        assert_eq!(reason(&error), "nonce too low");
    }
}
