//! Replays the checked-in fuzz corpora of the network's decoders (`fuzz/corpus/frame/`,
//! `fuzz/corpus/compact/`, `fuzz/corpus/header_senders/`, `fuzz/corpus/finalized_push/`, `fuzz/corpus/range_request/`) through the checks the fuzz targets run, so every finding stays
//! fixed under plain `cargo test`.

use std::path::Path;

use proptest::prelude::*;

#[path = "../../../fuzz/net_checks.rs"]
mod net_checks;

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
fn frame_corpus_holds() {
    replay("frame", net_checks::frame);
}

#[test]
fn compact_corpus_holds() {
    replay("compact", net_checks::compact);
}

#[test]
fn header_senders_corpus_holds() {
    replay("header_senders", net_checks::header_senders);
}

#[test]
fn finalized_push_corpus_holds() {
    replay("finalized_push", net_checks::finalized_push);
}

#[test]
fn range_request_corpus_holds() {
    replay("range_request", net_checks::range_request);
}

// Random inputs beyond the corpus, on every test run.
proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        net_checks::compact(&data);
    }

    #[test]
    fn arbitrary_header_sender_items_read_back_exactly(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        net_checks::header_senders(&data);
    }

    #[test]
    fn arbitrary_pushes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        net_checks::finalized_push(&data);
    }

    #[test]
    fn arbitrary_range_requests_read_back_or_are_refused(data in proptest::collection::vec(any::<u8>(), 0..40)) {
        net_checks::range_request(&data);
    }

    #[test]
    fn arbitrary_frame_streams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        net_checks::frame(&data);
    }
}
