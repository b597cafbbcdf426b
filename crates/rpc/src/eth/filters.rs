//! Logs and installed filters: `eth_getLogs`, served from the per-block bloom index within
//! the configured limits (blocks scanned, logs and bytes returned, addresses and topics
//! per filter) on the heavy-method workers, and the filters clients that poll install and
//! read ([`installed`]).

mod installed;

use alloy_primitives::{B256, Bloom, U256};
use alloy_rpc_types_eth::{Filter, FilterBlockOption};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use serde::Serialize;
use stave_storage::read;

pub(crate) use installed::{FilterKind, Filters};

use crate::{
    convert::{load_block, rpc_logs},
    error::RpcError,
    limits::{Json, ResponseBudget, check_filter},
    rpc::{Outcome, Rpc},
};

/// What `eth_getFilterChanges` answers: a JSON array of block or transaction hashes, or
/// of logs (serialized as the response budget counted them).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum FilterChanges {
    /// Hashes of new blocks or newly admitted transactions (none: an empty array).
    Hashes(Vec<B256>),
    /// New logs, each already JSON.
    Logs(Vec<Json>),
}

/// `eth_*` methods that find logs, at once or by installed filters.
#[rpc(server)]
pub trait EthFiltersApi {
    /// Logs matching a filter, from the bloom index.
    #[method(name = "eth_getLogs")]
    async fn logs(&self, filter: Filter) -> RpcResult<Vec<Json>>;
    /// Installs a log filter for `eth_getFilterChanges`: logs of blocks from the next on.
    #[method(name = "eth_newFilter")]
    fn new_filter(&self, filter: Filter) -> RpcResult<U256>;
    /// Installs a filter for `eth_getFilterChanges`: hashes of blocks from the next on.
    #[method(name = "eth_newBlockFilter")]
    fn new_block_filter(&self) -> RpcResult<U256>;
    /// Installs a filter for `eth_getFilterChanges`: hashes of transactions the pool admits
    /// from now on.
    #[method(name = "eth_newPendingTransactionFilter")]
    fn new_pending_transaction_filter(&self) -> RpcResult<U256>;
    /// What an installed filter matched since its last poll.
    #[method(name = "eth_getFilterChanges")]
    async fn filter_changes(&self, id: U256) -> RpcResult<FilterChanges>;
    /// Every log an installed log filter matches, as `eth_getLogs` with its filter.
    #[method(name = "eth_getFilterLogs")]
    async fn filter_logs(&self, id: U256) -> RpcResult<Vec<Json>>;
    /// Removes an installed filter; false if there was none.
    #[method(name = "eth_uninstallFilter")]
    fn uninstall_filter(&self, id: U256) -> RpcResult<bool>;
}

impl Rpc {
    /// The blocks a log filter covers, its `latest` (or a number past the head) at the head.
    fn log_range(&self, filter: &Filter) -> Outcome<(u64, u64)> {
        Ok(match filter.block_option {
            FilterBlockOption::AtBlockHash(hash) => {
                let number = self
                    .number_by_hash(hash)?
                    .ok_or_else(|| RpcError::InvalidParams(format!("block {hash} not found")))?;
                (number, number)
            }
            FilterBlockOption::Range {
                from_block,
                to_block,
            } => {
                let head = self.head()?;
                let from = self.tag_number(from_block.unwrap_or_default())?;
                let to = self.tag_number(to_block.unwrap_or_default())?.min(head);
                (from, to)
            }
        })
    }

    /// What a block filter (`filter` `None`) or a log filter reports from block `next` on,
    /// and the block its next poll starts at. At most as many blocks per poll as one
    /// eth_getLogs scans; the next poll goes on.
    fn chain_changes(&self, filter: Option<&Filter>, next: u64) -> Outcome<(FilterChanges, u64)> {
        let to = self
            .head()?
            .min(next.saturating_add(self.ctx.config.max_log_blocks - 1));
        if next > to {
            return Ok((FilterChanges::Hashes(Vec::new()), next));
        }
        let changes = match filter {
            None => {
                let store = self.ctx.view.store();
                let hashes = (next..=to)
                    .map(|number| {
                        read::header(store, number)
                            .map_err(RpcError::internal)?
                            .map(|header| header.hash_slow())
                            .ok_or_else(|| RpcError::Internal(format!("block {number} missing")))
                    })
                    .collect::<Outcome<Vec<_>>>()?;
                FilterChanges::Hashes(hashes)
            }
            Some(filter) => {
                // As in go-ethereum, a tag (`latest`, the default) bounds nothing here: the
                // filter reports every block since its last poll; block numbers bound it.
                let (from, last) = match filter.block_option {
                    FilterBlockOption::AtBlockHash(_) => self.log_range(filter)?,
                    FilterBlockOption::Range {
                        from_block,
                        to_block,
                    } => (
                        from_block.and_then(|tag| tag.as_number()).unwrap_or(0),
                        to_block.and_then(|tag| tag.as_number()).unwrap_or(u64::MAX),
                    ),
                };
                let (from, last) = (from.max(next), last.min(to));
                let logs = if from > last {
                    Vec::new()
                } else {
                    self.logs_between(filter, from, last)?
                };
                FilterChanges::Logs(logs)
            }
        };
        Ok((changes, to + 1))
    }

