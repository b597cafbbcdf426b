//! Per-peer queues bounded twice: by frames and by bytes. A frame count alone lets a
//! peer hold `frames × largest frame` of this node's memory (a thousand block-sized
//! frames); a byte budget caps what any one peer can pin.
//!
//! A frame in a queue carries permits of its queue's [`Budget`], one per byte (a frame
//! larger than the whole budget takes all of it, so it still goes, alone); they are
//! given back when it leaves: once written for a send queue ([`Lane`]), once the module
//! it was routed to drops it for a peer's received frames.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc};

/// Bytes one peer may have queued in one place.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    permits: Arc<Semaphore>,
    /// The budget in bytes (and permits), at most `u32::MAX`.
    limit: u32,
}

/// Why a frame was not queued.
pub(super) enum Refused {
    /// The queue holds its most frames or bytes.
    Full,
    /// The queue's reader stopped: the connection is closing.
    Closed,
}

impl Budget {
    /// A budget of `bytes` (at least 1, at most `u32::MAX`).
    pub fn new(bytes: usize) -> Self {
        let limit = u32::try_from(bytes.min(Semaphore::MAX_PERMITS))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            permits: Arc::new(Semaphore::new(limit as usize)),
            limit,
        }
    }

    /// Permits `len` bytes take: as many, or the whole budget for more than it.
    fn cost(&self, len: usize) -> u32 {
        u32::try_from(len).map_or(self.limit, |len| len.clamp(1, self.limit))
    }

    /// Room for `len` bytes, if there is some now.
    pub fn try_take(&self, len: usize) -> Result<OwnedSemaphorePermit, Refused> {
        self.permits
            .clone()
            .try_acquire_many_owned(self.cost(len))
            .map_err(|error| match error {
                TryAcquireError::NoPermits => Refused::Full,
                TryAcquireError::Closed => Refused::Closed,
            })
    }

    /// Room for `len` bytes, waiting for it.
    async fn take(&self, len: usize) -> Result<OwnedSemaphorePermit, Refused> {
        self.permits
            .clone()
            .acquire_many_owned(self.cost(len))
            .await
            .map_err(|_| Refused::Closed)
    }
}

/// A frame waiting in a lane, holding its share of the lane's byte budget until written.
pub(super) struct Queued {
    /// The encoded frame.
    pub bytes: Bytes,
    _budget: OwnedSemaphorePermit,
}

/// The sending end of one lane of one peer; clones share the queue and the budget.
#[derive(Clone)]
pub(super) struct Lane {
    frames: mpsc::Sender<Queued>,
    budget: Budget,
}

impl Lane {
    /// A lane of at most `frames` frames and `bytes` bytes; the receiving end is the
    /// writer's.
    pub fn new(frames: usize, bytes: usize) -> (Lane, mpsc::Receiver<Queued>) {
        let (sender, receiver) = mpsc::channel(frames.max(1));
        let lane = Lane {
            frames: sender,
            budget: Budget::new(bytes),
        };
        (lane, receiver)
    }

    /// Queues `frame` if the lane has room for it now.
    pub fn try_push(&self, frame: Bytes) -> Result<(), Refused> {
        let budget = self.budget.try_take(frame.len())?;
        self.frames
            .try_send(Queued {
                bytes: frame,
                _budget: budget,
            })
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => Refused::Full,
                mpsc::error::TrySendError::Closed(_) => Refused::Closed,
            })
    }

    /// Queues `frame`, waiting for room; fails only if the connection closed (the writer
    /// dropped its end, so no room will ever come).
    pub async fn push(&self, frame: Bytes) -> Result<(), Refused> {
        let budget = tokio::select! {
            permit = self.budget.take(frame.len()) => permit?,
            () = self.frames.closed() => return Err(Refused::Closed),
        };
        self.frames
            .send(Queued {
                bytes: frame,
                _budget: budget,
            })
            .await
            .map_err(|_| Refused::Closed)
    }
}
