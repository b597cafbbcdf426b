//! Replays the checked-in corpus of the `config_toml` fuzz target
//! (`fuzz/corpus/config_toml/`) through the check the target runs, so every finding stays
//! fixed under plain `cargo test`, and feeds it random text beyond the corpus.

use std::path::Path;

use proptest::prelude::*;

#[path = "../../../fuzz/config_checks.rs"]
mod config_checks;

#[test]
fn config_toml_corpus_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/config_toml");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        config_checks::config_toml(&std::fs::read(entry.expect("entry").path()).expect("file"));
        count += 1;
    }
    assert!(count > 0, "empty corpus");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Lines of known keys with arbitrary values, so the reader gets past the TOML syntax.
    #[test]
    fn arbitrary_values_of_known_keys_never_panic(
        lines in proptest::collection::vec(
            (
                prop::sample::select(vec![
                    "block_time_ms", "block_txs", "map_size", "pool_max_txs",
                    "pool_max_per_sender", "rpc_addr", "producer", "datadir",
                    "state_cache_entries", "sender_cache_entries", "prefetch_threads",
                ]),
                "[0-9a-z\".:\\[\\]-]{0,24}",
            ),
            0..6,
        )
    ) {
        let text: String = lines.iter().map(|(key, value)| format!("{key} = {value}\n")).collect();
        config_checks::config_toml(text.as_bytes());
    }
}
