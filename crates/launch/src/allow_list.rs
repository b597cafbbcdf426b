//! The P2P allow-list as the chain's governance contract has it (docs/governance.md):
//! the validators' node ids (derived from their consensus keys) and the admitted nodes'
//! ids, read from the committed state at the start and again after each block in which
//! the contract logged anything, so a node the committee removes is disconnected within
//! the block that removed it. On a validator the validators of the epoch it is in stay
//! admitted until the epoch ends: a validator removed on chain still votes until then.
//!
//! The config's `[p2p] allowed` list only bootstraps: it stands until the state is read,
//! and for good on a chain without the contract.

use std::{collections::HashSet, sync::Arc};

use stave_consensus::{EpochStart, ValidatorSets, validator_node_id};
use stave_governance::GOVERNANCE_ADDRESS;
use stave_net::{Network, NodeId, tls::ed25519_node_id};
use stave_node::{ChainView, Produced};
use tokio::sync::{broadcast, watch};

/// A validator's epochs: their sets and the epoch it is in.
pub(crate) struct EpochSets {
    /// Each epoch's validators.
    pub sets: Arc<ValidatorSets>,
    /// The epoch the node is in.
    pub starts: watch::Receiver<EpochStart>,
}

/// Keeps `network`'s allow-list to the governance contract's, reading `view` at the
/// start, after each block in `heads` that the contract logged in, and (with `epochs`) at
/// each new epoch. Returns when `heads` closes (the node stops).
pub(crate) async fn follow(
    view: Arc<ChainView<'static>>,
    network: Network,
    mut heads: broadcast::Receiver<Arc<Produced>>,
    mut epochs: Option<EpochSets>,
) {
    let mut applied = None;
    refresh(&view, &network, epochs.as_ref(), &mut applied);
    loop {
        let epoch_changed = async {
            match epochs.as_mut() {
                Some(epochs) => epochs.starts.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            head = heads.recv() => match head {
                Ok(produced) if !logged_by_governance(&produced) => continue,
                // A missed block may have been one of the contract's.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            open = epoch_changed => if !open {
                epochs = None;
            },
        }
        refresh(&view, &network, epochs.as_ref(), &mut applied);
    }
}

/// True if the contract logged anything in the block: every change it applies does.
fn logged_by_governance(produced: &Produced) -> bool {
    produced.receipts.iter().any(|receipt| {
        receipt
            .receipt
            .logs
            .iter()
            .any(|log| log.address == GOVERNANCE_ADDRESS)
    })
}

/// Reads the allow-list and, if it differs from the one `applied` last, applies it.
fn refresh(
    view: &ChainView<'static>,
    network: &Network,
    epochs: Option<&EpochSets>,
    applied: &mut Option<HashSet<NodeId>>,
) {
    let Some(allowed) = governed(view, epochs) else {
        return;
    };
    if applied.as_ref() == Some(&allowed) {
        return;
    }
    let closed = network.set_allowed(allowed.clone());
    tracing::info!(
        admitted = allowed.len(),
        disconnected = closed,
        "P2P allow-list from the governance contract"
    );
    metrics::gauge!("stave_net_allowed_peers").set(allowed.len() as f64);
    *applied = Some(allowed);
}

/// The allow-list the contract gives in the committed state, with the validators of the
/// node's epoch; `None` on a chain without the contract (or if the state cannot be read,
/// which is logged: the list in force stays).
fn governed(view: &ChainView<'static>, epochs: Option<&EpochSets>) -> Option<HashSet<NodeId>> {
    let read = match view.with_state(None, |state, _| stave_governance::admitted(state)) {
        Ok(read) => read.map_err(|error| error.to_string()),
        Err(error) => Err(error.to_string()),
    };
    let admitted = match read {
        Ok(admitted) => admitted?,
        Err(error) => {
            tracing::error!(%error, "reading the governance contract's allow-list");
            return None;
        }
    };
    let mut allowed: HashSet<NodeId> = admitted
        .validators
        .iter()
        .map(|key| ed25519_node_id(&key.0))
        .chain(admitted.nodes.iter().map(|id| id.0))
        .collect();
    if let Some(epochs) = epochs {
        let epoch = epochs.starts.borrow().epoch;
        if let Some(set) = epochs.sets.get(epoch) {
            allowed.extend(set.iter().map(validator_node_id));
        }
    }
    Some(allowed)
}
