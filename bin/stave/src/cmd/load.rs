//! `stave load`: drives a node through its JSON-RPC with signed transactions sent at a
//! fixed rate, and reports sent, accepted and included TPS and confirmation latency.
//!
//! Phases:
//! 1. Check the node: reachable, and the chain id expected (1337 with the dev funder).
//! 2. Fund `--accounts` senders (the deterministic dev accounts, [`dev_account`]) from the
//!    funder (the dev mnemonic's first account, or `--key`) in one batch, deploying the
//!    repo's ERC-20 first and handing tokens out for `--workload erc20`; wait until every
//!    funding transaction is in a block and succeeded.
//! 3. Pre-sign every transaction on all cores: tx `i` comes from sender `i % accounts` with
//!    that sender's next nonce (reserved from a [`NonceManager`]), so sending in index
//!    order sends each sender's nonces in order.
//! 4. Send in JSON-RPC batches over `--connections` clients. At a fixed `--rate` a batch is
//!    due at its time whatever earlier batches got back (open loop; in flight is bounded
//!    only by [`MAX_IN_FLIGHT`]); at `max` one batch per connection is in flight. Meanwhile
//!    a poller follows new blocks (`eth_getBlockByNumber` with hashes) and stamps each
//!    transaction when it is first seen included.
//! 5. Repair: a sender the node refused for a nonce reason, or whose batch got no answer,
//!    is resynced from `eth_getTransactionCount(pending)` and its transactions not yet
//!    included are resent, renumbered from the node's count where needed; when inclusion
//!    stalls, senders with outstanding transactions are resynced too (an eviction leaves
//!    a gap behind which everything waits). A long run never stalls on one lost nonce.
//! 6. Report: a table, and with `--json` one JSON line as the last line of stdout.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_consensus::TypedTransaction;
use alloy_eips::BlockNumberOrTag;
use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;
use rayon::prelude::*;
use serde_json::json;
use stave_primitives::{
    Address, B256, U256,
    dev::{DEV_CHAIN_ID, dev_account, mnemonic_signer},
};
use stave_sdk::{
    ERC20_TRANSFER_GAS, LocalSigner, NonceAction, NonceManager, RawTx, RpcClient, SdkError,
    TRANSFER_GAS, TxBuilder, TxFormat, WorkloadKind, contracts::stave_token_initcode, sign_batch,
};
use tokio::{sync::Semaphore, task::JoinSet};

/// Most transactions in one JSON-RPC batch: half the node's limit of 1,000 calls, so
/// batches pipeline over the connections instead of one batch holding the pool's lock
/// for long.
const MAX_BATCH: usize = 500;

/// Most nonces of one sender in one batch. With at most [`MAX_CONNECTIONS`] batches in
/// flight, a sender's in-flight nonces span at most `8 * 8 = 64` values, the pool's
/// default `max_nonce_gap`: a batch overtaking an earlier one is queued, not refused.
const NONCES_PER_BATCH: usize = 8;

/// Most connections (`--connections`); see [`NONCES_PER_BATCH`].
const MAX_CONNECTIONS: usize = 8;

/// At a fixed rate, a batch carries this much time's worth of transactions: small enough
/// that the offered load is smooth, large enough that a batch amortises its request.
const RATE_TICK: Duration = Duration::from_millis(20);

/// Most batches in flight at a fixed rate. The rate is kept whatever the node answers
/// (open loop) until this many are outstanding; then sending waits, and the sent TPS
/// shows the node fell behind.
const MAX_IN_FLIGHT: usize = 1_024;

/// How often the poller asks for the head.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Without a new inclusion for this long, senders with outstanding transactions are
/// resynced (an evicted transaction leaves a gap that holds back its sender).
const STALL_REPAIR: Duration = Duration::from_secs(5);

/// Without a new inclusion for this long, the run stops waiting and reports.
const STALL_GIVE_UP: Duration = Duration::from_secs(60);

