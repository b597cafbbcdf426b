//! Supervision of the parts a node cannot live without: the thread that makes blocks (the
//! producer or follower loop, or a validator's chain actor) and a validator's consensus
//! engine. Each runs on a thread of its own under a [`Supervisor`]; however it ends (an
//! error, a panic, or returning while the node is not stopping) the node hears of it at
//! once ([`RunningNode::wait`](crate::RunningNode::wait) returns) and reports the first
//! failure, rather than run on half-alive: answering JSON-RPC while no block is made or
//! voted.

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
