//! Local nonce tracking per account, so a sender can sign ahead without asking the node
//! for every nonce, and resynchronisation when the node's view and ours part.
//!
//! The manager knows no RPC: the caller feeds it the node's pending transaction count
//! (`eth_getTransactionCount(address, "pending")`, see [`crate::RpcClient`]) and tells it
//! what the node did with each transaction. Two things make the views part in a long run:
//! a refusal for a nonce reason (another client used the account, or a tx was lost), and
//! a gap: the pool evicted a transaction it had accepted, so every later one waits
//! forever. Both are repaired the same way: the next nonce becomes the node's pending
//! count, and the caller re-signs from there ([`NonceAction::Resynced`]).

use std::collections::{BTreeSet, HashMap};

use alloy_primitives::Address;
use parking_lot::Mutex;

use crate::error::SdkError;

/// What one account's nonces look like from here.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct AccountNonces {
    /// The next nonce to hand out.
    next: u64,
    /// Every nonce below this was accepted by the node (`accepted <= next`).
    accepted: u64,
    /// Nonces in `accepted + 1..next` accepted out of order (sent over several
    /// connections, a later one can arrive first); they join `accepted` once it reaches
    /// them, so a missing one in flight is not taken for a gap.
    accepted_ahead: BTreeSet<u64>,
    /// The node refused a nonce: hand out none until [`NonceManager::reconcile`].
    stale: bool,
}

impl AccountNonces {
    /// Starting at the node's pending count: everything below it is the node's.
    fn at(pending: u64) -> Self {
        Self {
            next: pending,
            accepted: pending,
            ..Self::default()
        }
    }
}

/// The outcome of comparing the node's pending count with the local state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceAction {
    /// The views agree: keep going.
    InSync,
    /// The next nonce moved from `from` to `to`: transactions signed with nonces `>= to`
    /// and not yet accepted must be re-signed (or dropped, if `to > from`).
    Resynced {
        /// The next nonce before.
        from: u64,
        /// The next nonce now: the node's pending count.
        to: u64,
    },
}

/// Next nonces of many accounts; shareable between tasks (one short lock per call).
#[derive(Debug, Default)]
pub struct NonceManager {
    accounts: Mutex<HashMap<Address, AccountNonces>>,
}

impl NonceManager {
    /// An empty manager: every account must be [`NonceManager::init`]ed first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking `address` from the node's pending count (or resets it there).
    pub fn init(&self, address: Address, pending: u64) {
        self.accounts
            .lock()
            .insert(address, AccountNonces::at(pending));
    }

    /// Hands out the next `count` nonces of `address` as a range, for signing a batch.
    pub fn reserve(&self, address: Address, count: u64) -> Result<std::ops::Range<u64>, SdkError> {
        let mut accounts = self.accounts.lock();
        let account = accounts
            .get_mut(&address)
            .ok_or(SdkError::UnknownAccount(address))?;
        if account.stale {
            return Err(SdkError::NonceStale(address));
        }
        let start = account.next;
        account.next += count;
        Ok(start..account.next)
    }

    /// Hands out the next nonce of `address`.
    pub fn next(&self, address: Address) -> Result<u64, SdkError> {
        Ok(self.reserve(address, 1)?.start)
    }

    /// The node accepted the transaction of `address` with `nonce`.
    pub fn accepted(&self, address: Address, nonce: u64) {
        let mut accounts = self.accounts.lock();
        let Some(account) = accounts.get_mut(&address) else {
            return;
        };
        if nonce != account.accepted {
            // Ahead of the prefix: remember it. Below it or never handed out (another
            // client's transaction): nothing to learn.
            if nonce > account.accepted && nonce < account.next {
                account.accepted_ahead.insert(nonce);
            }
            return;
        }
        account.accepted += 1;
        while account.accepted_ahead.remove(&account.accepted) {
            account.accepted += 1;
        }
    }

    /// The node refused a transaction of `address` for a nonce reason
    /// ([`SdkError::is_nonce_error`]): no nonce is handed out until the next
    /// [`NonceManager::reconcile`].
    pub fn refused(&self, address: Address) {
        if let Some(account) = self.accounts.lock().get_mut(&address) {
            account.stale = true;
        }
    }

