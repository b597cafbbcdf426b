//! How a run reports its progress to whoever started it (`stave load` draws bars).

/// Hooks a run calls as it goes, from several tasks at once. Every method does nothing
/// unless implemented, so `()` reports nothing.
pub trait Progress: Send + Sync {
    /// Something the user should read now (a phase starting, a stall).
    fn note(&self, _message: &str) {}
    /// Sending starts: `txs` transactions are to be sent and followed into blocks.
    fn start(&self, _txs: u64) {}
    /// `count` more transactions were sent (resends included).
    fn sent(&self, _count: u64) {}
    /// The send phase is over.
    fn sending_done(&self) {}
    /// `included` transactions of the run are in blocks so far.
    fn included(&self, _included: u64) {}
    /// The run stopped waiting for inclusion.
    fn done(&self) {}
}

impl Progress for () {}
