//! Replays the checked-in corpus of the `statetest` fuzz target
//! (`fuzz/corpus/statetest/`) through the check the target runs, so every finding stays
//! fixed under plain `cargo test`, and checks that bad fixtures are typed errors.

use std::path::Path;

use stave_statetest::{FixtureError, parse};

#[path = "../../../fuzz/statetest_checks.rs"]
mod statetest_checks;

fn corpus(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/statetest")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn statetest_corpus_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/statetest");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        statetest_checks::statetest(&std::fs::read(entry.expect("entry").path()).expect("file"));
        count += 1;
    }
    assert!(count > 0, "empty corpus");
}

#[test]
fn bad_fixtures_are_typed_errors_naming_what_is_wrong() {
    assert!(matches!(
        parse(&corpus("truncated")),
        Err(FixtureError::Json(_))
    ));
    match parse(&corpus("gas_limit_too_large")) {
        Err(FixtureError::TooLarge { field, .. }) => assert_eq!(field, "currentGasLimit"),
        other => panic!("{other:?}"),
    }
    match parse(&corpus("bad_slot")) {
        Err(FixtureError::BadSlot { slot, .. }) => assert_eq!(slot, "slot"),
        other => panic!("{other:?}"),
    }
    assert_eq!(parse(b"{}").expect("no tests is a fixture"), Vec::new());
}

#[test]
fn a_fixture_parses_into_its_cases_with_their_indexes_and_expectations() {
    let tests = parse(&corpus("invalidTr.json")).expect("parses");
    assert_eq!(tests.len(), 1);
    let test = &tests[0];
    assert_eq!(test.name, "invalidTr");
    let cancun: Vec<_> = test
        .cases
        .iter()
        .filter(|case| case.fork == "Cancun")
        .collect();
    assert!(!cancun.is_empty());
    assert!(
        cancun.iter().any(|case| case.expect_exception.is_some()),
        "invalidTr expects an invalid transaction"
    );
    for (position, case) in cancun.iter().enumerate() {
        assert_eq!(case.index, position);
    }
}
