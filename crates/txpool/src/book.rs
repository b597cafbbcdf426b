//! The pool's bookkeeping: each sender's transactions by nonce, which of them are pending,
//! and the pool-wide indexes that keep eviction, expiry and counting independent of how
//! many senders the pool holds.
//!
//! Invariants (checked by [`Book::check`]):
//! - a sender's transactions all have nonces at or above its account nonce;
//! - its pending transactions are the run of consecutive nonces from the account nonce
//!   that its balance covers together (go-ethereum's cumulative cost: the sum of
//!   `gas * fee cap + value`); the run is as long as the balance allows;
//! - every other transaction is queued, and is in the queued indexes (by price, by
//!   arrival); the last pending transaction of each sender is in the pending index; no
//!   other transaction is in an index.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use alloy_primitives::{Address, B256, U256};

use crate::{error::DropReason, pool::PoolTx};

/// Eviction order: the lowest tip first, and among equal tips the latest arrival.
type PriceKey = (u128, Reverse<u64>);

/// One sender's transactions by nonce, the account they start from, and how far its
/// pending run reaches.
#[derive(Debug)]
pub(crate) struct SenderQueue {
    /// The account's nonce in committed state, as last read.
    pub state_nonce: u64,
    /// The account's balance in committed state, as last read.
    pub balance: U256,
    /// Its transactions by nonce.
    pub txs: BTreeMap<u64, Arc<PoolTx>>,
    /// The nonce after its last pending transaction (the account nonce when none is).
    pub pending_end: u64,
    /// What its pending transactions may cost together (never above `balance`).
    pub pending_cost: U256,
}

impl SenderQueue {
    fn new(state_nonce: u64, balance: U256) -> Self {
        Self {
            state_nonce,
            balance,
            txs: BTreeMap::new(),
            pending_end: state_nonce,
            pending_cost: U256::ZERO,
        }
    }

    /// True when its transaction with this nonce is executable now.
    pub fn is_pending(&self, nonce: u64) -> bool {
        (self.state_nonce..self.pending_end).contains(&nonce)
    }

    fn last_pending(&self) -> Option<&Arc<PoolTx>> {
        (self.pending_end > self.state_nonce)
            .then(|| self.txs.get(&(self.pending_end - 1)))
            .flatten()
    }

    /// Points the pending index at its last pending transaction, `before` being the one it
    /// pointed at.
    fn relink(&self, before: Option<Arc<PoolTx>>, index: &mut Index) {
        let after = self.last_pending();
        if before.as_ref().map(|tx| tx.arrival) != after.map(|tx| tx.arrival) {
            index.set_last(before.as_deref(), after.map(|tx| &**tx));
        }
    }

    /// Extends the pending run over the transactions that follow it, while the balance
    /// covers them.
    fn promote(&mut self, index: &mut Index) {
        let before = self.last_pending().cloned();
        while let Some(tx) = self.txs.get(&self.pending_end) {
            let total = self.pending_cost.saturating_add(tx.cost);
            if total > self.balance {
                break;
            }
            index.unqueue(tx);
            index.pending += 1;
            self.pending_cost = total;
            self.pending_end += 1;
        }
        self.relink(before, index);
    }

    /// Moves its pending transactions from `nonce` on back to queued.
    fn demote_from(&mut self, nonce: u64, index: &mut Index) {
        if nonce >= self.pending_end {
            return;
        }
        let before = self.last_pending().cloned();
        let mut cost = U256::ZERO;
        for tx in self.txs.range(nonce..self.pending_end).map(|(_, tx)| tx) {
            cost += tx.cost;
            index.queue(tx);
            index.pending -= 1;
        }
        self.pending_cost -= cost;
        self.pending_end = nonce.max(self.state_nonce);
        self.relink(before, index);
    }

    /// Makes the pending run match the balance: shortened to what the balance covers when
    /// the run costs more, extended when it covers more. Returns where a shortened run
    /// ends.
    fn rebalance(&mut self, index: &mut Index) -> Option<u64> {
        if self.pending_cost <= self.balance {
            self.promote(index);
            return None;
        }
        let mut total = U256::ZERO;
        let cut = self
            .txs
            .range(self.state_nonce..self.pending_end)
            .find(|(_, tx)| {
                total = total.saturating_add(tx.cost);
                total > self.balance
            })
            .map_or(self.pending_end, |(nonce, _)| *nonce);
        self.demote_from(cut, index);
        Some(cut)
    }
}