    /// The logs `filter` matches in blocks `from..=to`, within the configured limits on
    /// blocks scanned and logs and bytes returned.
    fn logs_between(&self, filter: &Filter, from: u64, to: u64) -> Outcome<Vec<Json>> {
        if from > to {
            return Ok(Vec::new());
        }
        let store = self.ctx.view.store();
        let limit = self.ctx.config.max_log_blocks;
        if to - from >= limit {
            return Err(RpcError::LimitExceeded(format!(
                "query exceeds max block range {limit}. Try with this block range [{:#x}, {:#x}].",
                from,
                from + limit - 1
            )));
        }
        let max_logs = self.ctx.config.max_logs;
        let mut budget = ResponseBudget::new(&self.ctx.config);
        let mut found = Vec::new();
        for number in from..=to {
            let bloom = read::logs_bloom(store, number)
                .map_err(RpcError::internal)?
                .unwrap_or_default();
            // A block with any log has a bloom with bits set (each log sets its
            // address's): an empty bloom means no logs, so no body or receipts to read.
            if bloom == Bloom::ZERO || !filter.matches_bloom(bloom) {
                continue;
            }
            let Some(block) = load_block(store, number, false)? else {
                continue;
            };
            let receipts = read::receipts(store, number)
                .map_err(RpcError::internal)?
                .unwrap_or_default();
            let last = number.saturating_sub(1).max(from);
            let narrower = || format!("Try with this block range [{from:#x}, {last:#x}].");
            for log in rpc_logs(&block, &receipts)
                .into_iter()
                .flatten()
                .filter(|log| filter.matches(&log.inner))
            {
                found.push(budget.charge(&log, narrower)?);
            }
            if found.len() > max_logs {
                return Err(RpcError::LimitExceeded(format!(
                    "query returned more than {max_logs} results. {}",
                    narrower()
                )));
            }
        }
        Ok(found)
    }
}

impl Rpc {
    /// `eth_getLogs` on the calling thread (a worker's).
    fn find_logs(&self, filter: &Filter) -> Outcome<Vec<Json>> {
        check_filter(filter, &self.ctx.config)?;
        let (from, to) = self.log_range(filter)?;
        self.logs_between(filter, from, to)
    }
}

#[async_trait]
impl EthFiltersApiServer for Rpc {
    async fn logs(&self, filter: Filter) -> RpcResult<Vec<Json>> {
        Ok(self.heavy(move |rpc| rpc.find_logs(&filter)).await?)
    }

    fn new_filter(&self, filter: Filter) -> RpcResult<U256> {
        check_filter(&filter, &self.ctx.config)?;
        Ok(self
            .filters
            .install(FilterKind::Logs(Box::new(filter)), self.head()? + 1)?)
    }

    fn new_block_filter(&self) -> RpcResult<U256> {
        Ok(self.filters.install(FilterKind::Blocks, self.head()? + 1)?)
    }

    fn new_pending_transaction_filter(&self) -> RpcResult<U256> {
        Ok(self.filters.install(
            FilterKind::PendingTransactions,
            self.ctx.pool.admission_position(),
        )?)
    }

    async fn filter_changes(&self, id: U256) -> RpcResult<FilterChanges> {
        let (kind, next) = self.filters.poll(id)?;
        let (changes, next) = match kind {
            FilterKind::PendingTransactions => {
                let (hashes, next) = self.ctx.pool.admitted_since(next);
                (FilterChanges::Hashes(hashes), next)
            }
            FilterKind::Blocks => self.heavy(move |rpc| rpc.chain_changes(None, next)).await?,
            FilterKind::Logs(filter) => {
                self.heavy(move |rpc| rpc.chain_changes(Some(&filter), next))
                    .await?
            }
        };
        self.filters.advance(id, next);
        Ok(changes)
    }

    async fn filter_logs(&self, id: U256) -> RpcResult<Vec<Json>> {
        match self.filters.poll(id)?.0 {
            FilterKind::Logs(filter) => Ok(self.heavy(move |rpc| rpc.find_logs(&filter)).await?),
            FilterKind::Blocks | FilterKind::PendingTransactions => {
                Err(RpcError::InvalidParams(format!("filter {id:#x} is not a log filter")).into())
            }
        }
    }

    fn uninstall_filter(&self, id: U256) -> RpcResult<bool> {
        Ok(self.filters.uninstall(id))
    }
}
