//! Supervision of the parts a node cannot live without: the thread that makes blocks (the
//! producer or follower loop, or a validator's chain actor), a validator's consensus
//! engine, the JSON-RPC server and the P2P network's and gossip's tasks. Threads run under
//! a [`Supervisor`] ([`Supervisor::spawn`]), tasks are watched by it
//! ([`Supervisor::watch`]); however one ends (an error, a panic, or returning while the
//! node is not stopping) the node hears of it at once
//! ([`RunningNode::wait`](crate::RunningNode::wait) returns) and reports the first
//! failure, rather than run on half-alive: answering JSON-RPC while no block is made or
//! voted, or making blocks no client or peer can reach.

use std::{
    any::Any,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use tokio::sync::watch;

use crate::LaunchError;

/// A part of the node it cannot live without, named as the failure line names it
/// ("the consensus engine panicked: ...").
pub(crate) type Part = &'static str;

/// Watches the vital parts of one node. Clones share the same state.
#[derive(Clone)]
pub(crate) struct Supervisor {
    shared: Arc<Shared>,
}

struct Shared {
    /// Set when the node is told to stop: a part that returns after it is not a failure.
    stopping: AtomicBool,
    /// The first part that ended, for [`RunningNode::wait`](crate::RunningNode::wait).
    ended: watch::Sender<Option<Part>>,
    /// The first failure; later ones are only logged (they are most likely its
    /// consequences).
    failure: Mutex<Option<LaunchError>>,
}

impl Supervisor {
    /// A supervisor with nothing running yet, and the receiver that sees the first part
    /// that ends.
    pub fn new() -> (Self, watch::Receiver<Option<Part>>) {
        let (ended, first_ended) = watch::channel(None);
        let shared = Shared {
            stopping: AtomicBool::new(false),
            ended,
            failure: Mutex::new(None),
        };
        let supervisor = Self {
            shared: Arc::new(shared),
        };
        (supervisor, first_ended)
    }

    /// Whether the node was told to stop.
    pub fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Relaxed)
    }

    /// The flag [`Supervisor::stop`] sets, for loops that poll it.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.shared.stopping
    }

    /// Tells every part the node is stopping (the producer and follower loops poll it).
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
    }

    /// The first failure of a part, if one failed; taken, so asked once.
    pub fn take_failure(&self) -> Option<LaunchError> {
        lock(&self.shared.failure).take()
    }

    /// Runs `body` as the node's `part` on a new thread named `thread`. Its end is
    /// reported whichever way it comes: an error as is, a panic (caught here: the thread's
    /// state is dropped, nothing of it is used again) as [`LaunchError::Panicked`], and a
    /// return while the node is not stopping as [`LaunchError::Ended`].
    pub fn spawn(
        &self,
        part: Part,
        thread: &str,
        body: impl FnOnce() -> Result<(), LaunchError> + Send + 'static,
    ) -> Result<JoinHandle<()>, LaunchError> {
        let supervisor = self.clone();
        std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || {
                let result = match catch_unwind(AssertUnwindSafe(body)) {
                    Ok(Ok(())) if supervisor.stopping() => Ok(()),
                    Ok(Ok(())) => Err(LaunchError::Ended(part)),
                    Ok(Err(error)) => Err(error),
                    Err(panic) => Err(LaunchError::Panicked {
                        part,
                        message: panic_message(&*panic),
                    }),
                };
                supervisor.ended(part, result);
            })
            .map_err(LaunchError::io(format!("starting the {part}")))
    }

    /// Watches `task`, the node's `part`, which runs until the node stops: its end is
    /// reported as a thread's is ([`Supervisor::spawn`]), a cancellation (its runtime shut
    /// down) while the node is not stopping as [`LaunchError::Ended`]. Call it within a
    /// tokio runtime that lives as long as the node (the watcher runs on it).
    pub fn watch(&self, part: Part, task: tokio::task::JoinHandle<()>) {
        let supervisor = self.clone();
        tokio::spawn(async move {
            let result = match task.await {
                Err(error) if error.is_panic() => Err(LaunchError::Panicked {
                    part,
                    message: panic_message(&*error.into_panic()),
                }),
                // Returned, or cancelled as the node's runtimes shut down.
                _ if supervisor.stopping() => Ok(()),
                Ok(()) | Err(_) => Err(LaunchError::Ended(part)),
            };
            supervisor.ended(part, result);
        });
    }

    /// Records that `part` ended with `result`.
    fn ended(&self, part: Part, result: Result<(), LaunchError>) {
        if let Err(error) = result {
            let mut failure = lock(&self.shared.failure);
            match &*failure {
                // Reported by the node's stop (the binary prints it as its last line).
                None => *failure = Some(error),
                Some(_) => tracing::warn!(part, error = %ErrorChain(&error), "failed too"),
            }
        }
        self.shared.ended.send_if_modified(|first| match first {
            None => {
                *first = Some(part);
                true
            }
            Some(_) => false,
        });
    }
}