/// Repair rounds for refused or unanswered transactions before they count as rejected.
const REPAIR_ROUNDS: u32 = 5;

/// How long funding may take to be included.
const FUNDING_TIMEOUT: Duration = Duration::from_secs(120);

/// Priority fee of every transaction, in wei (what the node suggests to wallets).
const TIP: u128 = 1_000_000_000;

/// Gas limit of the token deploy (it uses about 600k).
const DEPLOY_GAS: u64 = 2_000_000;

/// Senders get this many times what their transactions can cost, in ETH and tokens.
const FUNDING_MARGIN: u64 = 2;

/// Arguments of `stave load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The node's JSON-RPC URL.
    #[arg(long)]
    rpc: String,
    /// Sender accounts (deterministic dev accounts 0..N, funded by the run).
    #[arg(long, default_value_t = 100)]
    accounts: usize,
    /// Transactions to send [default: rate × duration at a fixed rate with --duration,
    /// else 10,000].
    #[arg(long)]
    txs: Option<usize>,
    /// Transactions per second, or `max`.
    #[arg(long, default_value = "max")]
    rate: Rate,
    /// Stop sending after this long (`30s`, `500ms`, `2m`; plain numbers are seconds).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// What the transactions do.
    #[arg(long, value_enum, default_value_t = Workload::Transfer)]
    workload: Workload,
    /// The funder's secret key (hex) [default: the dev mnemonic's first account].
    #[arg(long)]
    key: Option<String>,
    /// The chain id the node must have [default: 1337 without --key, else the node's].
    #[arg(long)]
    chain_id: Option<u64>,
    /// HTTP clients sending in parallel (1 to 8).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Also print the report as one JSON line, the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// What the load's transactions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// ETH transfers, each to a fresh address.
    Transfer,
    /// `transfer` calls on a freshly deployed StaveToken, each to a fresh address.
    Erc20,
    /// ETH transfers that all pay one hot address.
    Conflict,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Transfer => "transfer",
            Workload::Erc20 => "erc20",
            Workload::Conflict => "conflict",
        }
    }

    fn gas_limit(self) -> u64 {
        match self {
            Workload::Erc20 => ERC20_TRANSFER_GAS,
            Workload::Transfer | Workload::Conflict => TRANSFER_GAS,
        }
    }

    /// Wei each transaction sends.
    fn value(self) -> U256 {
        match self {
            Workload::Erc20 => U256::ZERO,
            Workload::Transfer | Workload::Conflict => U256::from(1),
        }
    }
}

/// The send rate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rate {
    /// As fast as the node answers: one batch in flight per connection.
    Max,
    /// Transactions per second, kept whatever the node answers.
    PerSecond(f64),
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        match text.parse::<f64>() {
            Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(Rate::PerSecond(rate)),
            _ => Err(format!(
                "{text:?} is not a rate: a positive number of tx/s or `max`"
            )),
        }
    }
}

/// `30s`, `500ms`, `2m`, or seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        (text, 1.0)
    };
    match number.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(Duration::from_secs_f64(value * unit)),
        _ => Err(format!("{text:?} is not a duration like 30s, 500ms or 2m")),
    }
}

/// Runs `stave load`.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    if args.accounts == 0 {
        bail!("--accounts must be at least 1");
    }
    if !(1..=MAX_CONNECTIONS).contains(&args.connections) {
        bail!("--connections must be 1 to {MAX_CONNECTIONS}");
    }
    let txs = match (args.txs, args.rate, args.duration) {
        (Some(txs), ..) => txs,
        (None, Rate::PerSecond(rate), Some(duration)) => {
            (rate * duration.as_secs_f64()).ceil() as usize
        }
        (None, ..) => 10_000,
    };
    if txs == 0 {
        bail!("--txs must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(load(&args, txs))?;
    report.print(&args, txs);
    Ok(())
}

/// One transaction of the load and what became of it.
#[derive(Debug)]
struct Item {
    /// Index of its sender.
    sender: usize,
    /// Its current nonce (a repair may renumber it).
    nonce: u64,
    /// Its current signed form.
    raw: RawTx,
    /// When it was last sent, since the start of sending.
    sent_at: Option<Duration>,
    /// When it was first seen in a block, since the start of sending.
    included_at: Option<Duration>,
    /// What the node said.
    fate: Fate,
}

/// What the node said to a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// Not sent yet.
    Unsent,
    /// Sent, no answer yet.
    InFlight,
    /// The node returned its hash (or already had it).
    Accepted,
    /// Refused for a nonce reason, or its batch failed as a whole: resent after a repair.
    Retry(String),
    /// Refused for good, with the reason.
    Refused(String),
}

