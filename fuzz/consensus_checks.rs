//! The property the `consensus_block` fuzz target checks, shared with
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
