//! Model checks of the claiming and completion protocol with loom: every interleaving of
//! a master and a worker (within loom's preemption bound) runs each check exactly once,
//! hands every result back, and reports the lowest failure. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p stave-checkqueue --test loom --release`.
#![cfg(loom)]

use loom::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};
use stave_checkqueue::{Check, CheckQueue, Failure};

struct Probe {
    index: usize,
    runs: Arc<AtomicUsize>,
    fail: bool,
    result: usize,
}

impl Check for Probe {
    type Error = usize;
    fn run(&mut self) -> Result<(), usize> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.result = self.index + 100;
        if self.fail { Err(self.index) } else { Ok(()) }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

fn run_round(
    queue: &mut CheckQueue<Probe>,
    n: usize,
    fail: Option<usize>,
) -> (Result<Vec<usize>, Failure<usize>>, usize) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut round = queue.round(n);
    for index in 0..n {
        let probe = Probe {
            index,
            runs: runs.clone(),
            fail: fail == Some(index),
            result: 0,
        };
        assert!(round.push(probe).is_ok());
    }
    let outcome = round.finish().map(|done| done.map(|p| p.result).collect());
    (outcome, runs.load(Ordering::Relaxed))
}

#[test]
fn two_checks_run_once_each_and_results_reach_the_master() {
    model(|| {
        let mut queue = CheckQueue::new(2, 2);
        let (outcome, runs) = run_round(&mut queue, 2, None);
        assert_eq!(outcome, Ok(vec![100, 101]));
        assert_eq!(runs, 2);
    });
}

#[test]
fn a_failure_is_reported_with_its_index() {
    model(|| {
        let mut queue = CheckQueue::new(2, 2);
        let (outcome, runs) = run_round(&mut queue, 2, Some(0));
        assert_eq!(outcome, Err(Failure::Failed { index: 0, error: 0 }));
        assert!(runs >= 1);
    });
}

#[test]
fn consecutive_rounds_do_not_mix() {
    model(|| {
        let mut queue = CheckQueue::new(2, 1);
        let (first, _) = run_round(&mut queue, 1, None);
        assert_eq!(first, Ok(vec![100]));
        let (second, runs) = run_round(&mut queue, 1, None);
        assert_eq!(second, Ok(vec![100]));
        assert_eq!(runs, 1);
    });
}
