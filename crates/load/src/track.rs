//! Inclusion tracking and repair: a poller stamps each transaction when it is first seen
//! in a block; after sending, refused and stuck senders are resynced from the node and
//! their transactions resent (renumbered where needed) until all are in or inclusion
//! stalls.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_eips::BlockNumberOrTag;
use rayon::prelude::*;
use stave_primitives::Address;
use stave_sdk::{NonceAction, RawTx, RpcClient};

use crate::{
    error::LoadError,
    fund::pending_counts,
    ledger::{Fate, Run},
    send::{MAX_BATCH, POLL_INTERVAL, send_batch},
};

/// Without a new inclusion for this long, senders with outstanding transactions are
/// resynced (an evicted transaction leaves a gap that holds back its sender).
const STALL_REPAIR: Duration = Duration::from_secs(5);

/// Without a new inclusion for this long, the run stops waiting and reports.
const STALL_GIVE_UP: Duration = Duration::from_secs(60);

/// Repair rounds for refused or unanswered transactions before they count as rejected.
const REPAIR_ROUNDS: u32 = 5;

/// Follows the chain from block `from`, stamping each load transaction with the time it
/// is first seen included, until `stop` (after a last look at the head).
pub(crate) async fn follow_blocks(
    run: Arc<Run>,
    client: RpcClient,
    from: u64,
    stop: Arc<AtomicBool>,
) -> Result<(), LoadError> {
    let mut next = from;
    loop {
        // Read before looking at the head: the last pass after a stop sees every block
        // produced before it.
        let stopping = stop.load(Ordering::Relaxed);
        let head = client
            .block_number()
            .await
            .map_err(LoadError::rpc("polling the head"))?;
        while next <= head {
            let block = client
                .get_block_by_number(BlockNumberOrTag::Number(next))
                .await
                .map_err(LoadError::rpc(format!("reading block {next}")))?
                .ok_or_else(|| LoadError::Missing(format!("block {next} is missing")))?;
            let now = run.start.elapsed();
            let mut guard = run.ledger.lock();
            let ledger = &mut *guard;
            for hash in block.transactions.hashes() {
                let Some(&index) = ledger.by_hash.get(&hash) else {
                    continue;
                };
                let item = &mut ledger.items[index];
                if item.included_at.is_none() {
                    item.included_at = Some(now);
                    ledger.included += 1;
                }
            }
            run.progress.included(ledger.included);
            next += 1;
        }
        if stopping {
            return Ok(());
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// After sending: repairs refusals and gaps, and waits until every sent transaction is
/// included, refused for good, or inclusion stalled for [`STALL_GIVE_UP`].
pub(crate) async fn wait_for_inclusion(
    run: &Run,
    client: &RpcClient,
    poller: &tokio::task::JoinHandle<Result<(), LoadError>>,
) -> Result<(), LoadError> {
    let mut rounds = 0;
    let mut included = 0;
    let mut progress_at = Instant::now();
    let mut repaired_at = Instant::now();
    loop {
        if poller.is_finished() {
            // It only ends early on an error, which the caller reports.
            return Ok(());
        }
        let (retry, outstanding, now_included) = {
            let ledger = run.ledger.lock();
            let mut retry = BTreeSet::new();
            let mut outstanding = BTreeSet::new();
            for item in ledger
                .items
                .iter()
                .filter(|item| item.included_at.is_none())
            {
                match item.fate {
                    Fate::Retry(_) => {
                        retry.insert(item.sender);
                    }
                    Fate::Accepted | Fate::InFlight => {
                        outstanding.insert(item.sender);
                    }
                    Fate::Unsent | Fate::Refused(_) => {}
                }
            }
            (retry, outstanding, ledger.included)
        };
        if retry.is_empty() && outstanding.is_empty() {
            return Ok(());
        }
        if now_included > included {
            included = now_included;
            progress_at = Instant::now();
        }
        if !retry.is_empty() {
            if rounds == REPAIR_ROUNDS {
                give_up_retries(run);
                continue;
            }
            rounds += 1;
            repair(run, client, &retry).await?;
        } else if progress_at.elapsed() > STALL_GIVE_UP {
            run.progress.note(&format!(
                "no transaction included for {}s: reporting without {} senders' outstanding transactions",
                STALL_GIVE_UP.as_secs(),
                outstanding.len()
            ));
            return Ok(());
        } else if progress_at.elapsed() > STALL_REPAIR && repaired_at.elapsed() > STALL_REPAIR {
            repair(run, client, &outstanding).await?;
            repaired_at = Instant::now();
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// After [`REPAIR_ROUNDS`]: what is still to retry counts as refused.
fn give_up_retries(run: &Run) {
    let mut ledger = run.ledger.lock();
    for item in &mut ledger.items {
        if let Fate::Retry(reason) = &item.fate {
            item.fate = Fate::Refused(reason.clone());
        }
    }
}

/// One sender's transaction, as the repair plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    /// Index of the item.
    index: usize,
    /// Its current nonce.
    nonce: u64,
}

/// New nonces for a sender's sent, not yet included transactions once the node's next
/// nonce is `to`: those at or above `to` first, in nonce order, then those below (their
/// nonce was used by another transaction), all numbered consecutively from `to`. When the
/// node lacks transactions we sent (refused or evicted), nothing below `to` is lost and
/// every nonce stays what it was: the same bytes go out again and fill the gap.
fn renumber(mut pending: Vec<Pending>, to: u64) -> Vec<Pending> {
    pending.sort_by_key(|p| (p.nonce < to, p.nonce, p.index));
    pending
        .into_iter()
        .zip(to..)
        .map(|(p, nonce)| Pending { nonce, ..p })
        .collect()
}

/// Resyncs the nonces of `senders` from the node and resends their transactions that are
/// to be retried or (after a resync) not yet included, re-signed where renumbered.
async fn repair(run: &Run, client: &RpcClient, senders: &BTreeSet<usize>) -> Result<(), LoadError> {
    let addresses: Vec<Address> = senders.iter().map(|&sender| run.address(sender)).collect();
    let counts = pending_counts(client, addresses.iter().copied()).await?;
    let mut resend = Vec::new();
    let mut resign = Vec::new();
    {
        let ledger = run.ledger.lock();
        for ((&sender, &address), pending) in senders.iter().zip(&addresses).zip(counts) {
            let unincluded = ledger.items.iter().enumerate().filter(|(_, item)| {
                item.sender == sender
                    && item.included_at.is_none()
                    && !matches!(item.fate, Fate::Unsent | Fate::Refused(_))
            });
            match run.nonces.reconcile(address, pending) {
                NonceAction::InSync => resend.extend(
                    unincluded
                        .filter(|(_, item)| matches!(item.fate, Fate::Retry(_)))
                        .map(|(index, _)| index),
                ),
                NonceAction::Resynced { to, .. } => {
                    let plan = renumber(
                        unincluded
                            .map(|(index, item)| Pending {
                                index,
                                nonce: item.nonce,
                            })
                            .collect(),
                        to,
                    );
                    run.nonces
                        .reserve(address, plan.len() as u64)
                        .map_err(LoadError::Nonces)?;
                    for p in plan {
                        resend.push(p.index);
                        if ledger.items[p.index].nonce != p.nonce {
                            resign.push((p, sender));
                        }
                    }
                }
            }
        }
    }
    let resigned: Vec<(Pending, RawTx)> = resign
        .into_par_iter()
        .map(|(p, sender)| {
            let raw = run.senders[sender].sign_raw(&run.maker.build(p.index, p.nonce));
            (p, raw)
        })
        .collect();
    {
        let mut ledger = run.ledger.lock();
        for (p, raw) in resigned {
            ledger.by_hash.insert(raw.hash, p.index);
            let item = &mut ledger.items[p.index];
            item.nonce = p.nonce;
            item.raw = raw;
        }
    }
    // In index order, one batch at a time: each sender's nonces arrive in order.
    resend.sort_unstable();
    for chunk in resend.chunks(MAX_BATCH) {
        send_batch(run, client, chunk).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(nonces: &[u64]) -> Vec<Pending> {
        nonces
            .iter()
            .enumerate()
            .map(|(index, &nonce)| Pending { index, nonce })
            .collect()
    }

    fn nonces(plan: &[Pending]) -> Vec<(usize, u64)> {
        plan.iter().map(|p| (p.index, p.nonce)).collect()
    }

    #[test]
    fn a_gap_is_filled_by_the_same_nonces() {
        // The node lost nonce 6 (refused as too high, or evicted): 6..9 go out unchanged.
        let plan = renumber(pending(&[6, 7, 8, 9]), 6);
        assert_eq!(nonces(&plan), [(0, 6), (1, 7), (2, 8), (3, 9)]);
    }

    #[test]
    fn nonces_used_elsewhere_move_behind_the_kept_ones() {
        // Another client used nonces 4 and 5: our 4 and 5 follow our 6 and 7.
        let plan = renumber(pending(&[4, 5, 6, 7]), 6);
        assert_eq!(nonces(&plan), [(2, 6), (3, 7), (0, 8), (1, 9)]);
    }

    #[test]
    fn a_node_ahead_of_everything_renumbers_all_in_order() {
        let plan = renumber(pending(&[3, 1, 2]), 10);
        assert_eq!(nonces(&plan), [(1, 10), (2, 11), (0, 12)]);
    }
}
