//! Properties of the queue under real threads: each check runs once, the lowest failure
//! is reported, panics are contained, memory is freed, and the queue recovers.
#![cfg(not(loom))]

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use stave_checkqueue::{Check, CheckQueue, Failure};

/// Counts its runs, optionally fails or panics, and records a result in itself.
struct Probe {
    index: usize,
    runs: Arc<Vec<AtomicUsize>>,
    fail: bool,
    panic: bool,
    result: Option<usize>,
    _alive: Arc<()>,
}

impl Check for Probe {
    type Error = usize;
    fn run(&mut self) -> Result<(), usize> {
        self.runs[self.index].fetch_add(1, Ordering::Relaxed);
        if self.panic {
            panic!("probe {} panics on purpose", self.index);
        }
        self.result = Some(self.index * 2);
        if self.fail { Err(self.index) } else { Ok(()) }
    }
}

fn probes(n: usize, runs: &Arc<Vec<AtomicUsize>>, alive: &Arc<()>, fail: &[usize]) -> Vec<Probe> {
    (0..n)
        .map(|index| Probe {
            index,
            runs: Arc::clone(runs),
            fail: fail.contains(&index),
            panic: false,
            result: None,
            _alive: Arc::clone(alive),
        })
        .collect()
}

fn counters(n: usize) -> Arc<Vec<AtomicUsize>> {
    Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
}

#[test]
fn each_check_runs_exactly_once_for_0_1_and_random_sizes() {
    let mut queue = CheckQueue::new(4, 8);
    let mut rng = StdRng::seed_from_u64(7);
    let alive = Arc::new(());
    let mut sizes = vec![0, 1, 2, 8, 9];
    sizes.extend((0..200).map(|_| rng.random_range(0..3_000)));
    for n in sizes {
        let runs = counters(n);
        let mut round = queue.round(n);
        for probe in probes(n, &runs, &alive, &[]) {
            assert!(round.push(probe).is_ok());
        }
        let results: Vec<Option<usize>> = round
            .finish()
            .expect("no failures")
            .map(|p| p.result)
            .collect();
        assert_eq!(results.len(), n);
        for (i, result) in results.iter().enumerate() {
            assert_eq!(
                *result,
                Some(i * 2),
                "result of check {i} is visible to the master"
            );
            assert_eq!(
                runs[i].load(Ordering::Relaxed),
                1,
                "check {i} of {n} ran once"
            );
        }
    }
    assert_eq!(Arc::strong_count(&alive), 1, "every check was dropped");
}

#[test]
fn reports_the_lowest_failing_index_and_runs_everything_below_it() {
    let mut queue = CheckQueue::new(3, 64);
    let mut rng = StdRng::seed_from_u64(11);
    let alive = Arc::new(());
    for _ in 0..300 {
        let n = rng.random_range(1..2_000);
        let failing: Vec<usize> = (0..rng.random_range(1..4))
            .map(|_| rng.random_range(0..n))
            .collect();
        let lowest = *failing.iter().min().expect("non-empty");
        let runs = counters(n);
        let mut round = queue.round(n);
        for probe in probes(n, &runs, &alive, &failing) {
            assert!(round.push(probe).is_ok());
        }
        assert_eq!(
            round.finish().unwrap_err(),
            Failure::Failed {
                index: lowest,
                error: lowest
            }
        );
        for i in 0..=lowest {
            assert_eq!(
                runs[i].load(Ordering::Relaxed),
                1,
                "check {i} below the failure ran"
            );
        }
        for i in lowest + 1..n {
            assert!(
                runs[i].load(Ordering::Relaxed) <= 1,
                "check {i} ran at most once"
            );
        }
    }
    assert_eq!(
        Arc::strong_count(&alive),
        1,
        "failed rounds drop their checks"
    );
}

#[test]
fn a_panicking_check_is_reported_and_the_queue_recovers() {
    let mut queue = CheckQueue::new(2, 16);
    let alive = Arc::new(());
    let runs = counters(100);
    let mut round = queue.round(100);
    for mut probe in probes(100, &runs, &alive, &[]) {
        probe.panic = probe.index == 40;
        assert!(round.push(probe).is_ok());
    }
    assert_eq!(round.finish().unwrap_err(), Failure::Panicked { index: 40 });
    // Same queue, same workers: the next round is whole.
    let runs = counters(50);
    let mut round = queue.round(50);
    for probe in probes(50, &runs, &alive, &[]) {
        assert!(round.push(probe).is_ok());
    }
    assert_eq!(round.finish().expect("recovered").count(), 50);
    assert_eq!(Arc::strong_count(&alive), 1);
}

#[test]
fn dropping_an_unfinished_round_waits_and_frees_its_checks() {
    let mut queue = CheckQueue::new(2, 8);
    let alive = Arc::new(());
    let runs = counters(500);
    {
        let mut round = queue.round(500);
        for probe in probes(500, &runs, &alive, &[]) {
            assert!(round.push(probe).is_ok());
        }
    }
    assert_eq!(Arc::strong_count(&alive), 1);
    assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
    // A partly consumed result set frees the rest too.
    let mut round = queue.round(10);
    for probe in probes(10, &counters(10), &alive, &[]) {
        assert!(round.push(probe).is_ok());
    }
    let mut completed = round.finish().expect("ok");
    assert_eq!(completed.next().map(|p| p.index), Some(0));
    drop(completed);
    assert_eq!(Arc::strong_count(&alive), 1);
}

#[test]
fn a_full_round_gives_the_check_back() {
    let mut queue = CheckQueue::new(2, 2);
    let alive = Arc::new(());
    let runs = counters(3);
    let mut round = queue.round(2);
    let mut all = probes(3, &runs, &alive, &[]).into_iter();
    assert!(round.push(all.next().expect("probe")).is_ok());
    assert!(round.push(all.next().expect("probe")).is_ok());
    let refused = round.push(all.next().expect("probe")).expect_err("full");
    assert_eq!(refused.index, 2);
    assert_eq!(round.finish().expect("ok").len(), 2);
}

#[test]
fn single_thread_queue_runs_everything_on_the_master() {
    let mut queue = CheckQueue::new(1, 4);
    assert_eq!(queue.threads(), 1);
    let alive = Arc::new(());
    let runs = counters(1_000);
    let mut round = queue.round(1_000);
    for probe in probes(1_000, &runs, &alive, &[999]) {
        assert!(round.push(probe).is_ok());
    }
    assert_eq!(round.finish().unwrap_err().index(), 999);
}
