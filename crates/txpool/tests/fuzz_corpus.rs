//! Replays the checked-in corpus of the txpool fuzz target (`fuzz/corpus/txpool_ops/`)
//! through the check it runs, and random operation sequences beyond it, so every finding
//! stays fixed under plain `cargo test`.

use std::path::Path;

use proptest::prelude::*;

#[path = "../../../fuzz/txpool_checks.rs"]
mod txpool_checks;

#[test]
fn txpool_ops_corpus_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/txpool_ops");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        txpool_checks::txpool_ops(
            &std::fs::read(entry.expect("entry").path()).expect("corpus file"),
        );
        count += 1;
    }
    assert!(count > 0, "empty corpus");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_operation_sequences_keep_the_pool_consistent(
        data in proptest::collection::vec(any::<u8>(), 0..400)
    ) {
        txpool_checks::txpool_ops(&data);
    }
}
