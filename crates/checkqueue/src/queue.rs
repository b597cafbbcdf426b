//! The queue itself: shared state, the worker loop, and the master's round.

use std::{mem::MaybeUninit, panic::AssertUnwindSafe};

use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Backoff, Cell, Condvar, Mutex, Ordering, thread,
};

/// A unit of work the queue runs on some thread: verify one signature, say.
///
/// `run` takes `&mut self` so a check can keep its result (a recovered sender) inside
/// itself; the master reads it back from [`Completed`] after the round.
pub trait Check: Send + 'static {
    /// Why a check fails.
    type Error: Send + 'static;

    /// Performs the check.
    fn run(&mut self) -> Result<(), Self::Error>;
}

/// The first (lowest-index) failing check of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<E> {
    /// Check `index` returned `error`.
    Failed {
        /// Position of the check in the round.
        index: usize,
        /// What it returned.
        error: E,
    },
    /// Check `index` panicked; the panic was caught on the worker, which lives on.
    Panicked {
        /// Position of the check in the round.
        index: usize,
    },
}

impl<E> Failure<E> {
    /// Position of the failing check in its round.
    pub fn index(&self) -> usize {
        match self {
            Self::Failed { index, .. } | Self::Panicked { index } => *index,
        }
    }
}

/// A claim counter or published count, tagged with its round: `round << 32 | index`.
///
/// The tag stops a worker that read the counter in one round from claiming with it in
/// the next (an ABA on the index once the master resets it). It would take a worker
/// stalled across exactly 2^32 rounds to fool it. Indices are below 2^32 because
/// [`CheckQueue`] caps a round at `u32::MAX` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tagged(u64);

impl Tagged {
    fn new(round: u32, index: usize) -> Self {
        Self(u64::from(round) << 32 | index as u64)
    }
    fn round(self) -> u32 {
        (self.0 >> 32) as u32
    }
    fn index(self) -> usize {
        (self.0 & u64::from(u32::MAX)) as usize
    }
}

/// What a worker sleeps on between rounds.
#[derive(Debug, Default)]
struct Wake {
    /// Bumped by the master at the start of every round.
    generation: u64,
    /// Set once, when the queue is dropped.
    shutdown: bool,
}

/// State shared by the master and the workers.
struct Shared<C: Check> {
    /// Preallocated check storage. Slot `i` is written once by the master before it
    /// publishes `i + 1`, then touched only by the one thread that claimed `i`, then read
    /// back by the master after `done` reaches the count. The box is replaced (grown) only
    /// by the master between rounds, when no claim can succeed.
    slots: Cell<Box<[Cell<MaybeUninit<C>>]>>,
    /// Checks the master has written this round. Release-stored after each slot write;
    /// Acquire-loaded before claiming, which makes the slot's contents visible.
    published: AtomicU64,
    /// Next check to claim this round; advanced by compare-exchange, one check at a time,
    /// so every thread keeps busy until the last check and all finish together.
    next: AtomicU64,
    /// True while the master may still publish checks: idle workers spin instead of
    /// sleeping, because the next check is microseconds away.
    adding: AtomicBool,
    /// Checks finished (run or skipped) this round. Release-incremented after a check's
    /// last write; the master Acquire-loads it, so it sees every check's result.
    done: AtomicUsize,
    /// Lowest failing index so far (`usize::MAX`: none). Checks above it are skipped;
    /// checks below it still run, so the reported failure is the lowest overall. Only a
    /// hint for skipping: the authoritative failure is in `failure`.
    first_failure: AtomicUsize,
    /// The lowest failure. The queue's only lock on the check path, taken only by a
    /// failing check.
    failure: Mutex<Option<Failure<C::Error>>>,
    /// Sleep between rounds; never touched while checks flow.
    wake: Mutex<Wake>,
    wake_signal: Condvar,
}

// SAFETY: the slots are accessed under the claim protocol documented on `slots`: one
// thread at a time per slot, with happens-before edges through `published` and `done`.
// `C: Send` is all that moving checks between threads requires.
unsafe impl<C: Check> Sync for Shared<C> {}
// SAFETY: as above; the struct owns `C` values, which are `Send`.
unsafe impl<C: Check> Send for Shared<C> {}

impl<C: Check> Shared<C> {
    /// Claims the next published, unclaimed check of the current round.
    fn claim(&self) -> Option<usize> {
        // Relaxed: the compare-exchange below revalidates this value.
        let mut next = Tagged(self.next.load(Ordering::Relaxed));
        loop {
            // Acquire pairs with the master's Release store after writing the slot.
            let published = Tagged(self.published.load(Ordering::Acquire));
            if next.round() != published.round() || next.index() >= published.index() {
                return None;
            }
            // Relaxed suffices: exclusivity comes from the RMW's atomicity, visibility of
            // the slot from the Acquire load of `published` above.
            match self.next.compare_exchange_weak(
                next.0,
                next.0 + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(next.index()),
                Err(actual) => next = Tagged(actual),
            }
        }
    }

