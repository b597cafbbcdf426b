//! Fees: the gas price and priority fee to suggest, and the fee history of recent blocks
//! (bounded and validated as go-ethereum does, before any block is read).

use std::sync::Arc;

use alloy_consensus::Transaction as _;
use alloy_eips::BlockNumberOrTag;
use alloy_primitives::{B256, U64, U256};
use alloy_rpc_types_eth::FeeHistory;
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_node::ViewError;
use stave_storage::{KvStore, read};

use crate::{
    config::RpcConfig,
    convert::load_body,
    error::RpcError,
    rpc::{Outcome, Rpc},
};

/// `eth_*` methods about fees.
#[rpc(server)]
pub trait EthFeesApi {
    /// A legacy gas price: base fee plus the suggested tip.
    #[method(name = "eth_gasPrice")]
    fn gas_price(&self) -> RpcResult<U256>;
    /// The suggested priority fee.
    #[method(name = "eth_maxPriorityFeePerGas")]
    fn max_priority_fee(&self) -> RpcResult<U256>;
    /// Base fees, gas used ratios and tip percentiles of recent blocks.
    #[method(name = "eth_feeHistory")]
    async fn fee_history(
        &self,
        block_count: U64,
        newest: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory>;
}

/// Refuses reward percentiles go-ethereum refuses, in its words: more than the limit,
/// one outside `0..=100`, or one not above the one before.
fn check_percentiles(percentiles: &[f64], config: &RpcConfig) -> Outcome<()> {
    let limit = config.fee_history_max_percentiles;
    if percentiles.len() > limit {
        return Err(RpcError::LimitExceeded(format!(
            "invalid reward percentile: over the query limit {limit}"
        )));
    }
    for (i, &p) in percentiles.iter().enumerate() {
        if !(0.0..=100.0).contains(&p) {
            return Err(RpcError::InvalidParams(format!(
                "invalid reward percentile: {p:.6}"
            )));
        }
        if i > 0 && p <= percentiles[i - 1] {
            return Err(RpcError::InvalidParams(format!(
                "invalid reward percentile: #{}:{:.6} >= #{i}:{p:.6}",
                i - 1,
                percentiles[i - 1]
            )));
        }
    }
    Ok(())
}

/// The rewards at `percentiles` of block `number`'s transactions, whose base fee is
/// `base_fee` (see [`weighted_rewards`]).
fn block_rewards(
    store: &dyn KvStore,
    number: u64,
    base_fee: u64,
    percentiles: &[f64],
) -> Outcome<Vec<u128>> {
    let receipts = read::receipts(store, number)
        .map_err(RpcError::internal)?
        .unwrap_or_default();
    let mut cumulative_before = 0;
    let txs: Vec<(u128, u64)> = load_body(store, number)?
        .iter()
        .zip(&receipts)
        .map(|(tx, receipt)| {
            let cumulative = receipt.receipt.cumulative_gas_used;
            let gas_used = cumulative.saturating_sub(cumulative_before);
            cumulative_before = cumulative;
            let tip = tx
                .envelope()
                .effective_tip_per_gas(base_fee)
                .unwrap_or_default();
            (tip, gas_used)
        })
        .collect();
    Ok(weighted_rewards(txs, percentiles))
}

/// The tip at each of `percentiles` of a block's gas, as go-ethereum computes it: the
/// transactions (`(tip, gas used)`) sorted by tip, the reward at `p` is the tip of the
/// transaction within which the block's gas used, counted up from the cheapest, passes
/// `p`%. Zero for an empty block.
fn weighted_rewards(mut txs: Vec<(u128, u64)>, percentiles: &[f64]) -> Vec<u128> {
    if txs.is_empty() {
        return vec![0; percentiles.len()];
    }
    txs.sort_by_key(|(tip, _)| *tip);
    let block_gas: u64 = txs.iter().map(|(_, gas)| gas).sum();
    let mut index = 0;
    let mut summed = txs[0].1;
    percentiles
        .iter()
        .map(|p| {
            let threshold = (block_gas as f64 * p / 100.0) as u64;
            while summed < threshold && index + 1 < txs.len() {
                index += 1;
                summed += txs[index].1;
            }
            txs[index].0
        })
        .collect()
}

/// Blocks' rewards already computed, by block hash and the percentiles asked (as bits):
/// fee-history callers (wallets, each block) ask for the same recent blocks over and over,
/// and a block's rewards need its whole body decoded. Keyed by hash, so an entry can never
/// describe another block of the same number.
pub(crate) type RewardCache = quick_cache::sync::Cache<(B256, Vec<u64>), Arc<[u128]>>;

/// Entries of the [`RewardCache`]: the blocks of two full-size requests, at most
/// `fee_history_max_percentiles` values each (a few MB).
pub(crate) const REWARD_CACHE_BLOCKS: usize = 2_048;

impl Rpc {
    /// `eth_feeHistory` on the calling thread (a worker's), its arguments checked.
    fn history(
        &self,
        count: u64,
        newest: u64,
        reward_percentiles: Option<Vec<f64>>,
    ) -> Outcome<FeeHistory> {
        let oldest = newest + 1 - count;
        let store = self.ctx.view.store();
        let mut history = FeeHistory {
            oldest_block: oldest,
            ..FeeHistory::default()
        };
        let mut rewards = Vec::new();
        let mut next_base_fee = 0;
        for number in oldest..=newest {
            let header = read::header(store, number)
                .map_err(RpcError::internal)?
                .ok_or(RpcError::View(ViewError::UnknownBlock(number)))?;
            history
                .base_fee_per_gas
                .push(u128::from(header.base_fee_per_gas));
            history
                .gas_used_ratio
                .push(header.gas_used as f64 / header.gas_limit.max(1) as f64);
            next_base_fee = header.base_fee_per_gas;
            if let Some(percentiles) = &reward_percentiles {
                let key = (
                    header.hash_slow(),
                    percentiles.iter().map(|p| p.to_bits()).collect(),
                );
                let reward = match self.fee_rewards.get(&key) {
                    Some(reward) => reward,
                    None => {
                        let reward: Arc<[u128]> =
                            block_rewards(store, number, header.base_fee_per_gas, percentiles)?
                                .into();
                        self.fee_rewards.insert(key, reward.clone());
                        reward
                    }
                };
                rewards.push(reward.to_vec());
            }
        }
        // The base fee is fixed by the genesis: the next block's is the newest one's.
        history.base_fee_per_gas.push(u128::from(next_base_fee));
        history.reward = reward_percentiles.map(|_| rewards);
        Ok(history)
    }
}

#[async_trait]
impl EthFeesApiServer for Rpc {
    fn gas_price(&self) -> RpcResult<U256> {
        let base_fee = self.ctx.view.spec().base_fee();
        Ok(U256::from(
            u128::from(base_fee) + self.ctx.config.suggested_tip,
        ))
    }

