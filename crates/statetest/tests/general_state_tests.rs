//! Every Cancun case of the shared GeneralStateTests (ethereum/tests, in
//! `../shared/vectors/ethereum-tests/GeneralStateTests` beside the repository, or where
//! `STAVE_SHARED_DIR` points) through both executors: a summary per directory, and a
//! failure for any case that does not give the fixture's state root and logs hash, or on
//! which the two executors differ. Skips come only from `SKIPS`, counted per entry.
//!
//! A case is a one-transaction block, which the parallel executor runs on its calling
//! thread alone; its speculation is tested against the serial executor in
//! `crates/exec/tests/parallel.rs`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Mutex,
};

use stave_statetest::{Executors, Runner, SKIPS, Summary, Verdict, fixture_files};

fn shared_dir() -> PathBuf {
    std::env::var_os("STAVE_SHARED_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    )
}

#[test]
fn every_cancun_case_of_the_general_state_tests_passes_in_both_executors() {
    let root = shared_dir().join("vectors/ethereum-tests/GeneralStateTests");
    assert!(
        root.is_dir(),
        "{} is missing: the shared vectors sit beside the repository (or set STAVE_SHARED_DIR)",
        root.display()
    );
    let files = fixture_files(std::slice::from_ref(&root)).expect("the fixtures are readable");
    assert!(files.len() > 2_000, "{} fixture files", files.len());
    // Two workers over the files, each with its own runner (and parallel executor).
    let next = Mutex::new(files.iter());
    let by_dir: Mutex<BTreeMap<String, Summary>> = Mutex::default();
    let failures = Mutex::new(Vec::new());
    let skipped: Mutex<BTreeMap<&str, usize>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let runner = Runner::new(Executors::Both, "Cancun").expect("threads start");
                loop {
                    let Some(file) = next.lock().expect("not poisoned").next() else {
                        break;
                    };
                    let dir = file
                        .strip_prefix(&root)
                        .ok()
                        .and_then(|relative| relative.iter().next())
                        .map_or_else(String::new, |dir| dir.to_string_lossy().into_owned());
                    let reports = runner.run_file(file).expect("every fixture parses");
                    let mut by_dir = by_dir.lock().expect("not poisoned");
                    let summary = by_dir.entry(dir).or_default();
                    for report in reports {
                        summary.add(&report);
                        match &report.verdict {
                            Verdict::Fail(error) => {
                                failures.lock().expect("not poisoned").push(format!(
                                    "{} {} [{}]: {error}",
                                    file.display(),
                                    report.name,
                                    report.index
                                ))
                            }
                            Verdict::Skip(what) => {
                                *skipped
                                    .lock()
                                    .expect("not poisoned")
                                    .entry(what)
                                    .or_default() += 1;
                            }
                            Verdict::Pass => {}
                        }
                    }
                }
            });
        }
    });
    let by_dir = by_dir.into_inner().expect("not poisoned");
    let mut total = Summary::default();
    println!(
        "{:<40} {:>7} {:>7} {:>7}",
        "directory", "passed", "failed", "skipped"
    );
    for (dir, summary) in &by_dir {
        println!(
            "{dir:<40} {:>7} {:>7} {:>7}",
            summary.passed, summary.failed, summary.skipped
        );
        total.total += summary.total;
        total.passed += summary.passed;
        total.failed += summary.failed;
        total.skipped += summary.skipped;
    }
    println!("{}", serde_json::to_string(&total).expect("serializes"));
    // The skip list stays short, and every entry of it still skips something.
    let skipped = skipped.into_inner().expect("not poisoned");
    for skip in SKIPS {
        let count = skipped.get(skip.what).copied().unwrap_or_default();
        println!("{count:>6} skipped: {} ({})", skip.what, skip.reason);
        assert!(count > 0, "{} skips nothing", skip.what);
    }
    let failures = failures.into_inner().expect("not poisoned");
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        total.total,
        failures.join("\n")
    );
    assert!(total.passed > 15_000, "{total:?}");
}
