//! Replays the checked-in corpora of the `consensus_block` and `certified_run` fuzz targets
//! (`fuzz/corpus/consensus_block/`, `fuzz/corpus/certified_run/`) through the checks the
//! targets run, so every finding
//! stays fixed under plain `cargo test`, and feeds it random bytes beyond the corpus.

use std::path::Path;

use proptest::prelude::*;

#[path = "../../../fuzz/consensus_checks.rs"]
mod consensus_checks;

/// Runs `check` over every file of the corpus of fuzz target `target`.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        check(&std::fs::read(entry.expect("entry").path()).expect("corpus file"));
        count += 1;
    }
    assert!(count > 0, "{target}: empty corpus");
}

#[test]
fn consensus_block_corpus_holds() {
    replay("consensus_block", consensus_checks::consensus_block);
}

#[test]
fn certified_run_corpus_holds() {
    replay("certified_run", consensus_checks::certified_run);
}

#[test]
fn a_real_block_passes_and_every_truncation_is_refused() {
    use commonware_codec::{Copying, Encode as _, Read as _};
    use stave_consensus::ConsensusBlock;

    let block = ConsensusBlock::genesis(&stave_primitives::ChainSpec::dev(9, 2));
    let encoded = block.encode();
    consensus_checks::consensus_block(&encoded);
    let decoded = ConsensusBlock::read_cfg(&mut Copying(encoded.as_ref()), &()).expect("decodes");
    assert_eq!(decoded.hash(), block.hash());
    for len in 0..encoded.len() {
        assert!(
            ConsensusBlock::read_cfg(&mut Copying(&encoded[..len]), &()).is_err(),
            "a block truncated to {len} bytes was accepted"
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        consensus_checks::consensus_block(&data);
        consensus_checks::certified_run(&data);
    }
}