/// Locks `mutex`, also after a panic while it was held (what it guards is one value,
/// replaced whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A panic's message (what `panic!` and `expect` were given).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (None, Some(text)) => text.clone(),
        (None, None) => "a panic without a message".to_owned(),
    }
}

/// An error and its sources on one line, as the binary prints them.
struct ErrorChain<'a>(&'a LaunchError);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = std::error::Error::source(self.0);
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first part that ended, once `handle`'s thread has.
    fn ended(first: &watch::Receiver<Option<Part>>, handle: JoinHandle<()>) -> Option<Part> {
        handle.join().expect("the supervisor catches panics");
        *first.borrow()
    }

    #[test]
    fn a_panic_an_error_and_an_early_return_are_failures_and_the_first_is_kept() {
        let (supervisor, first) = Supervisor::new();
        let panics = supervisor
            .spawn("consensus engine", "test-a", || panic!("journal gone"))
            .expect("spawns");
        assert_eq!(ended(&first, panics), Some("consensus engine"));
        let errs = supervisor
            .spawn("chain actor", "test-b", || {
                Err(LaunchError::Config("disk".into()))
            })
            .expect("spawns");
        assert_eq!(ended(&first, errs), Some("consensus engine"));
        let failure = supervisor.take_failure().expect("a failure");
        assert_eq!(
            failure.to_string(),
            "the consensus engine panicked: journal gone"
        );
        assert!(supervisor.take_failure().is_none(), "taken once");

        let (supervisor, first) = Supervisor::new();
        let returns = supervisor
            .spawn("block producer", "test-c", || Ok(()))
            .expect("spawns");
        assert_eq!(ended(&first, returns), Some("block producer"));
        let failure = supervisor.take_failure().expect("a failure");
        assert!(
            matches!(failure, LaunchError::Ended("block producer")),
            "{failure}"
        );
    }

    /// The first part that ended, once one has.
    async fn first_to_end(first: &mut watch::Receiver<Option<Part>>) -> Option<Part> {
        let ended = first
            .wait_for(Option::is_some)
            .await
            .expect("the supervisor lives");
        *ended
    }

    #[tokio::test]
    async fn a_watched_task_that_panics_returns_or_is_cancelled_has_failed() {
        let (supervisor, mut first) = Supervisor::new();
        supervisor.watch(
            "P2P accept loop",
            tokio::spawn(async { panic!("listener gone") }),
        );
        assert_eq!(first_to_end(&mut first).await, Some("P2P accept loop"));
        let failure = supervisor.take_failure().expect("a failure");
        assert_eq!(
            failure.to_string(),
            "the P2P accept loop panicked: listener gone"
        );

        let (supervisor, mut first) = Supervisor::new();
        supervisor.watch("JSON-RPC server", tokio::spawn(async {}));
        assert_eq!(first_to_end(&mut first).await, Some("JSON-RPC server"));
        let failure = supervisor.take_failure().expect("a failure");
        assert!(
            matches!(failure, LaunchError::Ended("JSON-RPC server")),
            "{failure}"
        );

        let (supervisor, mut first) = Supervisor::new();
        let forever = tokio::spawn(std::future::pending::<()>());
        forever.abort();
        supervisor.watch("gossip", forever);
        assert_eq!(first_to_end(&mut first).await, Some("gossip"));
        assert!(supervisor.take_failure().is_some(), "a cancelled task");
    }

    #[tokio::test]
    async fn a_watched_task_that_ends_while_the_node_stops_has_not_failed() {
        let (supervisor, mut first) = Supervisor::new();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        supervisor.watch(
            "JSON-RPC server",
            tokio::spawn(async {
                let _ = released.await;
            }),
        );
        supervisor.stop();
        release.send(()).expect("the task waits");
        assert_eq!(first_to_end(&mut first).await, Some("JSON-RPC server"));
        assert!(supervisor.take_failure().is_none());
    }

    #[test]
    fn a_part_that_returns_while_the_node_stops_has_not_failed() {
        let (supervisor, first) = Supervisor::new();
        supervisor.stop();
        let returns = supervisor
            .spawn("block producer", "test-d", || Ok(()))
            .expect("spawns");
        assert_eq!(ended(&first, returns), Some("block producer"));
        assert!(supervisor.take_failure().is_none());
    }
}