/// Everything the senders and the poller share, behind one lock taken once per batch
/// and once per block.
#[derive(Debug)]
struct Ledger {
    items: Vec<Item>,
    /// Every hash an item was ever signed with (a renumbered item keeps its old hash
    /// here too, in case the old transaction makes it into a block after all).
    by_hash: HashMap<B256, usize>,
    /// Items seen included.
    included: u64,
    /// When the last batch of the send phase got its answer.
    send_end: Duration,
}

/// Makes the load's transactions.
#[derive(Debug, Clone, Copy)]
struct Maker {
    kind: WorkloadKind,
    builder: TxBuilder,
}

impl Maker {
    /// Transaction `index` of the load, with `nonce` (its sender is implied by the caller).
    fn build(&self, index: usize, nonce: u64) -> TypedTransaction {
        self.kind.tx(&self.builder, index as u64, nonce)
    }
}

/// The state of a run shared by its tasks.
struct Run {
    /// Time zero: the first send.
    start: Instant,
    ledger: Mutex<Ledger>,
    senders: Vec<LocalSigner>,
    nonces: NonceManager,
    maker: Maker,
    sent_bar: ProgressBar,
    included_bar: ProgressBar,
}

impl Run {
    fn address(&self, sender: usize) -> Address {
        self.senders[sender].address()
    }
}

/// The one address every transaction of the conflict workload pays.
fn hot_address() -> Address {
    Address::repeat_byte(0x40)
}

/// How many of `txs` transactions sender `sender` of `accounts` sends (tx `i` is sender
/// `i % accounts`'s).
fn txs_of(sender: usize, accounts: usize, txs: usize) -> usize {
    txs / accounts + usize::from(sender < txs % accounts)
}

/// Transactions per batch: see [`MAX_BATCH`], [`NONCES_PER_BATCH`] and [`RATE_TICK`].
fn batch_size(rate: Rate, accounts: usize) -> usize {
    let by_nonces = accounts.saturating_mul(NONCES_PER_BATCH);
    let by_rate = match rate {
        Rate::Max => MAX_BATCH,
        Rate::PerSecond(rate) => (rate * RATE_TICK.as_secs_f64()).ceil() as usize,
    };
    by_rate.min(by_nonces).clamp(1, MAX_BATCH)
}

