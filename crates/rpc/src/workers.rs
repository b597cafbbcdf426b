//! The pool heavy methods run on: a few dedicated threads and a bounded queue, so RPC load
//! never runs on the threads that carry consensus and network traffic (the node's tokio
//! runtime) nor on rayon's global pool that imports blocks. A request that finds every
//! worker busy and the queue full is answered "busy" at once instead of waiting.
//!
//! The workers are a rayon pool of their own: the parallel decoding and sender recovery a
//! block read does (`stave_codec::decode_transactions`, [`crate::convert::load_block`])
//! runs on them too, since rayon runs a parallel iterator on the pool of the thread that
//! starts it.

use std::sync::Arc;

use tokio::sync::{Semaphore, oneshot};

use crate::error::RpcError;

/// The heavy-method pool of one server.
pub(crate) struct Workers {
    pool: rayon::ThreadPool,
    /// One permit per running or queued job: `threads + queue` in all.
    slots: Arc<Semaphore>,
    /// Running plus queued jobs at most, for the busy error's message.
    capacity: usize,
}

impl Workers {
    /// A pool of `threads` workers at nice value `nice` that queues at most `queue` more
    /// jobs.
    pub(crate) fn new(threads: usize, queue: usize, nice: u8) -> Result<Self, RpcError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("rpc-worker-{index}"))
            .start_handler(move |_| lower_priority(nice))
            // A job that panics loses its answer (the caller gets an internal error), not
            // the process: rayon aborts on a panic in a spawned job without a handler.
            .panic_handler(|_| tracing::error!("an RPC worker job panicked"))
            .build()
            .map_err(RpcError::internal)?;
        let capacity = threads.saturating_add(queue);
        Ok(Self {
            pool,
            slots: Arc::new(Semaphore::new(capacity)),
            capacity,
        })
    }

    /// Runs `work` on a worker and returns its answer, or [`RpcError::Busy`] at once when
    /// every worker is busy and the queue is full. A caller that goes away does not stop
    /// a job already queued; the slot stays taken until the job ends, so the bound holds.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
    ) -> Result<T, RpcError> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| RpcError::Busy(self.capacity))?;
        let (answer, answered) = oneshot::channel();
        self.pool.spawn(move || {
            let _slot = slot;
            // The caller may have gone; then nobody wants the answer.
            let _ = answer.send(work());
        });
        answered
            .await
            .map_err(|_| RpcError::Internal("the request failed on its worker".into()))?
    }
}

/// Gives the calling thread nice value `nice` (Linux schedules threads, not processes, so
/// this leaves the node's other threads as they are). Raising one's own nice value needs
/// no privilege; if the kernel refuses anyway, the thread runs at the normal priority.
pub(crate) fn lower_priority(nice: u8) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no arguments and cannot fail; setpriority only reads its
        // integer arguments, and PRIO_PROCESS with a thread id targets that one thread.
        let refused = unsafe {
            let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, thread, i32::from(nice)) != 0
        };
        if refused {
            tracing::warn!(nice, "cannot lower an RPC thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_answers_busy_and_frees_up_when_jobs_end() {
        let workers = Arc::new(Workers::new(1, 1, 0).expect("pool"));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(parking_lot::Mutex::new(released));
        let mut running = Vec::new();
        for _ in 0..2 {
            let (workers, released) = (workers.clone(), released.clone());
            running.push(tokio::spawn(async move {
                workers
                    .run(move || {
                        let _ = released.lock().recv();
                        Ok(1)
                    })
                    .await
            }));
        }
        // Both slots taken (one running, one queued): the third is refused.
        while workers.slots.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            workers.run(|| Ok(3)).await,
            Err(RpcError::Busy(2))
        ));
        release.send(()).expect("job waits");
        release.send(()).expect("job waits");
        for job in running {
            assert_eq!(job.await.expect("joins").expect("answers"), 1);
        }
        assert_eq!(workers.run(|| Ok(4)).await.expect("free again"), 4);
        let failed = workers.run::<()>(|| panic!("a bug in a method")).await;
        assert!(matches!(failed, Err(RpcError::Internal(_))));
        assert_eq!(workers.run(|| Ok(5)).await.expect("still serving"), 5);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn workers_run_at_the_configured_nice_value() {
        let workers = Workers::new(1, 1, 7).expect("pool");
        let nice = workers
            .run(|| {
                // SAFETY: as in `lower_priority`; getpriority only reads its arguments.
                Ok(unsafe {
                    let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
                    libc::getpriority(libc::PRIO_PROCESS, thread)
                })
            })
            .await
            .expect("answered");
        assert_eq!(nice, 7);
    }
}