    /// Runs claimed check `index` (or skips it after a lower failure) and counts it done.
    fn run(&self, index: usize) {
        if index <= self.first_failure.load(Ordering::Relaxed) {
            let outcome = self.slots.with(|slots| {
                // SAFETY: `index` was claimed, so it is below the published count (the
                // slot is initialised) and no other thread touches this slot until `done`
                // says so. `slots` is not replaced during a round.
                let slot = unsafe { &(&*slots)[index] };
                slot.with_mut(|check| {
                    std::panic::catch_unwind(AssertUnwindSafe(|| {
                        // SAFETY: initialised and exclusively ours, as above.
                        unsafe { (*check).assume_init_mut() }.run()
                    }))
                })
            });
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(error)) => self.record_failure(Failure::Failed { index, error }),
                Err(_) => self.record_failure(Failure::Panicked { index }),
            }
        }
        // Release pairs with the master's Acquire load: the check's writes happen-before
        // the master reads them.
        self.done.fetch_add(1, Ordering::Release);
    }

    fn record_failure(&self, failure: Failure<C::Error>) {
        let index = failure.index();
        let mut first = self
            .failure
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if first.as_ref().is_none_or(|f| f.index() > index) {
            *first = Some(failure);
        }
        self.first_failure.fetch_min(index, Ordering::Relaxed);
    }

    /// Claims and runs checks until the round is closed and none are left.
    fn work(&self) {
        let mut backoff = Backoff::default();
        loop {
            if let Some(index) = self.claim() {
                self.run(index);
                backoff = Backoff::default();
            } else if self.adding.load(Ordering::Acquire) {
                backoff.snooze();
            } else if let Some(index) = self.claim() {
                // The master publishes before it closes: look once more after seeing it
                // closed, or a check published just before closing could be missed.
                self.run(index);
            } else {
                return;
            }
        }
    }

    /// A worker thread: sleep until a round starts, help with it, repeat.
    fn worker_loop(&self) {
        let mut seen = 0;
        loop {
            {
                let mut wake = self
                    .wake
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                while wake.generation == seen && !wake.shutdown {
                    wake = self
                        .wake_signal
                        .wait(wake)
                        .unwrap_or_else(|poison| poison.into_inner());
                }
                if wake.shutdown {
                    return;
                }
                seen = wake.generation;
            }
            self.work();
        }
    }
}

/// A pool of worker threads that run [`Check`]s for one master thread at a time.
///
/// Thread roles: the thread that owns the queue is the master. It opens a [`Round`],
/// pushes checks, and on [`Round::finish`] joins the `threads - 1` workers in running
/// them, then waits for the last. Workers sleep between rounds and spin while the master
/// is adding. One queue serves round after round; a round allocates nothing per check.
pub struct CheckQueue<C: Check> {
    shared: Arc<Shared<C>>,
    workers: Vec<thread::JoinHandle<()>>,
    /// Round counter; tags `next` and `published`.
    round: u32,
    /// Checks the current storage holds.
    capacity: usize,
}

impl<C: Check> std::fmt::Debug for CheckQueue<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckQueue")
            .field("threads", &(self.workers.len() + 1))
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Most checks in one round: indices are tagged into the low 32 bits of a u64.
const MAX_ROUND_CHECKS: usize = u32::MAX as usize;

impl<C: Check> CheckQueue<C> {
    /// A queue running checks on `threads` threads in all (the master plus
    /// `threads - 1` workers; at least 1), with storage for `capacity` checks a round.
    pub fn new(threads: usize, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            slots: Cell::new(new_slots(capacity)),
            published: AtomicU64::new(0),
            next: AtomicU64::new(0),
            adding: AtomicBool::new(false),
            done: AtomicUsize::new(0),
            first_failure: AtomicUsize::new(usize::MAX),
            failure: Mutex::new(None),
            wake: Mutex::new(Wake::default()),
            wake_signal: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                let spawn = move || shared.worker_loop();
                #[cfg(loom)]
                let _ = i;
                #[cfg(loom)]
                return thread::spawn(spawn);
                #[cfg(not(loom))]
                thread::Builder::new()
                    .name(format!("checkqueue-{i}"))
                    .spawn(spawn)
                    .expect("spawning a check queue worker")
            })
            .collect();
        Self {
            shared,
            workers,
            round: 0,
            capacity,
        }
    }

    /// Threads that run checks, the master included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Opens a round. Storage grows to `expected` checks first if it is smaller (the only
    /// allocation the queue makes after [`CheckQueue::new`]).
    pub fn round(&mut self, expected: usize) -> Round<'_, C> {
        let shared = &*self.shared;
        if expected > self.capacity {
            self.capacity = expected.min(MAX_ROUND_CHECKS);
            let capacity = self.capacity;
            // SAFETY: between rounds no claim succeeds (the published count of the last
            // round is fully claimed), so no worker holds a reference into the slots.
            shared
                .slots
                .with_mut(|slots| unsafe { *slots = new_slots(capacity) });
        }
        self.round = self.round.wrapping_add(1);
        shared.first_failure.store(usize::MAX, Ordering::Relaxed);
        shared.done.store(0, Ordering::Relaxed);
        *shared
            .failure
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = None;
        shared
            .next
            .store(Tagged::new(self.round, 0).0, Ordering::Relaxed);
        shared.adding.store(true, Ordering::Relaxed);
        // Release: a worker that sees this round's tag also sees the resets above.
        shared
            .published
            .store(Tagged::new(self.round, 0).0, Ordering::Release);
        {
            let mut wake = shared
                .wake
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            wake.generation += 1;
        }
        shared.wake_signal.notify_all();
        Round {
            queue: Some(self),
            len: 0,
        }
    }
}