    /// Compares the node's `pending` count for `address` with the local state and resyncs
    /// when they part: after a refusal, when the node lacks a transaction it accepted (an
    /// eviction left a gap), or when the node is ahead (another client used the account).
    /// A node behind only by transactions still in flight (handed out, not yet accepted)
    /// is in sync. An unknown account is started at `pending`.
    pub fn reconcile(&self, address: Address, pending: u64) -> NonceAction {
        let mut accounts = self.accounts.lock();
        let Some(account) = accounts.get_mut(&address) else {
            accounts.insert(address, AccountNonces::at(pending));
            return NonceAction::InSync;
        };
        let parted = account.stale || pending < account.accepted || pending > account.next;
        if !parted {
            return NonceAction::InSync;
        }
        let from = account.next;
        *account = AccountNonces::at(pending);
        NonceAction::Resynced { from, to: pending }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Address = Address::repeat_byte(0xa);

    fn manager(pending: u64) -> NonceManager {
        let manager = NonceManager::new();
        manager.init(A, pending);
        manager
    }

    #[test]
    fn hands_out_consecutive_nonces_from_the_pending_count() {
        let m = manager(5);
        assert_eq!(m.next(A), Ok(5));
        assert_eq!(m.reserve(A, 3), Ok(6..9));
        assert_eq!(m.next(A), Ok(9));
    }

    #[test]
    fn refuses_an_account_never_initialised() {
        let m = NonceManager::new();
        assert_eq!(m.next(A), Err(SdkError::UnknownAccount(A)));
    }

    #[test]
    fn in_flight_transactions_are_not_a_gap() {
        let m = manager(0);
        m.reserve(A, 10).expect("known");
        for nonce in [0, 1, 2, 3, 5, 6] {
            m.accepted(A, nonce);
        }
        // The node has 0..4 (and 5, 6 queued) and has not seen 4 or 7..10 yet.
        assert_eq!(m.reconcile(A, 4), NonceAction::InSync);
        assert_eq!(m.reconcile(A, 10), NonceAction::InSync);
        assert_eq!(m.next(A), Ok(10));
    }

    #[test]
    fn an_evicted_accepted_transaction_is_a_gap_and_rewinds() {
        let m = manager(0);
        m.reserve(A, 10).expect("known");
        for nonce in 0..8 {
            m.accepted(A, nonce);
        }
        // Nonce 6 was evicted: the node's pending count stops at 6.
        assert_eq!(m.reconcile(A, 6), NonceAction::Resynced { from: 10, to: 6 });
        assert_eq!(m.next(A), Ok(6));
    }

    #[test]
    fn out_of_order_acceptances_join_the_prefix() {
        let m = manager(0);
        m.reserve(A, 4).expect("known");
        for nonce in [3, 1, 2, 0] {
            m.accepted(A, nonce);
        }
        // All four were accepted: a pending count of 3 means the node lost nonce 3.
        assert_eq!(m.reconcile(A, 3), NonceAction::Resynced { from: 4, to: 3 });
    }

    #[test]
    fn a_refusal_stops_the_account_until_reconciled() {
        let m = manager(0);
        m.reserve(A, 4).expect("known");
        m.refused(A);
        assert_eq!(m.next(A), Err(SdkError::NonceStale(A)));
        // Even a pending count equal to ours resyncs (and clears the refusal).
        assert_eq!(m.reconcile(A, 4), NonceAction::Resynced { from: 4, to: 4 });
        assert_eq!(m.next(A), Ok(4));
    }

    #[test]
    fn another_client_moving_ahead_advances_us() {
        let m = manager(0);
        m.reserve(A, 2).expect("known");
        assert_eq!(m.reconcile(A, 7), NonceAction::Resynced { from: 2, to: 7 });
        assert_eq!(m.next(A), Ok(7));
    }

    #[test]
    fn acceptance_never_runs_past_what_was_handed_out() {
        let m = manager(0);
        m.reserve(A, 2).expect("known");
        // An acceptance report for a nonce we never handed out (another client's tx).
        m.accepted(A, 9);
        assert_eq!(m.reconcile(A, 2), NonceAction::InSync);
    }

    #[test]
    fn reconcile_starts_an_unknown_account() {
        let m = NonceManager::new();
        assert_eq!(m.reconcile(A, 3), NonceAction::InSync);
        assert_eq!(m.next(A), Ok(3));
    }
}
