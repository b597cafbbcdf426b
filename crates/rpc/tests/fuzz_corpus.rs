//! Replays the checked-in corpus of the JSON-RPC parameter fuzz target
//! (`fuzz/corpus/rpc_params/`) through the check it runs, so every finding stays fixed
//! under plain `cargo test`.

use std::path::Path;

// Its chain's store handle is for `tests/rpc.rs`, not the check.
#[allow(dead_code)]
#[path = "../../../fuzz/rpc_checks.rs"]
mod rpc_checks;

#[test]
fn rpc_params_corpus_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rpc_params");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        rpc_checks::rpc_params(&std::fs::read(entry.expect("entry").path()).expect("corpus file"));
        count += 1;
    }
    assert!(count > 0, "empty corpus");
}
