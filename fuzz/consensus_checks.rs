//! The properties the `consensus_block` and `certified_run` fuzz targets check, shared with
//! `crates/consensus/tests/fuzz_corpus.rs`, which replays the checked-in corpus under
//! `cargo test`: the engine's block codec (a big-endian u32 length in front of the block
//! wire form, docs/wire-formats.md) gives a typed error on hostile bytes, never allocates past
//! its limit, and accepts only a block whose encoding is exactly the bytes it read.

use commonware_codec::{Copying, Encode as _, Read as _};
use stave_consensus::{ConsensusBlock, block::MAX_BLOCK_BYTES};

/// `ConsensusBlock`'s decoder over arbitrary bytes.
pub fn consensus_block(data: &[u8]) {
    let mut rest = Copying(data);
    if let Ok(block) = ConsensusBlock::read_cfg(&mut rest, &()) {
        let consumed = &data[..data.len() - rest.0.len()];
        assert!(block.bytes().len() <= MAX_BLOCK_BYTES);
        assert_eq!(
            block.encode().as_ref(),
            consumed,
            "a block re-encodes as read"
        );
        let decoded = stave_codec::decode_block(block.bytes()).expect("an accepted block decodes");
        assert_eq!(decoded.hash(), block.hash());
    }
}

/// A peer's certified run (`CERTIFIED` answers) over arbitrary bytes, read as gossip reads
/// it (an offset-indexed list: a certificate, then header-and-senders items) and checked
/// as a node catching up checks it: a typed refusal, never a panic, and never a run
/// accepted, since no certificate in the bytes can carry the validators' signatures.
pub fn certified_run(data: &[u8]) {
    use std::{num::NonZeroU64, sync::Arc};

    use stave_consensus::{RunChecker, ValidatorSets, keys};
    use stave_net::{CertifiedRun, HeaderSenders};

    let bytes = bytes::Bytes::copy_from_slice(data);
    let Ok(list) = stave_codec::IndexedList::parse(&bytes) else {
        return;
    };
    let items: Vec<bytes::Bytes> = list.iter().map(|item| bytes.slice_ref(item)).collect();
    let Some((certificate, blocks)) = items.split_first() else {
        return;
    };
    let Some(blocks) = blocks
        .iter()
        .map(HeaderSenders::decode)
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let validators: Vec<_> = (1..=4u8)
        .map(|seed| {
            let key = keys::private_key(&[seed; 32]);
            keys::public_key(&keys::public_key_bytes(&key)).expect("a key")
        })
        .collect();
    let checker = RunChecker::new(
        Arc::new(ValidatorSets::new(&validators)),
        b"stave-fuzz",
        NonZeroU64::new(100).expect("nonzero"),
    );
    let run = CertifiedRun {
        certificate: certificate.clone(),
        blocks,
    };
    let parent = stave_primitives::B256::ZERO;
    assert!(checker.check(&run, 1, parent).is_err());
}
