//! Funding: every sender gets the ETH (and for token workloads, a freshly deployed
//! StaveToken's tokens) its share of the run can cost, in one batch from the funder.
//! The gas limits of the run's transaction shapes are estimated on the node first
//! (`eth_estimateGas`, once per shape, with headroom), so the load runs on any Ethereum
//! node whatever its gas schedule: a token transfer with Stave's fixed limit ran out of
//! gas on go-ethereum's.

use std::time::{Duration, Instant};

use alloy_eips::BlockNumberOrTag;
use stave_primitives::{Address, B256, U256};
use stave_sdk::{
    GasLimits, LocalSigner, RpcClient, SdkError, TxBuilder, TxFormat, Workload,
    contracts::stave_token_initcode, erc20_transfer_calldata, sign_batch,
};
use tokio::task::JoinSet;

use crate::{
    error::LoadError,
    ledger::txs_of,
    send::{MAX_BATCH, POLL_INTERVAL},
};

/// How long funding may take to be included.
const FUNDING_TIMEOUT: Duration = Duration::from_secs(120);

/// Estimates are raised by this many percent: a shape's later transactions may cost a
/// little more than the estimated one (calldata with more non-zero bytes, a first write).
const GAS_HEADROOM_PERCENT: u64 = 25;

/// The address estimates send to: one no run pays, so each estimate is of a first
/// payment to a fresh account, as the workloads' payments are.
const FRESH: Address = Address::repeat_byte(0xfe);

/// Senders get this many times what their transactions can cost, in ETH and tokens.
const FUNDING_MARGIN: u64 = 2;

/// What funding needs besides the node: who pays, who gets paid, and for what.
pub(crate) struct Funding<'a> {
    pub funder: &'a LocalSigner,
    pub builder: &'a TxBuilder,
    pub senders: &'a [LocalSigner],
    pub workload: Workload,
    pub txs: usize,
}

/// The fee cap of the builder's transactions, per gas.
fn fee_cap(builder: &TxBuilder) -> u128 {
    match builder.format {
        TxFormat::Legacy { gas_price } | TxFormat::Eip2930 { gas_price } => gas_price,
        TxFormat::Eip1559 {
            max_fee_per_gas, ..
        } => max_fee_per_gas,
    }
}

/// `eth_getTransactionCount(pending)` of every address, a few requests at a time.
pub(crate) async fn pending_counts(
    client: &RpcClient,
    addresses: impl Iterator<Item = Address>,
) -> Result<Vec<u64>, LoadError> {
    let addresses: Vec<Address> = addresses.collect();
    let mut counts = Vec::with_capacity(addresses.len());
    for chunk in addresses.chunks(64) {
        let mut tasks = JoinSet::new();
        for (at, address) in chunk.iter().copied().enumerate() {
            let client = client.clone();
            tasks.spawn(async move {
                let count = client
                    .get_transaction_count(address, BlockNumberOrTag::Pending)
                    .await;
                (at, address, count)
            });
        }
        let mut chunk_counts = vec![0; chunk.len()];
        while let Some(joined) = tasks.join_next().await {
            let (at, address, count) = joined.map_err(|source| LoadError::Task {
                context: "a nonce query failed",
                source,
            })?;
            chunk_counts[at] = count.map_err(LoadError::rpc(format!("nonce of {address}")))?;
        }
        counts.extend(chunk_counts);
    }
    Ok(counts)
}

/// What funding leaves the run: the token, for workloads that use one, and the gas
/// limits estimated on the node.
pub(crate) struct Funded {
    /// The deployed token.
    pub token: Option<Address>,
    /// Each transaction shape's gas limit.
    pub gas: GasLimits,
}

/// The gas `client`'s node estimates for a transaction from `from`, with headroom.
async fn estimate(
    client: &RpcClient,
    what: &'static str,
    from: Address,
    to: Option<Address>,
    value: U256,
    data: &[u8],
) -> Result<u64, LoadError> {
    let gas = client
        .estimate_tx_gas(from, to, value, data)
        .await
        .map_err(LoadError::rpc(format!("estimating the gas of {what}")))?;
    Ok(gas + gas * GAS_HEADROOM_PERCENT / 100)
}

/// Sends `raws` in batches; a refusal other than "already known" fails the funding.
async fn send_all(client: &RpcClient, raws: &[stave_sdk::RawTx]) -> Result<(), LoadError> {
    for chunk in raws.chunks(MAX_BATCH) {
        let bytes: Vec<&[u8]> = chunk.iter().map(|raw| raw.bytes.as_slice()).collect();
        let answers = client
            .send_raw_transactions(&bytes)
            .await
            .map_err(LoadError::rpc("sending the funding transactions"))?;
        for answer in answers {
            if let Err(error) = answer
                && !is_already_known(&error)
            {
                return Err(LoadError::FundingRefused(error));
            }
        }
    }
    wait_for_receipts(client, raws.iter().map(|raw| raw.hash).collect()).await
}

/// Whether the node already has the transaction: as good as accepted. go-ethereum and
/// Stave say "already known", Anvil "transaction already imported".
pub(crate) fn is_already_known(error: &SdkError) -> bool {
    matches!(error, SdkError::Rpc { message, .. }
        if message.contains("already known") || message.contains("already imported"))
}

