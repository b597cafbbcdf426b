//! A lock-free parallel check queue, after Bitcoin Core's `CCheckQueue` made lock-free as
//! proposed in bitcoin/bitcoin#9938.
//!
//! One master thread pushes [`Check`]s into a [`Round`]; `threads - 1` workers start on
//! them at once, claiming one check at a time with an atomic counter, so verification of
//! check i starts as soon as it is pushed and all threads finish together. On
//! [`Round::finish`] the master joins in, waits for the last check, and gets the checks
//! back in order ([`Completed`]) or the lowest-index [`Failure`]; after a failure, checks
//! above it are skipped. Checks live in storage allocated once and reused round after
//! round; they are written once and never moved until handed back.
//!
//! The crate knows nothing of blockchains: a check is anything with `run(&mut self)`.
//! [`baseline`] keeps Bitcoin Core's mutex-and-condvar design for benchmarks.
//!
//! ```
//! use stave_checkqueue::{Check, CheckQueue};
//!
//! struct IsEven(u64);
//! impl Check for IsEven {
//!     type Error = u64;
//!     fn run(&mut self) -> Result<(), u64> {
//!         if self.0 % 2 == 0 { Ok(()) } else { Err(self.0) }
//!     }
//! }
//!
//! let mut queue = CheckQueue::new(2, 16);
//! let mut round = queue.round(3);
//! for n in [2, 4, 6] {
//!     round.push(IsEven(n)).map_err(|_| "full")?;
//! }
//! assert_eq!(round.finish().map_err(|_| "failed")?.map(|c| c.0).sum::<u64>(), 12);
//!
//! let mut round = queue.round(3);
//! for n in [2, 5, 7] {
//!     round.push(IsEven(n)).map_err(|_| "full")?;
//! }
//! assert_eq!(round.finish().unwrap_err().index(), 1);
//! # Ok::<(), &str>(())
//! ```

#[cfg(not(loom))]
pub mod baseline;
mod queue;
mod sync;

pub use queue::{Check, CheckQueue, Completed, Failure, Round};