    fn max_priority_fee(&self) -> RpcResult<U256> {
        Ok(U256::from(self.ctx.config.suggested_tip))
    }

    async fn fee_history(
        &self,
        block_count: U64,
        newest: BlockNumberOrTag,
        reward_percentiles: Option<Vec<f64>>,
    ) -> RpcResult<FeeHistory> {
        if let Some(percentiles) = &reward_percentiles {
            check_percentiles(percentiles, &self.ctx.config)?;
        }
        // As in go-ethereum: no blocks asked, none given; too many, cut to the limit.
        if block_count.is_zero() {
            return Ok(FeeHistory::default());
        }
        let newest = self.tag_number(newest)?.min(self.head()?);
        let count = block_count
            .to::<u64>()
            .min(self.ctx.config.fee_history_max_blocks)
            .min(newest + 1);
        Ok(self
            .heavy(move |rpc| rpc.history(count, newest, reward_percentiles))
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_weighted_by_the_gas_each_transaction_used() {
        // One big cheap transaction and two small dear ones: by count the median tip would
        // be 5; by gas, 90% of the block paid 1.
        let txs = vec![(5, 21_000), (1, 900_000), (9, 79_000)];
        assert_eq!(
            weighted_rewards(txs, &[0.0, 50.0, 90.0, 91.0, 100.0]),
            [1, 1, 1, 5, 9]
        );
        assert_eq!(weighted_rewards(Vec::new(), &[10.0, 50.0]), [0, 0]);
        assert_eq!(weighted_rewards(vec![(3, 21_000)], &[0.0, 100.0]), [3, 3]);
    }
}
