//! A mutex-and-condvar check queue modelled on Bitcoin Core's current `CCheckQueue`: the
//! baseline `stave bench checkqueue` measures the lock-free queue against. Not used by the
//! node.
//!
//! Checks go into one `Vec` under a mutex; a worker takes a batch from the back (LIFO) of
//! up to 128 checks, sized `queued / (threads + idle + 1)` so batches shrink as the queue
//! drains, runs it unlocked, and reports back under the lock. The master adds a whole
//! batch of checks at once and, on `wait`, works too until nothing is left.

use std::{
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

use crate::queue::Check;

/// Largest batch a worker takes at once, as in Bitcoin Core.
const MAX_BATCH: usize = 128;

struct State<C> {
    queue: Vec<C>,
    /// Threads (master included) waiting for work.
    idle: usize,
    /// Checks added and not yet finished.
    todo: usize,
    /// False once any check failed this round.
    all_ok: bool,
    shutdown: bool,
}

struct Shared<C> {
    state: Mutex<State<C>>,
    /// Wakes workers when checks arrive.
    worker_signal: Condvar,
    /// Wakes the master when `todo` reaches zero.
    master_signal: Condvar,
    threads: usize,
}

/// Bitcoin Core's queue design: batched, LIFO, one mutex.
pub struct MutexCheckQueue<C: Check> {
    shared: Arc<Shared<C>>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl<C: Check> std::fmt::Debug for MutexCheckQueue<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexCheckQueue")
            .field("threads", &self.shared.threads)
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl<C: Check> Shared<C> {
    /// Runs batches until the queue is empty (master) or forever (worker); returns
    /// whether every check of the round passed (master only).
    fn run_loop(&self, master: bool) -> bool {
        let mut batch: Vec<C> = Vec::with_capacity(MAX_BATCH);
        let mut ok = true;
        let mut state = lock(&self.state);
        loop {
            // Report the previous batch.
            if !batch.is_empty() {
                state.todo -= batch.len();
                state.all_ok &= ok;
                batch.clear();
                if state.todo == 0 && !master {
                    self.master_signal.notify_one();
                }
            }
            while state.queue.is_empty() {
                if master && state.todo == 0 {
                    let all_ok = state.all_ok;
                    state.all_ok = true;
                    return all_ok;
                }
                if state.shutdown {
                    return true;
                }
                state.idle += 1;
                state = if master {
                    self.master_signal.wait(state)
                } else {
                    self.worker_signal.wait(state)
                }
                .unwrap_or_else(|poison| poison.into_inner());
                state.idle -= 1;
            }
            let size = (state.queue.len() / (self.threads + state.idle + 1)).clamp(1, MAX_BATCH);
            let keep = state.queue.len() - size;
            batch.extend(state.queue.drain(keep..));
            ok = state.all_ok;
            drop(state);
            // After a failure, remaining checks are skipped (but still counted).
            if ok {
                ok = batch.iter_mut().all(|check| check.run().is_ok());
            }
            state = lock(&self.state);
        }
    }
}

impl<C: Check> MutexCheckQueue<C> {
    /// A queue on `threads` threads in all (`threads - 1` workers plus the master).
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Vec::new(),
                idle: 0,
                todo: 0,
                all_ok: true,
                shutdown: false,
            }),
            worker_signal: Condvar::new(),
            master_signal: Condvar::new(),
            threads,
        });
        let workers = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || {
                    shared.run_loop(false);
                })
            })
            .collect();
        Self { shared, workers }
    }

    /// Adds checks; workers are woken to start on them.
    pub fn add(&self, checks: Vec<C>) {
        let count = checks.len();
        {
            let mut state = lock(&self.shared.state);
            state.queue.extend(checks);
            state.todo += count;
        }
        if count == 1 {
            self.shared.worker_signal.notify_one();
        } else if count > 1 {
            self.shared.worker_signal.notify_all();
        }
    }

    /// Works until every added check is done; true when all passed.
    pub fn wait(&self) -> bool {
        self.shared.run_loop(true)
    }
}

impl<C: Check> Drop for MutexCheckQueue<C> {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.worker_signal.notify_all();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Count(Arc<AtomicUsize>, bool);
    impl Check for Count {
        type Error = ();
        fn run(&mut self) -> Result<(), ()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            if self.1 { Err(()) } else { Ok(()) }
        }
    }

    #[test]
    fn runs_every_check_once_and_reports_failure() {
        let queue = MutexCheckQueue::new(3);
        for round in 0..50 {
            let runs = Arc::new(AtomicUsize::new(0));
            queue.add(
                (0..1_000)
                    .map(|_| Count(Arc::clone(&runs), false))
                    .collect(),
            );
            assert!(queue.wait(), "round {round}");
            assert_eq!(runs.load(Ordering::Relaxed), 1_000);
        }
        let runs = Arc::new(AtomicUsize::new(0));
        queue.add(
            (0..100)
                .map(|i| Count(Arc::clone(&runs), i == 50))
                .collect(),
        );
        assert!(!queue.wait());
        // The queue recovers for the next round.
        queue.add(vec![Count(Arc::clone(&runs), false)]);
        assert!(queue.wait());
    }
}
