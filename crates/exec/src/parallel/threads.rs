//! Hand-offs between the calling thread and the executor's pool, kept short: the caller
//! spins for the jobs it spawned ([`Spawned`]), a pool thread whose next job follows
//! closely waits for it awake ([`linger`]), and two halves of a step run side by side
//! with the caller working too ([`side_by_side`]).

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

/// Runs `there` on `pool` and `here` on this thread, and returns both results. Unlike
/// `pool.join` called from outside the pool, the calling thread works too. `here` is
/// handed a probe that tells whether `there` is done, to stop work it does meanwhile.
pub(super) fn side_by_side<T: Send, H>(
    pool: &rayon::ThreadPool,
    there: impl FnOnce() -> T + Send,
    here: impl FnOnce(&dyn Fn() -> bool) -> H,
) -> (T, H) {
    let mut far = None;
    let spawned = Spawned::default();
    let near = pool.in_place_scope(|scope| {
        spawned.spawn(scope, || far = Some(there()));
        let near = here(&|| spawned.done());
        spawned.wait();
        near
    });
    (far.expect("the scope ran the spawned task"), near)
}

/// How long a pool thread that [`linger`]s waits awake for its next job.
pub(super) const LINGER_FOR: Duration = Duration::from_micros(500);

/// Where a thread is in a [`linger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lingering {
    /// Not lingering.
    No,
    /// Waiting for its next job, or running it.
    Yes,
    /// The job it ran asked to linger again.
    Renewed,
}

thread_local! {
    static LINGERING: std::cell::Cell<Lingering> = const { std::cell::Cell::new(Lingering::No) };
}

/// Called at the end of a job on `pool` that another job on it follows closely (a
/// speculator by the merge, the merge by the block's roots, the roots by the commit
/// stage's halves): keeps the thread awake for `wait` ([`LINGER_FOR`]) in a job of its
/// own (the calling job ends, and the scope it belongs to can), running the next job as
/// it comes. A rayon worker left without work sleeps after a few yields, and a sleeping
/// thread comes back late (see [`Spawned`]): `bench exec` measured a speculated chunk's
/// check-to-merged time clearly shorter with the speculators' threads kept awake. A job
/// run while lingering that lingers too extends the wait rather than nesting another.
pub(super) fn linger(pool: &rayon::ThreadPool, wait: Duration) {
    if LINGERING.with(|state| state.get()) != Lingering::No {
        LINGERING.with(|state| state.set(Lingering::Renewed));
        return;
    }
    pool.spawn(move || {
        LINGERING.with(|state| state.set(Lingering::Yes));
        let mut until = Instant::now() + wait;
        while Instant::now() < until {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {
                    let asked = LINGERING.with(|state| state.replace(Lingering::Yes));
                    if asked != Lingering::Renewed {
                        break;
                    }
                    until = Instant::now() + wait;
                }
                _ => std::hint::spin_loop(),
            }
        }
        LINGERING.with(|state| state.set(Lingering::No));
    });
}

/// Jobs spawned on the executor's pool from the calling thread, which waits for them by
/// spinning before it leaves their scope. The calling thread is not one of the pool's: in
/// rayon's scope it sleeps until the last job ends, and a sleeping thread comes back
/// long after it (a futex wake and an inter-processor interrupt on a virtual machine),
/// at up to three hand-offs a block.
#[derive(Debug, Default)]
pub(super) struct Spawned(AtomicUsize);

impl Spawned {
    /// How long the calling thread spins before it lets the scope put it to sleep: about
    /// the gap between two chunks of a transfer block that finish apart.
    const SPIN_FOR: Duration = Duration::from_micros(300);

    /// Spawns `job` in `scope`, counted until it has run.
    pub(super) fn spawn<'scope>(
        &'scope self,
        scope: &rayon::Scope<'scope>,
        job: impl FnOnce() + Send + 'scope,
    ) {
        self.0.fetch_add(1, Ordering::Relaxed);
        scope.spawn(move |_| {
            job();
            self.0.fetch_sub(1, Ordering::Release);
        });
    }

    /// True when every spawned job has run.
    pub(super) fn done(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// Spins until every spawned job has run, or for [`Spawned::SPIN_FOR`] at most.
    pub(super) fn wait(&self) {
        let started = Instant::now();
        while !self.done() && started.elapsed() < Self::SPIN_FOR {
            std::hint::spin_loop();
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_spins_for_its_jobs_but_not_past_its_bound() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread");
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (mut quick, mut held) = (false, None);
        let spawned = Spawned::default();
        pool.in_place_scope(|scope| {
            spawned.spawn(scope, || quick = true);
            // A job that waits for this thread: the spin gives up after its bound, or
            // this thread would never release it.
            let held = &mut held;
            spawned.spawn(scope, move || {
                *held = Some(released.recv_timeout(Duration::from_secs(10)).is_ok());
            });
            let spinning = Instant::now();
            spawned.wait();
            assert!(spinning.elapsed() >= Spawned::SPIN_FOR);
            release.send(()).expect("the job waits");
        });
        assert!(quick);
        assert_eq!(held, Some(true), "released by this thread, not timed out");
        assert_eq!(spawned.0.into_inner(), 0, "every job counted out");
    }
    #[test]
    fn a_lingering_thread_runs_the_next_job_and_lingers_on_only_when_it_asks() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread");
        // Long enough for this thread to hand the next job over however late it wakes.
        let long = Duration::from_secs(10);
        let state = || pool.install(|| LINGERING.with(std::cell::Cell::get));
        pool.install(|| linger(&pool, long));
        assert_eq!(state(), Lingering::Yes, "run by the lingering thread");
        assert_eq!(state(), Lingering::No, "that job did not ask for more");
        pool.install(|| linger(&pool, long));
        let asked = pool.install(|| {
            linger(&pool, long);
            LINGERING.with(std::cell::Cell::get)
        });
        assert_eq!(asked, Lingering::Renewed, "no second linger nested");
        assert_eq!(state(), Lingering::Yes, "the linger went on");
        assert_eq!(state(), Lingering::No);
        pool.install(|| linger(&pool, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(state(), Lingering::No, "a linger ends on its own");
    }
}