/// The whole run; returns the report.
async fn load(args: &LoadArgs, txs: usize) -> anyhow::Result<Report> {
    let clients = (0..args.connections)
        .map(|_| RpcClient::new(&args.rpc))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad --rpc URL {}", args.rpc))?;
    let client = &clients[0];
    let chain_id = client
        .chain_id()
        .await
        .with_context(|| format!("cannot reach a node at {}", args.rpc))?;
    let expected = args.chain_id.or(args.key.is_none().then_some(DEV_CHAIN_ID));
    if let Some(expected) = expected
        && expected != chain_id
    {
        bail!(
            "the node at {} has chain id {chain_id}, expected {expected}{}",
            args.rpc,
            if args.key.is_none() {
                " (the dev funder's chain): pass --key for another chain"
            } else {
                ""
            }
        );
    }
    let funder = match &args.key {
        Some(key) => {
            let secret: B256 = key.trim().parse().context("--key is not 32 bytes of hex")?;
            LocalSigner::from_secret(&secret).context("--key is not a valid secret key")?
        }
        None => {
            let signer = mnemonic_signer(0)?;
            LocalSigner::from_secret(&B256::from_slice(&signer.credential().to_bytes()))?
        }
    };
    let latest = client
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .context("reading the head block")?
        .context("the node has no head block")?;
    let base_fee = u128::from(latest.header.base_fee_per_gas.unwrap_or_default());
    let builder = TxBuilder::eip1559(chain_id, 2 * base_fee + TIP, TIP);

    let senders: Vec<LocalSigner> = (0..args.accounts as u64)
        .into_par_iter()
        .map(|i| LocalSigner::from_secret(&dev_account(i).secret))
        .collect::<Result<_, _>>()?;
    let nonces = NonceManager::new();
    let pending = pending_counts(client, senders.iter().map(LocalSigner::address)).await?;
    for (signer, pending) in senders.iter().zip(pending) {
        nonces.init(signer.address(), pending);
    }

    eprintln!(
        "funding {} accounts from {}{}",
        senders.len(),
        funder.address(),
        if args.workload == Workload::Erc20 {
            ", deploying StaveToken"
        } else {
            ""
        }
    );
    let token = fund(
        client,
        &funder,
        &builder,
        &senders,
        args.workload,
        txs,
        builder_fee_cap(&builder),
    )
    .await?;

    // Pre-sign everything: sender s sends txs s, s + N, s + 2N... with consecutive nonces.
    let accounts = senders.len();
    let mut bases = Vec::with_capacity(accounts);
    for (sender, signer) in senders.iter().enumerate() {
        let count = txs_of(sender, accounts, txs) as u64;
        bases.push(nonces.reserve(signer.address(), count)?.start);
    }
    let kind = match (args.workload, token) {
        (Workload::Erc20, Some(token)) => WorkloadKind::Erc20 { token },
        (Workload::Conflict, _) => WorkloadKind::Conflict { hot: hot_address() },
        _ => WorkloadKind::Transfer,
    };
    let maker = Maker { kind, builder };
    let signing = Instant::now();
    let items: Vec<Item> = (0..txs)
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
        .collect();
    let signing = signing.elapsed();
    let by_hash = items
        .iter()
        .enumerate()
        .map(|(index, item)| (item.raw.hash, index))
        .collect();

    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix:>9} [{bar:40}] {pos:>8}/{len} {per_sec:>12} {elapsed}",
    )
    .context("progress bar template")?
    .progress_chars("=> ");
    let bar = |prefix: &'static str| {
        progress.add(
            ProgressBar::new(txs as u64)
                .with_style(style.clone())
                .with_prefix(prefix),
        )
    };
    // Send, with the poller following the blocks from the current head on.
    let head = client.block_number().await.context("reading the head")?;
    let run = Arc::new(Run {
        start: Instant::now(),
        ledger: Mutex::new(Ledger {
            items,
            by_hash,
            included: 0,
            send_end: Duration::ZERO,
        }),
        senders,
        nonces,
        maker,
        sent_bar: bar("sent"),
        included_bar: bar("included"),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn(follow_blocks(
        run.clone(),
        clients[0].clone(),
        head + 1,
        stop.clone(),
    ));
    let sent = dispatch(&run, &clients, args.rate, args.duration).await;
    let waited = match sent {
        Ok(()) => {
            run.ledger.lock().send_end = run.start.elapsed();
            run.sent_bar.finish();
            wait_for_inclusion(&run, client, &poller).await
        }
        Err(error) => Err(error),
    };
    stop.store(true, Ordering::Relaxed);
    let polled = poller.await.context("the block poller failed")?;
    waited?;
    polled?;
    run.included_bar.finish();
    Report::of(&run.ledger.lock(), txs, signing)
}

/// The fee cap of the builder's transactions, per gas.
fn builder_fee_cap(builder: &TxBuilder) -> u128 {
    match builder.format {
        TxFormat::Legacy { gas_price } | TxFormat::Eip2930 { gas_price } => gas_price,
        TxFormat::Eip1559 {
            max_fee_per_gas, ..
        } => max_fee_per_gas,
    }
}

/// `eth_getTransactionCount(pending)` of every address, a few requests at a time.
async fn pending_counts(
    client: &RpcClient,
    addresses: impl Iterator<Item = Address>,
) -> anyhow::Result<Vec<u64>> {
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
            let (at, address, count) = joined.context("a nonce query failed")?;
            chunk_counts[at] = count.with_context(|| format!("nonce of {address}"))?;
        }
        counts.extend(chunk_counts);
    }
    Ok(counts)
}

