//! The pool itself: admission, eviction, block selection and block updates, over the
//! bookkeeping of [`crate::book`].

use std::{
    cmp::Ordering,
    collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use alloy_consensus::Transaction as _;
use alloy_primitives::{Address, B256, U256};
use parking_lot::Mutex;
use rayon::prelude::*;
use stave_governance::Checker;
use stave_primitives::{RecoveredTx, SignedTx, StateReader};
use stave_verify::SenderCache;

use crate::{
    book::{Book, SenderQueue},
    error::{DropReason, PoolError},
};

/// Limits and rules of a pool. The defaults suit a consortium chain under load.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Chain id every transaction must carry.
    pub chain_id: u64,
    /// Most transactions in the pool, pending and queued together.
    pub max_txs: usize,
    /// Most transactions one sender may have in the pool.
    pub max_per_sender: usize,
    /// How far past the sender's next executable nonce a transaction may be.
    pub max_nonce_gap: u64,
    /// How long a transaction behind a nonce gap may wait before it is dropped.
    pub queued_lifetime: Duration,
    /// How much more (percent) a replacement must pay in fee cap and tip.
    pub price_bump_percent: u128,
    /// The block gas limit: a transaction asking for more can never be included.
    pub block_gas_limit: u64,
    /// Hashes of the latest admissions kept for pending-transaction filters
    /// (`eth_newPendingTransactionFilter`): a filter polled less often than this many
    /// admissions misses the oldest, as in geth.
    pub admission_log: usize,
}

impl PoolConfig {
    /// Default limits for chain `chain_id` with blocks of `block_gas_limit` gas.
    pub fn new(chain_id: u64, block_gas_limit: u64) -> Self {
        Self {
            chain_id,
            max_txs: 200_000,
            max_per_sender: 10_000,
            max_nonce_gap: 64,
            queued_lifetime: Duration::from_secs(180),
            price_bump_percent: 10,
            block_gas_limit,
            admission_log: 65_536,
        }
    }
}

/// A transaction in the pool, with what ordering and admission need precomputed.
#[derive(Debug, Clone)]
pub struct PoolTx {
    /// The transaction and its sender.
    pub tx: RecoveredTx,
    /// Its hash.
    pub hash: B256,
    /// Its nonce.
    pub nonce: u64,
    /// Fee cap (gas price for legacy transactions).
    pub max_fee: u128,
    /// Priority fee cap (gas price for legacy transactions).
    pub max_tip: u128,
    /// Order of arrival: earlier arrivals win ties on fee.
    pub arrival: u64,
    /// What it may cost its sender: `gas limit * fee cap + value`.
    pub cost: U256,
    added: Instant,
}

impl PoolTx {
    /// The tip per gas it pays at `base_fee`.
    pub fn effective_tip(&self, base_fee: u64) -> u128 {
        self.max_tip
            .min(self.max_fee.saturating_sub(u128::from(base_fee)))
    }

    fn replaceable_by(&self, other: &PoolTx, bump_percent: u128) -> bool {
        let bumped = |value: u128| value.saturating_mul(100 + bump_percent) / 100;
        other.max_fee >= bumped(self.max_fee) && other.max_tip >= bumped(self.max_tip)
    }
}

/// Counts of the pool's transactions (`txpool_status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Executable now: consecutive from their sender's account nonce.
    pub pending: usize,
    /// Waiting behind a nonce gap.
    pub queued: usize,
}

/// One sender's transactions (`txpool_content`).
#[derive(Debug, Clone, Default)]
pub struct SenderContent {
    /// Executable transactions, in nonce order.
    pub pending: Vec<Arc<PoolTx>>,
    /// Transactions behind a nonce gap, in nonce order.
    pub queued: Vec<Arc<PoolTx>>,
}

#[derive(Debug, Default)]
struct Inner {
    book: Book,
    next_arrival: u64,
    /// Hashes of the last [`PoolConfig::admission_log`] admissions, oldest first; the
    /// newest has arrival `next_arrival - 1`.
    admitted: VecDeque<B256>,
}

