//! Funding: every sender gets the ETH (and for token workloads, a freshly deployed
//! StaveToken's tokens) its share of the run can cost, in one batch from the funder.

use std::time::{Duration, Instant};

use alloy_eips::BlockNumberOrTag;
use stave_primitives::{Address, B256, U256};
use stave_sdk::{
    ERC20_TRANSFER_GAS, LocalSigner, RpcClient, SdkError, TRANSFER_GAS, TxBuilder, TxFormat,
    Workload, contracts::stave_token_initcode, sign_batch,
};
use tokio::task::JoinSet;

use crate::{
    error::LoadError,
    ledger::txs_of,
    send::{MAX_BATCH, POLL_INTERVAL},
};

/// How long funding may take to be included.
const FUNDING_TIMEOUT: Duration = Duration::from_secs(120);

/// Gas limit of the token deploy (it uses about 600k).
const DEPLOY_GAS: u64 = 2_000_000;

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

/// Whether the node already has the transaction: as good as accepted.
pub(crate) fn is_already_known(error: &SdkError) -> bool {
    matches!(error, SdkError::Rpc { message, .. } if message.contains("already known"))
}

impl Funding<'_> {
    /// Funds every sender for its share of the run and waits until it is all included.
    /// Returns the token's address when the workload uses one.
    pub async fn run(&self, client: &RpcClient) -> Result<Option<Address>, LoadError> {
        let Funding {
            funder,
            builder,
            senders,
            workload,
            txs,
        } = *self;
        let accounts = senders.len();
        let fee_cap = fee_cap(builder);
        let first = client
            .get_transaction_count(funder.address(), BlockNumberOrTag::Pending)
            .await
            .map_err(LoadError::rpc("reading the funder's nonce"))?;
        let margin = U256::from(FUNDING_MARGIN);
        let per_tx = U256::from(workload.max_gas()) * U256::from(fee_cap) + workload.max_value();
        let amounts: Vec<U256> = (0..accounts)
            .map(|sender| U256::from(txs_of(sender, accounts, txs)) * per_tx * margin)
            .collect();
        // The funding transactions: [deploy], one ETH transfer per sender, [one token
        // transfer per sender].
        let deploy = usize::from(workload.uses_token());
        let token = (deploy == 1).then(|| funder.address().create(first));
        let count = deploy + accounts * (1 + deploy);
        let supply = U256::from(txs) * margin;
        let gas = deploy as u64 * DEPLOY_GAS
            + accounts as u64 * (TRANSFER_GAS + deploy as u64 * ERC20_TRANSFER_GAS);
        let fees = U256::from(gas) * U256::from(fee_cap);
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
            let nonce = first + i as u64;
            let at = i.wrapping_sub(deploy);
            match token {
                Some(_) if i == 0 => {
                    builder.deploy(nonce, DEPLOY_GAS, stave_token_initcode(supply))
                }
                Some(token) if at >= accounts => {
                    let sender = at - accounts;
                    let tokens = U256::from(txs_of(sender, accounts, txs)) * margin;
                    builder.erc20_transfer(nonce, token, senders[sender].address(), tokens)
                }
                _ => builder.transfer(nonce, senders[at].address(), amounts[at]),
            }
        });
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
        wait_for_receipts(client, raws.iter().map(|raw| raw.hash).collect()).await?;
        Ok(token)
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
