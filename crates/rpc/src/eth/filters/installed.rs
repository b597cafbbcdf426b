//! Installed filters, as go-ethereum keeps them: `eth_newFilter`, `eth_newBlockFilter` and
//! `eth_newPendingTransactionFilter` install one, `eth_getFilterChanges` returns what is
//! new since the last poll, an idle filter expires after [`FILTER_IDLE_EXPIRY`], and at
//! most the configured number (`max_filters`) exist at once.
//! Clients polling over HTTP (ethers' contract events, web3.py's and web3j's filters) use
//! them instead of subscriptions.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use alloy_primitives::U256;
use alloy_rpc_types_eth::Filter;
use parking_lot::Mutex;

use crate::error::RpcError;

/// A filter nobody polled for this long is removed (go-ethereum's deadline).
pub(crate) const FILTER_IDLE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// What a filter reports.
#[derive(Debug, Clone)]
pub(crate) enum FilterKind {
    /// Hashes of new blocks.
    Blocks,
    /// Logs matching the filter in new blocks.
    Logs(Box<Filter>),
    /// Hashes of transactions the pool admitted.
    PendingTransactions,
}

#[derive(Debug)]
struct Installed {
    kind: FilterKind,
    /// Where the next poll starts: a block number, or for pending-transaction filters a
    /// position in the pool's admissions.
    next: u64,
    polled: Instant,
}

/// The installed filters of one RPC server.
#[derive(Debug)]
pub(crate) struct Filters {
    installed: Mutex<HashMap<U256, Installed>>,
    /// Most filters installed at once: each holds a little memory until it expires.
    max: usize,
}

/// The error for an id that is not (or no longer) installed, in go-ethereum's words.
fn not_found() -> RpcError {
    RpcError::Internal("filter not found".to_string())
}

impl Filters {
    /// No filters yet; at most `max` at once.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            installed: Mutex::default(),
            max,
        }
    }

    /// Installs a filter that reports from `next` on (a block, or a pool admission
    /// position); returns its id.
    pub(crate) fn install(&self, kind: FilterKind, next: u64) -> Result<U256, RpcError> {
        let now = Instant::now();
        let mut installed = self.installed.lock();
        installed.retain(|_, filter| now.duration_since(filter.polled) < FILTER_IDLE_EXPIRY);
        if installed.len() >= self.max {
            return Err(RpcError::LimitExceeded(format!(
                "too many filters installed (at most {}): uninstall some or let them expire",
                self.max
            )));
        }
        let id = U256::from_be_bytes::<32>(rand::random());
        installed.insert(
            id,
            Installed {
                kind,
                next,
                polled: now,
            },
        );
        Ok(id)
    }

    /// The filter `id` and where its next poll starts; counts as a poll.
    pub(crate) fn poll(&self, id: U256) -> Result<(FilterKind, u64), RpcError> {
        let now = Instant::now();
        let mut installed = self.installed.lock();
        match installed.get_mut(&id) {
            Some(filter) if now.duration_since(filter.polled) < FILTER_IDLE_EXPIRY => {
                filter.polled = now;
                Ok((filter.kind.clone(), filter.next))
            }
            Some(_) => {
                installed.remove(&id);
                Err(not_found())
            }
            None => Err(not_found()),
        }
    }

    /// Records that filter `id` reported everything before `next`.
    pub(crate) fn advance(&self, id: U256, next: u64) {
        if let Some(filter) = self.installed.lock().get_mut(&id) {
            filter.next = filter.next.max(next);
        }
    }

    /// Removes filter `id`; false if it was not installed.
    pub(crate) fn uninstall(&self, id: U256) -> bool {
        self.installed.lock().remove(&id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reports_from_where_its_last_poll_stopped_until_uninstalled() {
        let filters = Filters::new(10);
        let id = filters.install(FilterKind::Blocks, 5).expect("installs");
        assert_eq!(filters.poll(id).expect("installed").1, 5);
        filters.advance(id, 9);
        assert_eq!(filters.poll(id).expect("installed").1, 9);
        // A slower concurrent poll never moves it back.
        filters.advance(id, 7);
        assert_eq!(filters.poll(id).expect("installed").1, 9);
        assert!(filters.uninstall(id));
        assert!(!filters.uninstall(id));
        assert!(filters.poll(id).is_err());
    }

    #[test]
    fn idle_filters_expire_and_the_count_is_bounded() {
        let filters = Filters::new(10);
        let idle = filters.install(FilterKind::Blocks, 0).expect("installs");
        if let Some(filter) = filters.installed.lock().get_mut(&idle) {
            filter.polled = Instant::now() - FILTER_IDLE_EXPIRY;
        }
        assert!(filters.poll(idle).is_err(), "expired");
        for _ in 0..10 {
            filters.install(FilterKind::Blocks, 0).expect("installs");
        }
        assert!(matches!(
            filters.install(FilterKind::Blocks, 0),
            Err(RpcError::LimitExceeded(_))
        ));
    }
}
