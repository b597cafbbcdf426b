//! The synchronisation primitives the queue uses: std's, or loom's under `--cfg loom` so
//! the model checker sees every atomic, lock and cell access.

#[cfg(loom)]
pub(crate) use loom::{
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
};
#[cfg(not(loom))]
pub(crate) use std::{
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
};

/// An `UnsafeCell` with loom's closure API, so access is tracked under loom.
#[derive(Debug)]
pub(crate) struct Cell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> Cell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return Self(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents. The caller upholds that no
    /// mutable access overlaps.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }

    /// Runs `f` with a raw pointer to the contents. The caller upholds exclusivity.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }
}

/// Waiting for another thread without sleeping: spin with a doubling count of pause
/// instructions, then yield the core. Used while a master is still adding checks, when
/// the next one is microseconds away and a futex sleep and wake would cost more than the
/// wait. (crossbeam's `Backoff` does the same but cannot yield to loom.)
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// After the step of 2^6 = 64 pauses, a wait is long enough that spinning stops paying
    /// and the core is yielded.
    const SPIN_LIMIT: u32 = 6;

    pub(crate) fn snooze(&mut self) {
        // Under loom a spin would be an unbounded busy loop: always yield to the model.
        if cfg!(loom) || self.step > Self::SPIN_LIMIT {
            thread::yield_now();
        } else {
            for _ in 0..1u32 << self.step {
                std::hint::spin_loop();
            }
            self.step += 1;
        }
    }
}
