//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) through the same checks the
//! fuzz targets run, so every finding stays fixed under plain `cargo test`.

use std::path::Path;

#[path = "../../../fuzz/checks.rs"]
mod checks;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.expect("entry").path()).expect("corpus file");
        check(&data);
        count += 1;
    }
    count
}

#[test]
fn indexed_list_corpus_holds() {
    assert!(replay("indexed_list", checks::indexed_list) > 0);
}

#[test]
fn block_corpus_holds() {
    assert!(replay("block", checks::block) > 0);
}

#[test]
fn transaction_corpus_holds() {
    assert!(replay("transaction", checks::transaction) > 0);
}

#[test]
fn stored_receipts_corpus_holds() {
    assert!(replay("stored_receipts", checks::stored_receipts) > 0);
}

#[test]
fn stored_account_corpus_holds() {
    assert!(replay("stored_account", checks::stored_account) > 0);
}

#[test]
fn stored_diff_corpus_holds() {
    assert!(replay("stored_diff", checks::stored_diff) > 0);
}
