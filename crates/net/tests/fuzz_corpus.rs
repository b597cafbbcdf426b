//! Replays the checked-in `frame` fuzz corpus (`fuzz/corpus/frame/`) through the checks
//! the fuzz target runs, so every finding stays fixed under plain `cargo test`.

use std::path::Path;

#[path = "../../../fuzz/net_checks.rs"]
mod net_checks;

#[test]
fn frame_corpus_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/frame");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        net_checks::frame(&std::fs::read(entry.expect("entry").path()).expect("corpus file"));
        count += 1;
    }
    assert!(count > 0);
}
