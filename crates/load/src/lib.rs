//! Stave's load generator: drives a node through its JSON-RPC with signed transactions
//! sent at a fixed rate, and measures sent, accepted and included TPS and confirmation
//! latency. `stave load` is its command line: [`LoadConfig`] in, [`run`], [`LoadReport`]
//! out, with [`Progress`] hooks for the bars.
//!
//! Phases:
//! 1. Check the node: reachable, and the chain id expected (1337 with the dev funder).
//! 2. Fund [`LoadConfig::accounts`] senders (the deterministic dev accounts,
//!    [`dev_account`]) from the funder (the dev mnemonic's first account, or
//!    [`LoadConfig::key`]) in one batch, deploying the repo's ERC-20 first and handing
//!    tokens out for workloads that use a token; wait until every funding transaction is
//!    in a block and succeeded.
//! 3. Pre-sign every transaction on all cores: tx `i` comes from sender `i % accounts` with
//!    that sender's next nonce (reserved from a [`NonceManager`]), so sending in index
//!    order sends each sender's nonces in order.
//! 4. Send in JSON-RPC batches over [`LoadConfig::connections`] clients. At a fixed
//!    [`Rate`] a batch is due at its time whatever earlier batches got back (open loop;
//!    in flight is bounded only by a large cap); at [`Rate::Max`] one batch per connection
//!    is in flight. Meanwhile a poller follows new blocks (`eth_getBlockByNumber` with
//!    hashes) and stamps each transaction when it is first seen included.
//! 5. Repair: a sender the node refused for a nonce reason, or whose batch got no answer,
//!    is resynced from `eth_getTransactionCount(pending)` and its transactions not yet
//!    included are resent, renumbered from the node's count where needed; when inclusion
//!    stalls, senders with outstanding transactions are resynced too (an eviction leaves
//!    a gap behind which everything waits). A long run never stalls on one lost nonce.
//! 6. Report: [`LoadReport`].

mod config;
mod error;
mod fund;
mod ledger;
mod progress;
mod report;
mod send;
mod track;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use alloy_eips::BlockNumberOrTag;
use parking_lot::Mutex;
use rayon::prelude::*;
use stave_primitives::{
    B256,
    dev::{DEV_CHAIN_ID, dev_account, mnemonic_signer},
};
use stave_sdk::{LocalSigner, NonceManager, RpcClient, Targets, TxBuilder};

pub use config::{LoadConfig, MAX_CONNECTIONS, Rate, parse_duration, parse_key};
pub use error::LoadError;
pub use progress::Progress;
pub use report::{Latency, LoadReport, LoadTable};

use crate::{
    fund::{Funding, pending_counts},
    ledger::{Fate, Item, Ledger, Maker, Run, txs_of},
    send::dispatch,
    track::{follow_blocks, wait_for_inclusion},
};

