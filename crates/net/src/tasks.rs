//! [`Tasks`]: the long-lived tasks the network and gossip spawn (accepting, dialling,
//! routing gossip, serving peers' requests), kept so the node can watch them: each runs
//! until the network shuts down, and one that ends sooner (a panic) leaves a node no peer
//! can reach or no block can leave.

use std::future::Future;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

/// A long-lived task and what it does, as a failure line names it ("the P2P accept loop
/// panicked").
pub type Task = (&'static str, JoinHandle<()>);

/// Long-lived tasks not yet handed to a watcher.
#[derive(Default)]
pub(crate) struct Tasks(Mutex<Vec<Task>>);

impl Tasks {
    /// Spawns `task` (named `name`) on the current runtime and keeps its handle.
    pub(crate) fn spawn(
        &self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.0.lock().push((name, tokio::spawn(task)));
    }

    /// The tasks spawned since the last call.
    pub(crate) fn take(&self) -> Vec<Task> {
        std::mem::take(&mut *self.0.lock())
    }
}
