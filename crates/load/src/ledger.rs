//! The state of a run its tasks share: every transaction and what became of it.

use std::{collections::HashMap, sync::Arc, time::Duration, time::Instant};

use alloy_consensus::TypedTransaction;
use parking_lot::Mutex;
use stave_primitives::{Address, B256};
use stave_sdk::{GasLimits, LocalSigner, NonceManager, RawTx, Targets, TxBuilder, Workload};

use crate::progress::Progress;

/// One transaction of the load and what became of it.
#[derive(Debug)]
pub(crate) struct Item {
    /// Index of its sender.
    pub sender: usize,
    /// Its current nonce (a repair may renumber it).
    pub nonce: u64,
    /// Its current signed form.
    pub raw: RawTx,
    /// When it was last sent, since the start of sending.
    pub sent_at: Option<Duration>,
    /// When it was first seen in a block, since the start of sending.
    pub included_at: Option<Duration>,
    /// What the node said.
    pub fate: Fate,
}

/// What the node said to a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fate {
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
pub(crate) struct Ledger {
    pub items: Vec<Item>,
    /// Every hash an item was ever signed with (a renumbered item keeps its old hash
    /// here too, in case the old transaction makes it into a block after all).
    pub by_hash: HashMap<B256, usize>,
    /// Items seen included.
    pub included: u64,
    /// When the last batch of the send phase got its answer.
    pub send_end: Duration,
}

impl Ledger {
    /// A ledger of `items`, none sent yet.
    pub fn new(items: Vec<Item>) -> Self {
        let by_hash = items
            .iter()
            .enumerate()
            .map(|(index, item)| (item.raw.hash, index))
            .collect();
        Ledger {
            items,
            by_hash,
            included: 0,
            send_end: Duration::ZERO,
        }
    }
}

/// Makes the load's transactions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Maker {
    pub workload: Workload,
    pub targets: Targets,
    pub builder: TxBuilder,
    /// The gas limits estimated on the node.
    pub gas: GasLimits,
}

impl Maker {
    /// Transaction `index` of the load, with `nonce` (its sender is implied by the caller).
    pub fn build(&self, index: usize, nonce: u64) -> TypedTransaction {
        self.workload
            .tx(&self.builder, &self.targets, &self.gas, index as u64, nonce)
    }
}

/// The state of a run shared by its tasks.
pub(crate) struct Run {
    /// Time zero: the first send.
    pub start: Instant,
    pub ledger: Mutex<Ledger>,
    pub senders: Vec<LocalSigner>,
    pub nonces: NonceManager,
    pub maker: Maker,
    pub progress: Arc<dyn Progress>,
}

impl Run {
    /// The address of sender `sender`.
    pub fn address(&self, sender: usize) -> Address {
        self.senders[sender].address()
    }
}

/// How many of `txs` transactions sender `sender` of `accounts` sends (tx `i` is sender
/// `i % accounts`'s).
pub(crate) fn txs_of(sender: usize, accounts: usize, txs: usize) -> usize {
    txs / accounts + usize::from(sender < txs % accounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txs_are_shared_round_robin() {
        let counts: Vec<usize> = (0..3).map(|s| txs_of(s, 3, 10)).collect();
        assert_eq!(counts, [4, 3, 3]);
    }
}