/// Funds every sender for its share of `txs` (ETH, and for erc20 a freshly deployed
/// StaveToken's tokens) from `funder`, and waits until it is all included. Returns the
/// token's address for erc20.
async fn fund(
    client: &RpcClient,
    funder: &LocalSigner,
    builder: &TxBuilder,
    senders: &[LocalSigner],
    workload: Workload,
    txs: usize,
    fee_cap: u128,
) -> anyhow::Result<Option<Address>> {
    let accounts = senders.len();
    let first = client
        .get_transaction_count(funder.address(), BlockNumberOrTag::Pending)
        .await
        .context("reading the funder's nonce")?;
    let margin = U256::from(FUNDING_MARGIN);
    let per_tx = U256::from(workload.gas_limit()) * U256::from(fee_cap) + workload.value();
    let amounts: Vec<U256> = (0..accounts)
        .map(|sender| U256::from(txs_of(sender, accounts, txs)) * per_tx * margin)
        .collect();
    // The funding transactions: [deploy], one ETH transfer per sender, [one token
    // transfer per sender].
    let deploy = usize::from(workload == Workload::Erc20);
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
        .context("reading the funder's balance")?;
    if balance < needed {
        bail!(
            "the funder {} has {balance} wei, the run needs about {needed}: fund it or pass another --key",
            funder.address()
        );
    }
    let raws = sign_batch(funder, count, |i| {
        let nonce = first + i as u64;
        let at = i.wrapping_sub(deploy);
        match token {
            Some(_) if i == 0 => builder.deploy(nonce, DEPLOY_GAS, stave_token_initcode(supply)),
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
            .context("sending the funding transactions")?;
        for answer in answers {
            if let Err(error) = answer
                && !is_already_known(&error)
            {
                bail!("the node refused a funding transaction: {error}");
            }
        }
    }
    let hashes: Vec<B256> = raws.iter().map(|raw| raw.hash).collect();
    let deadline = Instant::now() + FUNDING_TIMEOUT;
    let mut outstanding = hashes;
    while !outstanding.is_empty() {
        if Instant::now() > deadline {
            bail!(
                "{} funding transactions not included after {}s: is the node producing blocks?",
                outstanding.len(),
                FUNDING_TIMEOUT.as_secs()
            );
        }
        let mut left = Vec::new();
        for chunk in outstanding.chunks(MAX_BATCH) {
            let receipts = client
                .get_transaction_receipts(chunk)
                .await
                .context("reading funding receipts")?;
            for (hash, receipt) in chunk.iter().zip(receipts) {
                match receipt.with_context(|| format!("receipt of {hash}"))? {
                    Some(receipt) if !receipt.status() => {
                        bail!("funding transaction {hash} failed (reverted)")
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
    Ok(token)
}

/// Whether the node already has the transaction: as good as accepted.
fn is_already_known(error: &SdkError) -> bool {
    matches!(error, SdkError::Rpc { message, .. } if message.contains("already known"))
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
async fn send_batch(run: &Run, client: &RpcClient, indices: &[usize]) {
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
    run.sent_bar.inc(indices.len() as u64);
}

/// The send phase: every item in index order, in batches over `clients`, at `rate`, until
/// all are sent or `duration` is over.
async fn dispatch(
    run: &Arc<Run>,
    clients: &[RpcClient],
    rate: Rate,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let txs = run.ledger.lock().items.len();
    let batch = batch_size(rate, run.senders.len());
    let permits = Arc::new(Semaphore::new(match rate {
        Rate::Max => clients.len(),
        Rate::PerSecond(_) => MAX_IN_FLIGHT,
    }));
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
            .context("the send permits closed")?;
        let (run, client) = (run.clone(), clients[number % clients.len()].clone());
        let indices: Vec<usize> = (first..(first + batch).min(txs)).collect();
        tasks.spawn(async move {
            send_batch(&run, &client, &indices).await;
            drop(permit);
        });
        while let Some(done) = tasks.try_join_next() {
            done.context("a send task failed")?;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a send task failed")?;
    }
    Ok(())
}

/// Follows the chain from block `from`, stamping each load transaction with the time it
/// is first seen included, until `stop` (after a last look at the head).
async fn follow_blocks(
    run: Arc<Run>,
    client: RpcClient,
    from: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let mut next = from;
    loop {
        // Read before looking at the head: the last pass after a stop sees every block
        // produced before it.
        let stopping = stop.load(Ordering::Relaxed);
        let head = client.block_number().await.context("polling the head")?;
        while next <= head {
            let block = client
                .get_block_by_number(BlockNumberOrTag::Number(next))
                .await
                .with_context(|| format!("reading block {next}"))?
                .with_context(|| format!("block {next} is missing"))?;
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
            run.included_bar.set_position(ledger.included);
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
async fn wait_for_inclusion(
    run: &Run,
    client: &RpcClient,
    poller: &tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
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
            run.included_bar.suspend(|| {
                eprintln!(
                    "no transaction included for {}s: reporting without {} senders' outstanding transactions",
                    STALL_GIVE_UP.as_secs(),
                    outstanding.len()
                )
            });
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
async fn repair(run: &Run, client: &RpcClient, senders: &BTreeSet<usize>) -> anyhow::Result<()> {
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
                    run.nonces.reserve(address, plan.len() as u64)?;
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

/// What a run measured.
#[derive(Debug)]
struct Report {
    sent: u64,
    accepted: u64,
    included: u64,
    rejected: BTreeMap<String, u64>,
    sent_tps: f64,
    accepted_tps: f64,
    included_tps: f64,
    /// Confirmation latency per included transaction, in microseconds.
    latency: Histogram<u64>,
    /// First send to last inclusion (or to the end of sending if nothing was included).
    duration: Duration,
    sign_tps: f64,
}

fn per_second(count: u64, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}

impl Report {
    fn of(ledger: &Ledger, txs: usize, signing: Duration) -> anyhow::Result<Self> {
        let mut report = Report {
            sent: 0,
            accepted: 0,
            included: 0,
            rejected: BTreeMap::new(),
            sent_tps: 0.0,
            accepted_tps: 0.0,
            included_tps: 0.0,
            latency: Histogram::new(3).context("making the latency histogram")?,
            duration: ledger.send_end,
            sign_tps: per_second(txs as u64, signing),
        };
        let mut last_inclusion = Duration::ZERO;
        for item in &ledger.items {
            let Some(sent_at) = item.sent_at else {
                continue;
            };
            report.sent += 1;
            if let Some(included_at) = item.included_at {
                report.included += 1;
                report.accepted += 1;
                last_inclusion = last_inclusion.max(included_at);
                let micros = included_at.saturating_sub(sent_at).as_micros();
                // An auto-resizing histogram takes any value.
                let _ = report
                    .latency
                    .record(u64::try_from(micros).unwrap_or(u64::MAX));
                continue;
            }
            match &item.fate {
                Fate::Accepted => report.accepted += 1,
                Fate::Retry(reason) | Fate::Refused(reason) => {
                    *report.rejected.entry(reason.clone()).or_default() += 1;
                }
                Fate::Unsent | Fate::InFlight => {}
            }
        }
        report.sent_tps = per_second(report.sent, ledger.send_end);
        report.accepted_tps = per_second(report.accepted, ledger.send_end);
        report.included_tps = per_second(report.included, last_inclusion);
        report.duration = report.duration.max(last_inclusion);
        Ok(report)
    }

    fn latency_ms(&self, quantile: f64) -> f64 {
        if self.latency.is_empty() {
            0.0
        } else {
            self.latency.value_at_quantile(quantile) as f64 / 1_000.0
        }
    }

    fn print(&self, args: &LoadArgs, txs: usize) {
        let rate = match args.rate {
            Rate::Max => "max".to_owned(),
            Rate::PerSecond(rate) => format!("{rate} tx/s"),
        };
        let rejected: u64 = self.rejected.values().sum();
        println!(
            "stave load: {} workload, {} accounts, {txs} txs, rate {rate}, {} connections",
            args.workload.name(),
            args.accounts,
            args.connections
        );
        println!("{:<10} {:>10} {:>12}", "", "txs", "tx/s");
        println!("{:<10} {:>10} {:>12.0}", "signed", txs, self.sign_tps);
        println!("{:<10} {:>10} {:>12.0}", "sent", self.sent, self.sent_tps);
        println!(
            "{:<10} {:>10} {:>12.0}",
            "accepted", self.accepted, self.accepted_tps
        );
        println!(
            "{:<10} {:>10} {:>12.0}",
            "included", self.included, self.included_tps
        );
        println!("{:<10} {:>10}", "rejected", rejected);
        for (reason, count) in &self.rejected {
            println!("  {count:>8}  {reason}");
        }
        println!(
            "latency ms p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}; {:.2} s first send to last inclusion",
            self.latency_ms(0.5),
            self.latency_ms(0.9),
            self.latency_ms(0.99),
            self.latency_ms(1.0),
            self.duration.as_secs_f64()
        );
        if args.json {
            let rate = match args.rate {
                Rate::Max => json!("max"),
                Rate::PerSecond(rate) => json!(rate),
            };
            let line = json!({
                "workload": args.workload.name(),
                "accounts": args.accounts,
                "txs": txs,
                "rate": rate,
                "connections": args.connections,
                "sent": self.sent,
                "accepted": self.accepted,
                "included": self.included,
                "rejected": rejected,
                "rejected_by_reason": self.rejected,
                "sign_tps": self.sign_tps.round(),
                "sent_tps": self.sent_tps.round(),
                "accepted_tps": self.accepted_tps.round(),
                "included_tps": self.included_tps.round(),
                "latency_ms": {
                    "p50": self.latency_ms(0.5),
                    "p90": self.latency_ms(0.9),
                    "p99": self.latency_ms(0.99),
                    "max": self.latency_ms(1.0),
                },
                "duration_s": self.duration.as_secs_f64(),
            });
            println!("{line}");
        }
    }
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

    #[test]
    fn batches_bound_each_senders_nonces_and_the_node_limit() {
        assert_eq!(batch_size(Rate::Max, 200), MAX_BATCH);
        assert_eq!(batch_size(Rate::Max, 20), 20 * NONCES_PER_BATCH);
        assert_eq!(batch_size(Rate::PerSecond(1_000.0), 200), 20);
        assert_eq!(batch_size(Rate::PerSecond(1.0), 200), 1);
    }

    #[test]
    fn txs_are_shared_round_robin() {
        let counts: Vec<usize> = (0..3).map(|s| txs_of(s, 3, 10)).collect();
        assert_eq!(counts, [4, 3, 3]);
    }

    #[test]
    fn rates_and_durations_parse() {
        assert_eq!("max".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("250".parse::<Rate>(), Ok(Rate::PerSecond(250.0)));
        assert!("0".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("-1s").is_err());
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