/// The pool-wide indexes.
#[derive(Debug, Default)]
struct Index {
    /// The base fee the price keys are computed at.
    priced_at: u64,
    /// How many transactions are pending.
    pending: usize,
    queued_by_price: BTreeMap<PriceKey, (Address, u64)>,
    queued_by_arrival: BTreeMap<u64, (Address, u64)>,
    /// Each sender's last pending transaction: the only pending one eviction may take
    /// (taking an earlier one would strand those behind it).
    last_pending: BTreeMap<PriceKey, (Address, u64)>,
}

impl Index {
    fn key(&self, tx: &PoolTx) -> PriceKey {
        (tx.effective_tip(self.priced_at), Reverse(tx.arrival))
    }

    fn queue(&mut self, tx: &PoolTx) {
        let at = (tx.tx.sender, tx.nonce);
        self.queued_by_price.insert(self.key(tx), at);
        self.queued_by_arrival.insert(tx.arrival, at);
    }

    fn unqueue(&mut self, tx: &PoolTx) {
        self.queued_by_price.remove(&self.key(tx));
        self.queued_by_arrival.remove(&tx.arrival);
    }

    fn set_last(&mut self, before: Option<&PoolTx>, after: Option<&PoolTx>) {
        if let Some(tx) = before {
            self.last_pending.remove(&self.key(tx));
        }
        if let Some(tx) = after {
            self.last_pending
                .insert(self.key(tx), (tx.tx.sender, tx.nonce));
        }
    }
}

/// A transaction eviction may take: its sender, nonce and tip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Victim {
    /// Its sender.
    pub sender: Address,
    /// Its nonce.
    pub nonce: u64,
    /// Its tip at the pricing base fee.
    pub tip: u128,
}

/// Every transaction of the pool, by hash and by sender, with the indexes.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// Every transaction by hash.
    pub by_hash: HashMap<B256, Arc<PoolTx>>,
    /// Every sender's queue (none empty once an operation is over).
    pub senders: HashMap<Address, SenderQueue>,
    index: Index,
    drops: [u64; DropReason::COUNT],
    probes: usize,
}

impl Book {
    /// How many transactions are pending.
    pub fn pending(&self) -> usize {
        self.index.pending
    }

    /// How many transactions were dropped, per reason (in [`DropReason::LABELS`] order).
    pub fn drops(&self) -> [u64; DropReason::COUNT] {
        self.drops
    }

    /// How many index entries the last eviction looked at.
    pub fn probes(&self) -> usize {
        self.probes
    }

    /// Counts and logs a drop.
    pub fn record_drop(&mut self, hash: B256, reason: DropReason) {
        record(&mut self.drops, hash, reason);
    }