/// Runs a load against the node at `config.rpc` and reports what it measured, telling
/// `progress` how it goes.
pub async fn run(
    config: &LoadConfig,
    progress: Arc<dyn Progress>,
) -> Result<LoadReport, LoadError> {
    config.validate()?;
    let txs = config.tx_count();
    let clients = (0..config.connections)
        .map(|_| RpcClient::new(&config.rpc))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| LoadError::BadUrl {
            rpc: config.rpc.clone(),
            source,
        })?;
    let client = &clients[0];
    let chain_id = check_chain(config, client).await?;
    let funder = funder(config.key)?;
    let latest = client
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .map_err(LoadError::rpc("reading the head block"))?
        .ok_or_else(|| LoadError::Missing("the node has no head block".into()))?;
    let base_fee = u128::from(latest.header.base_fee_per_gas.unwrap_or_default());
    // The tip the node suggests to wallets: none on a gas-free chain, whose transactions
    // then cost nothing but their value.
    let tip = client
        .max_priority_fee()
        .await
        .map_err(LoadError::rpc("reading the suggested tip"))?;
    let builder = TxBuilder::eip1559(chain_id, 2 * base_fee + tip, tip);

    let first = config.first_account;
    let senders: Vec<LocalSigner> = (first..first + config.accounts as u64)
        .into_par_iter()
        .map(|i| LocalSigner::from_secret(&dev_account(i).secret))
        .collect::<Result<_, _>>()
        .map_err(|source| LoadError::Key {
            what: "a dev account's key",
            source,
        })?;
    let nonces = NonceManager::new();
    let pending = pending_counts(client, senders.iter().map(LocalSigner::address)).await?;
    for (signer, pending) in senders.iter().zip(pending) {
        nonces.init(signer.address(), pending);
    }

    progress.note(&format!(
        "funding {} accounts from {}{}",
        senders.len(),
        funder.address(),
        if config.workload.uses_token() {
            ", deploying StaveToken"
        } else {
            ""
        }
    ));
    let funded = Funding {
        funder: &funder,
        builder: &builder,
        senders: &senders,
        workload: config.workload,
        txs,
    }
    .run(client)
    .await?;
    let defaults = Targets::default();
    let maker = Maker {
        workload: config.workload,
        targets: Targets {
            token: funded.token.unwrap_or(defaults.token),
            ..defaults
        },
        builder,
        gas: funded.gas,
    };
    let signing = Instant::now();
    let items = presign(&senders, &nonces, &maker, txs)?;
    let signing = signing.elapsed();

    progress.start(txs as u64);
    // Send, with the poller following the blocks from the current head on.
    let head = client
        .block_number()
        .await
        .map_err(LoadError::rpc("reading the head"))?;
    let run = Arc::new(Run {
        start: Instant::now(),
        ledger: Mutex::new(Ledger::new(items)),
        senders,
        nonces,
        maker,
        progress,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn(follow_blocks(
        run.clone(),
        clients[0].clone(),
        head + 1,
        stop.clone(),
    ));
    let sent = dispatch(&run, &clients, config.rate, config.duration).await;
    let waited = match sent {
        Ok(()) => {
            run.ledger.lock().send_end = run.start.elapsed();
            run.progress.sending_done();
            wait_for_inclusion(&run, client, &poller).await
        }
        Err(error) => Err(error),
    };
    stop.store(true, Ordering::Relaxed);
    let polled = poller.await.map_err(|source| LoadError::Task {
        context: "the block poller failed",
        source,
    })?;
    waited?;
    polled?;
    run.progress.done();
    LoadReport::of(&run.ledger.lock(), txs, signing)
}

/// The node's chain id, checked against the one expected (the dev chain's with the dev
/// funder).
async fn check_chain(config: &LoadConfig, client: &RpcClient) -> Result<u64, LoadError> {
    let chain_id = client
        .chain_id()
        .await
        .map_err(|source| LoadError::Unreachable {
            rpc: config.rpc.clone(),
            source,
        })?;
    let dev_funder = config.key.is_none();
    let expected = config.chain_id.or(dev_funder.then_some(DEV_CHAIN_ID));
    match expected {
        Some(expected) if expected != chain_id => Err(LoadError::WrongChain {
            rpc: config.rpc.clone(),
            actual: chain_id,
            expected,
            dev_funder,
        }),
        _ => Ok(chain_id),
    }
}

/// The signer of `key`, or the dev mnemonic's first account.
fn funder(key: Option<B256>) -> Result<LocalSigner, LoadError> {
    let (secret, what) = match key {
        Some(key) => (key, "--key"),
        None => {
            let signer = mnemonic_signer(0).map_err(LoadError::DevFunder)?;
            let secret = B256::from_slice(&signer.credential().to_bytes());
            (secret, "the dev funder's key")
        }
    };
    LocalSigner::from_secret(&secret).map_err(|source| LoadError::Key { what, source })
}

/// Signs every transaction of the run on all cores: sender `s` sends txs `s`, `s + N`,
/// `s + 2N`... with consecutive nonces reserved from `nonces`.
fn presign(
    senders: &[LocalSigner],
    nonces: &NonceManager,
    maker: &Maker,
    txs: usize,
) -> Result<Vec<Item>, LoadError> {
    let accounts = senders.len();
    let mut bases = Vec::with_capacity(accounts);
    for (sender, signer) in senders.iter().enumerate() {
        let count = txs_of(sender, accounts, txs) as u64;
        let reserved = nonces
            .reserve(signer.address(), count)
            .map_err(LoadError::Nonces)?;
        bases.push(reserved.start);
    }
    Ok((0..txs)
        .into_par_iter()
        .map(|index| {
            let sender = index % accounts;
            let nonce = bases[sender] + (index / accounts) as u64;
            Item {
                sender,
                nonce,
                raw: senders[sender].sign_raw(&maker.build(index, nonce)),
                sent_at: None,
                included_at: None,
                fate: Fate::Unsent,
            }
        })
        .collect())
}