/// Pending transactions waiting for a block. Thread-safe; admission recovers signatures
/// on all cores and fills the sender cache, so the verify stage never recovers them again.
pub struct TxPool {
    config: PoolConfig,
    cache: Arc<SenderCache>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for TxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPool")
            .field("config", &self.config)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

fn state_error(error: impl std::fmt::Display) -> PoolError {
    PoolError::State(error.to_string())
}

/// The account's nonce and balance in `state` (zero for an account that does not exist).
fn account_of(state: &dyn StateReader, sender: Address) -> Result<(u64, U256), PoolError> {
    let account = state.account(sender).map_err(state_error)?;
    Ok(account.map_or((0, U256::ZERO), |a| (a.nonce, a.balance)))
}

/// Decodes and checks one submission without state: canonical bytes, EIP-155, chain id,
/// stateless rules and the signature.
fn recover(bytes: &[u8], chain_id: u64, cache: &SenderCache) -> Result<RecoveredTx, PoolError> {
    let tx = SignedTx::decode(bytes)?;
    if tx.chain_id().is_none() {
        return Err(PoolError::NotReplayProtected);
    }
    tx.check_stateless(Some(chain_id))?;
    let sender = match cache.get(&tx.hash()) {
        Some(sender) => sender,
        None => {
            let sender = tx.recover_sender()?;
            cache.insert(tx.hash(), sender);
            sender
        }
    };
    Ok(RecoveredTx { tx, sender })
}

impl TxPool {
    /// An empty pool that records every admitted sender in `cache`.
    pub fn new(config: PoolConfig, cache: Arc<SenderCache>) -> Self {
        // Every reason is exported from the start, so the label set is fixed.
        for label in DropReason::LABELS {
            metrics::counter!("stave_txpool_dropped_total", "reason" => label).increment(0);
        }
        Self {
            config,
            cache,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The pool's limits.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Admits raw signed transactions against committed `state` at `base_fee`: signatures
    /// are recovered on all cores (rayon's pool of the calling thread), then each is
    /// checked and queued in order. One result per input, the hash or the reason for
    /// refusal.
    pub fn add(
        &self,
        raw: &[Vec<u8>],
        state: &dyn StateReader,
        base_fee: u64,
    ) -> Vec<Result<B256, PoolError>> {
        let recovered: Vec<_> = raw
            .par_iter()
            .map(|bytes| recover(bytes, self.config.chain_id, &self.cache))
            .collect();
        self.admit_all(recovered, state, base_fee)
    }

    /// Admits one raw signed transaction as [`TxPool::add`] does, recovering its signature
    /// on the calling thread: for a caller with one transaction (a JSON-RPC submission)
    /// that must not wait on, nor load, a thread pool that imports blocks.
    pub fn add_one(
        &self,
        raw: &[u8],
        state: &dyn StateReader,
        base_fee: u64,
    ) -> Result<B256, PoolError> {
        let recovered = recover(raw, self.config.chain_id, &self.cache);
        self.admit_all(vec![recovered], state, base_fee)
            .pop()
            .expect("one result per submission")
    }

    /// Admits `tx` as sent by `sender`, taken as given and never recovered: a dev chain's
    /// impersonated account (`anvil_impersonateAccount`), whose transactions carry a
    /// placeholder signature. Every other check is [`TxPool::add_one`]'s. Only a dev node
    /// calls it: such a transaction means nothing to a node that recovers its sender.
    pub fn add_impersonated(
        &self,
        tx: SignedTx,
        sender: Address,
        state: &dyn StateReader,
        base_fee: u64,
    ) -> Result<B256, PoolError> {
        tx.check_stateless(Some(self.config.chain_id))?;
        self.admit_all(vec![Ok(RecoveredTx { tx, sender })], state, base_fee)
            .pop()
            .expect("one result per submission")
    }

    /// Checks and queues recovered submissions in order, and counts each outcome.
    fn admit_all(
        &self,
        recovered: Vec<Result<RecoveredTx, PoolError>>,
        state: &dyn StateReader,
        base_fee: u64,
    ) -> Vec<Result<B256, PoolError>> {
        // Read once for the batch: each sender's entries once, and only where a rule is
        // in force.
        let mut checker = Checker::new(state).map_err(state_error);
        let mut inner = self.inner.lock();
        inner.book.price_at(base_fee);
        let results: Vec<_> = recovered
            .into_iter()
            .map(|tx| {
                tx.and_then(|tx| {
                    let sender = tx.sender;
                    let checker = checker.as_mut().map_err(|error| error.clone())?;
                    let admitted = self.admit(&mut inner, tx, state, checker, base_fee);
                    inner.book.forget_if_empty(sender);
                    admitted
                })
            })
            .collect();
        Self::publish_size(&inner);
        drop(inner);
        for result in &results {
            match result {
                Ok(_) => metrics::counter!("stave_txpool_admitted_total").increment(1),
                Err(error) => {
                    metrics::counter!("stave_txpool_rejected_total", "reason" => error.label())
                        .increment(1);
                }
            }
        }
        results
    }

    fn admit(
        &self,
        inner: &mut Inner,
        tx: RecoveredTx,
        state: &dyn StateReader,
        permissions: &mut Checker<'_>,
        base_fee: u64,
    ) -> Result<B256, PoolError> {
        let hash = tx.tx.hash();
        if inner.book.by_hash.contains_key(&hash) {
            return Err(PoolError::AlreadyKnown);
        }
        let envelope = tx.tx.envelope();
        let (nonce, gas_limit, max_fee) = (
            envelope.nonce(),
            envelope.gas_limit(),
            envelope.max_fee_per_gas(),
        );
        if gas_limit > self.config.block_gas_limit {
            return Err(PoolError::GasLimitTooHigh);
        }
        if max_fee < u128::from(base_fee) {
            return Err(PoolError::FeeCapTooLow {
                fee_cap: max_fee,
                base_fee,
            });
        }
        if let Some(refusal) = permissions
            .check(tx.sender, envelope.to())
            .map_err(state_error)?
        {
            return Err(PoolError::Forbidden(refusal));
        }
        let (state_nonce, balance) = account_of(state, tx.sender)?;
        if nonce < state_nonce {
            return Err(PoolError::NonceTooLow {
                next: state_nonce,
                nonce,
            });
        }
        let cost = (U256::from(gas_limit) * U256::from(max_fee)).saturating_add(envelope.value());
        if cost > balance {
            return Err(PoolError::InsufficientFunds { balance, cost });
        }
        let candidate = Arc::new(PoolTx {
            max_tip: envelope.max_priority_fee_per_gas().unwrap_or(max_fee),
            tx,
            hash,
            nonce,
            max_fee,
            arrival: inner.next_arrival,
            cost,
            added: Instant::now(),
        });
        let sender = candidate.tx.sender;
        // The queue is brought to the account first, so the overdraft checks below see
        // the balance just read.
        inner
            .book
            .refresh(sender, state_nonce, balance, &HashSet::new());
        let queue = &inner.book.senders[&sender];
        let spent = queue.pending_cost;
        if let Some(existing) = queue.txs.get(&nonce).cloned() {
            // go-ethereum's overdraft check: a pending transaction's replacement must keep
            // the whole pending run affordable.
            if queue.is_pending(nonce) && cost > existing.cost {
                let bump = cost - existing.cost;
                if spent.saturating_add(bump) > balance {
                    return Err(PoolError::InsufficientFundsBumped {
                        balance,
                        queued: spent,
                        bump,
                    });
                }
            } else if !queue.is_pending(nonce) && spent.saturating_add(cost) > balance {
                return Err(PoolError::InsufficientFundsQueued {
                    balance,
                    queued: spent,
                    cost,
                });
            }
            if !existing.replaceable_by(&candidate, self.config.price_bump_percent) {
                return Err(PoolError::ReplacementUnderpriced);
            }
            inner.book.replace(candidate);
            inner
                .book
                .record_drop(existing.hash, DropReason::Replaced { by: hash });
        } else {
            if spent.saturating_add(cost) > balance {
                return Err(PoolError::InsufficientFundsQueued {
                    balance,
                    queued: spent,
                    cost,
                });
            }
            let next = queue.pending_end;
            if nonce > next + self.config.max_nonce_gap {
                return Err(PoolError::NonceTooHigh {
                    next,
                    nonce,
                    limit: self.config.max_nonce_gap,
                });
            }
            if queue.txs.len() >= self.config.max_per_sender {
                return Err(PoolError::SenderFull {
                    limit: self.config.max_per_sender,
                });
            }
            if inner.book.by_hash.len() >= self.config.max_txs {
                // It is executable if it extends the pending run (its cost was checked
                // against the balance with the run's just above).
                Self::make_room(&mut inner.book, &candidate, nonce == next)?;
            }
            inner.book.insert(candidate, state_nonce, balance);
        }
        inner.next_arrival += 1;
        inner.admitted.push_back(hash);
        if inner.admitted.len() > self.config.admission_log {
            inner.admitted.pop_front();
        }
        Ok(hash)
    }

    /// Makes room for `candidate` by evicting one transaction, through the price indexes
    /// (no sender is scanned): the cheapest queued transaction if there is one, which an
    /// executable newcomer always may take and a queued one only if it pays more; else,
    /// for an executable newcomer only, the cheapest last pending transaction of another
    /// sender if it pays less (dropping one from the middle of a run would strand the
    /// ones behind it). A queued transaction never evicts a pending one.
    fn make_room(book: &mut Book, candidate: &PoolTx, executable: bool) -> Result<(), PoolError> {
        let sender = candidate.tx.sender;
        let tip = book.tip(candidate);
        let victim = match book.cheapest_queued() {
            Some(victim) if executable || victim.tip < tip => victim,
            Some(_) => return Err(PoolError::PoolFull),
            None => match book.cheapest_last_pending(sender) {
                Some(victim) if victim.tip < tip && executable => victim,
                Some(victim) if victim.tip < tip => return Err(PoolError::FutureReplacePending),
                _ => return Err(PoolError::PoolFull),
            },
        };
        // Exported, so a scan creeping back into eviction shows on a dashboard.
        metrics::histogram!("stave_txpool_eviction_probes").record(book.probes() as f64);
        if let Some(evicted) = book.remove(victim.sender, victim.nonce) {
            book.record_drop(evicted.hash, DropReason::Evicted);
        }
        if victim.sender != sender {
            book.forget_if_empty(victim.sender);
        }
        Ok(())
    }

    fn publish_size(inner: &Inner) {
        let status = Self::status_of(inner);
        // The total is `sum(stave_txpool_transactions)`; a `_total` name is a counter's.
        metrics::gauge!("stave_txpool_transactions", "kind" => "pending")
            .set(status.pending as f64);
        metrics::gauge!("stave_txpool_transactions", "kind" => "queued").set(status.queued as f64);
    }

    /// Picks the transactions of the next block: executable ones only, each sender's in
    /// nonce order, the highest tip at `base_fee` first and earlier arrival on ties, until
    /// `max_txs` or `gas_limit` (by gas limit) is reached. They stay in the pool until
    /// [`TxPool::on_block`] sees them committed.
    pub fn select(&self, base_fee: u64, gas_limit: u64, max_txs: usize) -> Vec<RecoveredTx> {
        self.select_after(base_fee, gas_limit, max_txs, &HashMap::new())
    }

    /// [`TxPool::select`] for a block that follows blocks not yet committed (a consensus
    /// proposal on a notarized parent): a sender listed in `next_nonces` starts at that
    /// nonce, past the transactions those blocks already carry.
    pub fn select_after(
        &self,
        base_fee: u64,
        gas_limit: u64,
        max_txs: usize,
        next_nonces: &HashMap<Address, u64>,
    ) -> Vec<RecoveredTx> {
        /// A sender's next executable transaction, ordered for the max-heap.
        struct Head(Arc<PoolTx>, u128);
        impl PartialEq for Head {
            fn eq(&self, other: &Self) -> bool {
                self.cmp(other) == Ordering::Equal
            }
        }
        impl Eq for Head {}
        impl PartialOrd for Head {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Head {
            fn cmp(&self, other: &Self) -> Ordering {
                self.1
                    .cmp(&other.1)
                    .then_with(|| other.0.arrival.cmp(&self.0.arrival))
            }
        }

        let inner = self.inner.lock();
        // Only pending transactions: the balance covers each sender's run together.
        let head_of = |queue: &SenderQueue, nonce: u64| {
            queue
                .is_pending(nonce)
                .then(|| queue.txs.get(&nonce))
                .flatten()
                .filter(|tx| tx.max_fee >= u128::from(base_fee))
                .map(|tx| Head(tx.clone(), tx.effective_tip(base_fee)))
        };
        let mut heap: BinaryHeap<Head> = inner
            .book
            .pending_senders()
            .filter_map(|(sender, queue)| {
                let next = next_nonces.get(sender).copied().unwrap_or_default();
                head_of(queue, queue.state_nonce.max(next))
            })
            .collect();
        let mut selected = Vec::new();
        let mut gas_left = gas_limit;
        while let Some(Head(tx, _)) = heap.pop() {
            if selected.len() >= max_txs {
                break;
            }
            let gas = tx.tx.tx.envelope().gas_limit();
            if gas > gas_left {
                // Its sender's later nonces cannot go in without it.
                continue;
            }
            gas_left -= gas;
            if let Some(queue) = inner.book.senders.get(&tx.tx.sender)
                && let Some(next) = head_of(queue, tx.nonce + 1)
            {
                heap.push(next);
            }
            selected.push(tx.tx.clone());
        }
        selected
    }

    /// Updates the pool after a block was committed: drops the included transactions,
    /// every other transaction whose nonce the block used (reason `NonceUsed`), brings the
    /// balance of every sender the block touched (as sender or recipient) up to date
    /// (a pending run the balance no longer covers is cut, see [`TxPool::add`]), and drops
    /// queued transactions older than the queued lifetime (reason `Expired`). `state` is
    /// the committed state after the block.
    pub fn on_block(
        &self,
        included: &[RecoveredTx],
        state: &dyn StateReader,
    ) -> Result<(), PoolError> {
        let mut inner = self.inner.lock();
        let hashes: HashSet<B256> = included.iter().map(|tx| tx.tx.hash()).collect();
        let mut touched: Vec<Address> = included
            .iter()
            .flat_map(|tx| [Some(tx.sender), tx.tx.envelope().to()])
            .flatten()
            .filter(|address| inner.book.senders.contains_key(address))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        for sender in touched {
            let (nonce, balance) = account_of(state, sender)?;
            inner.book.refresh(sender, nonce, balance, &hashes);
            inner.book.forget_if_empty(sender);
        }
        self.expire_queued(&mut inner.book);
        Self::publish_size(&inner);
        Ok(())
    }

    /// Drops the transactions with these hashes (those absent are ignored), for `reason`;
    /// their senders' later transactions wait behind the gap.
    pub fn discard(&self, hashes: &[B256], reason: DropReason) {
        let mut inner = self.inner.lock();
        for hash in hashes {
            if let Some(tx) = inner.book.by_hash.get(hash).cloned()
                && inner.book.remove(tx.tx.sender, tx.nonce).is_some()
            {
                inner.book.record_drop(*hash, reason);
                inner.book.forget_if_empty(tx.tx.sender);
            }
        }
        Self::publish_size(&inner);
    }

    /// Drops every transaction, for `reason`.
    pub fn clear(&self, reason: DropReason) {
        let hashes: Vec<B256> = self.inner.lock().book.by_hash.keys().copied().collect();
        self.discard(&hashes, reason);
    }

    /// Drops the queued transactions admitted longer than the queued lifetime ago, oldest
    /// first, through the arrival index (no sender is scanned).
    fn expire_queued(&self, book: &mut Book) {
        let lifetime = self.config.queued_lifetime;
        while let Some(tx) = book.oldest_queued().cloned()
            && tx.added.elapsed() >= lifetime
        {
            book.remove(tx.tx.sender, tx.nonce);
            book.record_drop(tx.hash, DropReason::Expired);
            book.forget_if_empty(tx.tx.sender);
        }
    }

    /// The transaction with this hash, if it is in the pool.
    pub fn get(&self, hash: &B256) -> Option<Arc<PoolTx>> {
        self.inner.lock().book.by_hash.get(hash).cloned()
    }

    /// The position of the next admission: a pending-transaction filter installed now
    /// reports the transactions admitted from here on.
    pub fn admission_position(&self) -> u64 {
        self.inner.lock().next_arrival
    }

    /// Hashes of the transactions admitted from position `from` on (those still among the
    /// last [`PoolConfig::admission_log`]), oldest first, and the position after them.
    pub fn admitted_since(&self, from: u64) -> (Vec<B256>, u64) {
        let inner = self.inner.lock();
        let end = inner.next_arrival;
        let oldest = end - inner.admitted.len() as u64;
        let skip = from.saturating_sub(oldest) as usize;
        (inner.admitted.iter().skip(skip).copied().collect(), end)
    }

    /// The nonce `sender`'s next transaction should use, counting its pending transactions
    /// in the pool; `None` when the pool holds none of its transactions.
    pub fn pending_nonce(&self, sender: Address) -> Option<u64> {
        self.inner
            .lock()
            .book
            .senders
            .get(&sender)
            .map(|queue| queue.pending_end)
    }

    fn status_of(inner: &Inner) -> PoolStatus {
        let pending = inner.book.pending();
        PoolStatus {
            pending,
            queued: inner.book.by_hash.len() - pending,
        }
    }

    /// How many transactions the pool holds, pending and queued.
    pub fn len(&self) -> usize {
        self.inner.lock().book.by_hash.len()
    }

    /// True when the pool holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many transactions are pending and queued (kept counts, constant time).
    pub fn status(&self) -> PoolStatus {
        Self::status_of(&self.inner.lock())
    }

    /// How many transactions left the pool without being included since it started, per
    /// [`DropReason`] label, in [`DropReason::LABELS`] order.
    pub fn dropped(&self) -> [(&'static str, u64); DropReason::COUNT] {
        let drops = self.inner.lock().book.drops();
        std::array::from_fn(|i| (DropReason::LABELS[i], drops[i]))
    }

    /// How many index entries the last eviction looked at: at most two whatever the number
    /// of senders (the cheapest queued, or the two cheapest last pending ones). Each
    /// eviction also records it in the `stave_txpool_eviction_probes` histogram.
    pub fn last_eviction_probes(&self) -> usize {
        self.inner.lock().book.probes()
    }

    /// Checks the pool's invariants: every sender's pending transactions are consecutive
    /// from its account nonce and covered by its balance together, the indexes and counts
    /// agree with the queues, and the caps hold. For tests and fuzzing; the message names
    /// the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        let inner = self.inner.lock();
        inner.book.check()?;
        let held = inner.book.by_hash.len();
        if held > self.config.max_txs {
            return Err(format!("{held} held, cap {}", self.config.max_txs));
        }
        if let Some((sender, queue)) = inner
            .book
            .senders
            .iter()
            .find(|(_, queue)| queue.txs.len() > self.config.max_per_sender)
        {
            return Err(format!("{sender} holds {}", queue.txs.len()));
        }
        Ok(())
    }

    /// Every transaction the pool holds in its wire form, each sender's in nonce order:
    /// what a node offers a peer that connects. Encoded after the pool's lock is let go.
    pub fn encoded(&self) -> Vec<Vec<u8>> {
        self.encoded_before(u64::MAX, usize::MAX)
    }

    /// The transactions admitted before position `before` ([`TxPool::admission_position`])
    /// that the pool still holds, at most `max`, in their wire form, each sender's in
    /// nonce order: what a full node rebroadcasts when they stay unincluded.
    pub fn encoded_before(&self, before: u64, max: usize) -> Vec<Vec<u8>> {
        let held: Vec<Arc<PoolTx>> = {
            let inner = self.inner.lock();
            inner
                .book
                .senders
                .values()
                .flat_map(|queue| queue.txs.values())
                .filter(|tx| tx.arrival < before)
                .take(max)
                .cloned()
                .collect()
        };
        held.iter().map(|held| held.tx.tx.encoded()).collect()
    }

    /// Every sender's pending and queued transactions.
    pub fn content(&self) -> BTreeMap<Address, SenderContent> {
        let inner = self.inner.lock();
        inner
            .book
            .senders
            .iter()
            .map(|(sender, queue)| {
                let mut content = SenderContent::default();
                for (nonce, tx) in &queue.txs {
                    if queue.is_pending(*nonce) {
                        content.pending.push(tx.clone());
                    } else {
                        content.queued.push(tx.clone());
                    }
                }
                (*sender, content)
            })
            .collect()
    }
}