    /// Prices the indexes at `base_fee` (the tip a transaction pays depends on it).
    pub fn price_at(&mut self, base_fee: u64) {
        if self.index.priced_at == base_fee {
            return;
        }
        let Self { senders, index, .. } = self;
        index.priced_at = base_fee;
        let index_ref = &*index;
        let reprice = |by_price: &BTreeMap<PriceKey, (Address, u64)>| {
            by_price
                .values()
                .map(|&(sender, nonce)| {
                    (
                        index_ref.key(&senders[&sender].txs[&nonce]),
                        (sender, nonce),
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        let queued = reprice(&index.queued_by_price);
        let last = reprice(&index.last_pending);
        index.queued_by_price = queued;
        index.last_pending = last;
    }

    /// The tip `tx` pays at the pricing base fee.
    pub fn tip(&self, tx: &PoolTx) -> u128 {
        tx.effective_tip(self.index.priced_at)
    }

    /// Brings `sender`'s queue (created when absent) to its account in committed state:
    /// transactions below `nonce` leave (counted as `NonceUsed` unless `included`), the
    /// pending run is cut where `balance` no longer covers it (the rest is queued, and
    /// what alone costs more than the balance is dropped as `Unaffordable`) or extended
    /// where it covers more.
    pub fn refresh(
        &mut self,
        sender: Address,
        nonce: u64,
        balance: U256,
        included: &HashSet<B256>,
    ) {
        let Self {
            by_hash,
            senders,
            index,
            drops,
            ..
        } = self;
        let queue = senders
            .entry(sender)
            .or_insert_with(|| SenderQueue::new(nonce, balance));
        if nonce > queue.state_nonce {
            let before = queue.last_pending().cloned();
            while let Some(entry) = queue.txs.first_entry()
                && *entry.key() < nonce
            {
                let tx = entry.remove();
                if tx.nonce < queue.pending_end {
                    queue.pending_cost -= tx.cost;
                    index.pending -= 1;
                } else {
                    index.unqueue(&tx);
                }
                by_hash.remove(&tx.hash);
                if !included.contains(&tx.hash) {
                    record(drops, tx.hash, DropReason::NonceUsed);
                }
            }
            queue.state_nonce = nonce;
            queue.pending_end = queue.pending_end.max(nonce);
            queue.relink(before, index);
        }
        queue.balance = balance;
        if let Some(cut) = queue.rebalance(index) {
            let unpayable: Vec<u64> = queue
                .txs
                .range(cut..)
                .filter(|(_, tx)| tx.cost > balance)
                .map(|(nonce, _)| *nonce)
                .collect();
            for nonce in unpayable {
                if let Some(tx) = queue.txs.remove(&nonce) {
                    index.unqueue(&tx);
                    by_hash.remove(&tx.hash);
                    record(drops, tx.hash, DropReason::Unaffordable);
                }
            }
        }
    }

    /// Adds `tx` at a nonce its sender does not use yet (the sender's queue starts at
    /// `state_nonce` and `balance` when absent); it is pending if it extends the run.
    pub fn insert(&mut self, tx: Arc<PoolTx>, state_nonce: u64, balance: U256) {
        let Self {
            by_hash,
            senders,
            index,
            ..
        } = self;
        by_hash.insert(tx.hash, tx.clone());
        let queue = senders
            .entry(tx.tx.sender)
            .or_insert_with(|| SenderQueue::new(state_nonce, balance));
        index.queue(&tx);
        queue.txs.insert(tx.nonce, tx);
        queue.promote(index);
    }

    /// Puts `tx` in place of its sender's transaction with the same nonce, and returns
    /// that one (`None`, changing nothing, when there is none).
    pub fn replace(&mut self, tx: Arc<PoolTx>) -> Option<Arc<PoolTx>> {
        let Self {
            by_hash,
            senders,
            index,
            ..
        } = self;
        let queue = senders.get_mut(&tx.tx.sender)?;
        let old = queue.txs.get(&tx.nonce)?.clone();
        queue.txs.insert(tx.nonce, tx.clone());
        by_hash.remove(&old.hash);
        by_hash.insert(tx.hash, tx.clone());
        if queue.is_pending(tx.nonce) {
            queue.pending_cost = (queue.pending_cost - old.cost).saturating_add(tx.cost);
            if tx.nonce + 1 == queue.pending_end {
                index.set_last(Some(&old), Some(&tx));
            }
        } else {
            index.unqueue(&old);
            index.queue(&tx);
        }
        queue.rebalance(index);
        Some(old)
    }

    /// Takes out `sender`'s transaction with this nonce; the pending ones behind it become
    /// queued. The sender's queue stays, even empty, until [`Book::forget_if_empty`].
    pub fn remove(&mut self, sender: Address, nonce: u64) -> Option<Arc<PoolTx>> {
        let Self {
            by_hash,
            senders,
            index,
            ..
        } = self;
        let queue = senders.get_mut(&sender)?;
        if !queue.txs.contains_key(&nonce) {
            return None;
        }
        queue.demote_from(nonce, index);
        let tx = queue.txs.remove(&nonce)?;
        index.unqueue(&tx);
        by_hash.remove(&tx.hash);
        Some(tx)
    }

    /// Forgets `sender`'s queue if it holds no transaction.
    pub fn forget_if_empty(&mut self, sender: Address) {
        if self
            .senders
            .get(&sender)
            .is_some_and(|queue| queue.txs.is_empty())
        {
            self.senders.remove(&sender);
        }
    }

    /// The cheapest queued transaction: the first eviction takes.
    pub fn cheapest_queued(&mut self) -> Option<Victim> {
        self.probes = 0;
        let (&(tip, _), &(sender, nonce)) = self.index.queued_by_price.first_key_value()?;
        self.probes = 1;
        Some(Victim { sender, nonce, tip })
    }

    /// The cheapest last pending transaction of a sender other than `except` (evicting
    /// `except`'s own would leave its newcomer behind a gap). Looks at two entries at
    /// most: the index holds one per sender.
    pub fn cheapest_last_pending(&mut self, except: Address) -> Option<Victim> {
        let mut probes = 0;
        let found = self
            .index
            .last_pending
            .iter()
            .inspect(|_| probes += 1)
            .find(|(_, (sender, _))| *sender != except)
            .map(|(&(tip, _), &(sender, nonce))| Victim { sender, nonce, tip });
        self.probes += probes;
        found
    }

    /// The queued transaction admitted first.
    pub fn oldest_queued(&self) -> Option<&Arc<PoolTx>> {
        let (_, (sender, nonce)) = self.index.queued_by_arrival.first_key_value()?;
        self.senders.get(sender)?.txs.get(nonce)
    }

    /// The senders with pending transactions.
    pub fn pending_senders(&self) -> impl Iterator<Item = (&Address, &SenderQueue)> {
        self.index
            .last_pending
            .values()
            .filter_map(|(sender, _)| self.senders.get_key_value(sender))
    }

    /// Checks every invariant in the module documentation; the message names the first
    /// that fails.
    pub fn check(&self) -> Result<(), String> {
        let mut held = 0;
        let mut pending = 0;
        let mut last = BTreeMap::new();
        for (sender, queue) in &self.senders {
            if queue.txs.is_empty() {
                return Err(format!("{sender}: an empty queue is kept"));
            }
            held += queue.txs.len();
            let mut cost = U256::ZERO;
            for nonce in queue.state_nonce..queue.pending_end {
                let tx = queue
                    .txs
                    .get(&nonce)
                    .ok_or(format!("{sender}: pending run has a gap at nonce {nonce}"))?;
                cost += tx.cost;
                pending += 1;
            }
            if cost != queue.pending_cost || cost > queue.balance {
                return Err(format!(
                    "{sender}: pending cost {} (kept {}) vs balance {}",
                    cost, queue.pending_cost, queue.balance
                ));
            }
            if let Some(next) = queue.txs.get(&queue.pending_end)
                && cost.saturating_add(next.cost) <= queue.balance
            {
                return Err(format!("{sender}: nonce {} should be pending", next.nonce));
            }
            for (nonce, tx) in &queue.txs {
                let queued = self.index.queued_by_arrival.get(&tx.arrival);
                let in_pending_run = queue.is_pending(*nonce);
                if *nonce < queue.state_nonce
                    || tx.nonce != *nonce
                    || tx.tx.sender != *sender
                    || self.by_hash.get(&tx.hash).map(|t| t.arrival) != Some(tx.arrival)
                    || (queued == Some(&(*sender, *nonce))) == in_pending_run
                    || self.index.queued_by_price.get(&self.index.key(tx))
                        != queued.filter(|_| !in_pending_run)
                {
                    return Err(format!("{sender}: nonce {nonce} is misfiled"));
                }
            }
            if let Some(tx) = queue.last_pending() {
                last.insert(self.index.key(tx), (*sender, tx.nonce));
            }
        }
        if held != self.by_hash.len() {
            return Err(format!(
                "{held} held by sender, {} by hash",
                self.by_hash.len()
            ));
        }
        let queued = held - pending;
        if pending != self.index.pending
            || queued != self.index.queued_by_price.len()
            || queued != self.index.queued_by_arrival.len()
            || last != self.index.last_pending
        {
            return Err(format!(
                "indexes disagree: {pending} pending (counted {}), {queued} queued (indexed {} by price, {} by arrival)",
                self.index.pending,
                self.index.queued_by_price.len(),
                self.index.queued_by_arrival.len()
            ));
        }
        Ok(())
    }
}

fn record(drops: &mut [u64; DropReason::COUNT], hash: B256, reason: DropReason) {
    drops[reason.index()] += 1;
    tracing::debug!(%hash, reason = reason.label(), "txpool dropped a transaction");
    metrics::counter!("stave_txpool_dropped_total", "reason" => reason.label()).increment(1);
}