impl<C: Check> Drop for CheckQueue<C> {
    fn drop(&mut self) {
        self.shared
            .wake
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .shutdown = true;
        self.shared.wake_signal.notify_all();
        for worker in self.workers.drain(..) {
            // A worker only ends by returning: checks' panics are caught.
            let _ = worker.join();
        }
    }
}

fn new_slots<C>(capacity: usize) -> Box<[Cell<MaybeUninit<C>>]> {
    (0..capacity)
        .map(|_| Cell::new(MaybeUninit::uninit()))
        .collect()
}

/// One round of checks: push them, then [`Round::finish`].
///
/// Dropping a round without finishing it still waits for every pushed check to finish
/// (the workers are reading them) and then drops them, so a round can never leave
/// checks running on borrowed storage: the reason `Round` holds the queue by `&mut`.
pub struct Round<'q, C: Check> {
    /// `None` once finished.
    queue: Option<&'q mut CheckQueue<C>>,
    /// Checks pushed.
    len: usize,
}

impl<C: Check> std::fmt::Debug for Round<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round").field("len", &self.len).finish()
    }
}

impl<'q, C: Check> Round<'q, C> {
    /// Adds a check; a worker may start on it at once. Gives the check back when the
    /// round is full (more than the `expected` given to [`CheckQueue::round`]).
    pub fn push(&mut self, check: C) -> Result<(), C> {
        let Some(queue) = self.queue.as_deref() else {
            return Err(check);
        };
        if self.len >= queue.capacity {
            return Err(check);
        }
        let shared = &*queue.shared;
        shared.slots.with(|slots| {
            // SAFETY: slot `len` is unpublished, so no worker can claim or touch it.
            let slot = unsafe { &(&*slots)[self.len] };
            slot.with_mut(|cell| unsafe { (*cell).write(check) });
        });
        self.len += 1;
        // Release: the slot write above happens-before a worker's claim of it.
        shared
            .published
            .store(Tagged::new(queue.round, self.len).0, Ordering::Release);
        Ok(())
    }

    /// Checks pushed so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Closes the round, runs checks on this thread too until none are left, and waits
    /// for the workers. Returns the checks in push order, or the lowest-index failure.
    pub fn finish(mut self) -> Result<Completed<'q, C>, Failure<C::Error>> {
        let failure = self.close_and_wait();
        let queue = self
            .queue
            .take()
            .expect("an unfinished round holds its queue");
        let completed = Completed {
            queue,
            len: self.len,
            taken: 0,
        };
        match failure {
            None => Ok(completed),
            // Dropping `completed` drops every check.
            Some(failure) => Err(failure),
        }
    }

    fn close_and_wait(&mut self) -> Option<Failure<C::Error>> {
        let queue = self.queue.as_deref()?;
        let shared = &*queue.shared;
        shared.adding.store(false, Ordering::Release);
        shared.work();
        let mut backoff = Backoff::default();
        // Acquire pairs with each check's Release increment.
        while shared.done.load(Ordering::Acquire) != self.len {
            backoff.snooze();
        }
        shared
            .failure
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take()
    }
}

impl<C: Check> Drop for Round<'_, C> {
    fn drop(&mut self) {
        if self.queue.is_some() {
            self.close_and_wait();
            if let Some(queue) = self.queue.take() {
                drop(Completed {
                    queue,
                    len: self.len,
                    taken: 0,
                });
            }
        }
    }
}

/// The checks of a finished round, handed back in push order. Checks not taken are
/// dropped with it.
pub struct Completed<'q, C: Check> {
    queue: &'q mut CheckQueue<C>,
    len: usize,
    /// Checks `0..taken` were moved out.
    taken: usize,
}

impl<C: Check> std::fmt::Debug for Completed<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completed")
            .field("len", &self.len)
            .field("taken", &self.taken)
            .finish()
    }
}

impl<C: Check> Iterator for Completed<'_, C> {
    type Item = C;

    fn next(&mut self) -> Option<C> {
        if self.taken == self.len {
            return None;
        }
        let index = self.taken;
        self.taken += 1;
        Some(self.queue.shared.slots.with(|slots| {
            // SAFETY: every worker finished with the round (`done == len`, Acquire), the
            // slot was initialised by `push`, and `taken` moves past it so it is read once.
            let slot = unsafe { &(&*slots)[index] };
            slot.with_mut(|cell| unsafe { (*cell).assume_init_read() })
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len - self.taken, Some(self.len - self.taken))
    }
}

impl<C: Check> ExactSizeIterator for Completed<'_, C> {}

impl<C: Check> Drop for Completed<'_, C> {
    fn drop(&mut self) {
        for check in self.by_ref() {
            drop(check);
        }
    }
}