impl Funding<'_> {
    /// Estimates the run's gas limits, deploys the token if the workload uses one, funds
    /// every sender for its share of the run and waits until it is all included.
    pub async fn run(&self, client: &RpcClient) -> Result<Funded, LoadError> {
        let Funding {
            funder,
            builder,
            senders,
            workload,
            txs,
        } = *self;
        let accounts = senders.len();
        let fee_cap = fee_cap(builder);
        let margin = U256::from(FUNDING_MARGIN);
        let supply = U256::from(txs) * margin;
        let one = U256::from(1);
        let mut gas = GasLimits {
            transfer: estimate(
                client,
                "a transfer",
                funder.address(),
                Some(FRESH),
                one,
                &[],
            )
            .await?,
            ..GasLimits::default()
        };
        let mut next = client
            .get_transaction_count(funder.address(), BlockNumberOrTag::Pending)
            .await
            .map_err(LoadError::rpc("reading the funder's nonce"))?;
        let token = match workload.uses_token() {
            true => {
                let initcode = stave_token_initcode(supply);
                gas.deploy = estimate(
                    client,
                    "the token deploy",
                    funder.address(),
                    None,
                    U256::ZERO,
                    &initcode,
                )
                .await?;
                let deploy = sign_batch(funder, 1, |_| {
                    builder.deploy(next, gas.deploy, initcode.clone())
                });
                send_all(client, &deploy).await?;
                let token = funder.address().create(next);
                next += 1;
                let transfer = erc20_transfer_calldata(FRESH, one);
                gas.erc20_transfer = estimate(
                    client,
                    "a token transfer",
                    funder.address(),
                    Some(token),
                    U256::ZERO,
                    &transfer,
                )
                .await?;
                Some(token)
            }
            false => None,
        };
        let per_tx =
            U256::from(workload.max_gas(&gas)) * U256::from(fee_cap) + workload.max_value();
        let amounts: Vec<U256> = (0..accounts)
            .map(|sender| U256::from(txs_of(sender, accounts, txs)) * per_tx * margin)
            .collect();
        // The funding transactions: one ETH transfer per sender, [one token transfer per
        // sender].
        let with_tokens = usize::from(token.is_some());
        let count = accounts * (1 + with_tokens);
        let funding_gas =
            accounts as u64 * (gas.transfer + with_tokens as u64 * gas.erc20_transfer);
        let fees = U256::from(funding_gas) * U256::from(fee_cap);
        let needed = amounts.iter().fold(fees, |sum, amount| sum + amount);
        let balance = client
            .get_balance(funder.address())
            .await
            .map_err(LoadError::rpc("reading the funder's balance"))?;
        if balance < needed {
            return Err(LoadError::Underfunded {
                funder: funder.address(),
                balance,
                needed,
            });
        }
        let raws = sign_batch(funder, count, |i| {
            let nonce = next + i as u64;
            match token {
                Some(token) if i >= accounts => {
                    let sender = i - accounts;
                    let tokens = U256::from(txs_of(sender, accounts, txs)) * margin;
                    let to = senders[sender].address();
                    builder.erc20_transfer_with_gas(nonce, gas.erc20_transfer, token, to, tokens)
                }
                _ => {
                    builder.transfer_with_gas(nonce, gas.transfer, senders[i].address(), amounts[i])
                }
            }
        });
        send_all(client, &raws).await?;
        Ok(Funded { token, gas })
    }
}

/// Waits until every transaction of `outstanding` is in a block and succeeded.
async fn wait_for_receipts(
    client: &RpcClient,
    mut outstanding: Vec<B256>,
) -> Result<(), LoadError> {
    let deadline = Instant::now() + FUNDING_TIMEOUT;
    while !outstanding.is_empty() {
        if Instant::now() > deadline {
            return Err(LoadError::FundingTimeout {
                outstanding: outstanding.len(),
                seconds: FUNDING_TIMEOUT.as_secs(),
            });
        }
        let mut left = Vec::new();
        for chunk in outstanding.chunks(MAX_BATCH) {
            let receipts = client
                .get_transaction_receipts(chunk)
                .await
                .map_err(LoadError::rpc("reading funding receipts"))?;
            for (hash, receipt) in chunk.iter().zip(receipts) {
                match receipt.map_err(LoadError::rpc(format!("receipt of {hash}")))? {
                    Some(receipt) if !receipt.status() => {
                        return Err(LoadError::FundingReverted(*hash));
                    }
                    Some(_) => {}
                    None => left.push(*hash),
                }
            }
        }
        outstanding = left;
        if !outstanding.is_empty() {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(message: &str) -> SdkError {
        SdkError::Rpc {
            code: -32000,
            message: message.into(),
        }
    }

    #[test]
    fn a_resent_transaction_counts_as_accepted_in_every_node_s_words() {
        assert!(is_already_known(&refusal("already known")));
        assert!(is_already_known(&refusal("transaction already imported")));
        assert!(!is_already_known(&refusal(
            "nonce too low: next nonce 3, tx nonce 0"
        )));
    }
}
