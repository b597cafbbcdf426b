//! The properties the `frame`, `compact`, `header_senders`, `finalized_push` and `range_request` fuzz targets check, shared with
//! `crates/net/tests/fuzz_corpus.rs`, which replays the checked-in corpus under `cargo
//! test`: hostile bytes give a typed error or frames within the limits, and every frame
//! decoded survives encoding and decoding again unchanged.

use bytes::BytesMut;
use stave_net::{FrameCodec, FrameConfig, encode_frame};
use tokio_util::codec::Decoder;

/// Small limits, so the fuzzer reaches them.
const CONFIG: FrameConfig = FrameConfig {
    max_frame: 1 << 16,
    max_payload: 1 << 16,
    compress_above: Some(64),
};

/// The frame decoder over a stream of arbitrary bytes.
pub fn frame(data: &[u8]) {
    let mut codec = FrameCodec::new(CONFIG);
    let mut buffer = BytesMut::from(data);
    while let Ok(Some(frame)) = codec.decode(&mut buffer) {
        assert!(frame.payload.len() <= CONFIG.max_payload);
        let encoded = encode_frame(&frame, &CONFIG).expect("a decoded frame re-encodes");
        let mut again = BytesMut::from(&encoded[..]);
        let decoded = codec.decode(&mut again).expect("decodes").expect("whole");
        assert_eq!(decoded, frame);
    }
}

/// Most transactions the `compact` target lets a block declare.
const MAX_TXS: usize = 1 << 12;

/// The compact-block and block-splitting decoders over arbitrary bytes: a typed error, or
/// a value whose encoding is exactly the input (both forms are canonical).
pub fn compact(data: &[u8]) {
    if let Ok(compact) = stave_net::decode_compact(data, MAX_TXS) {
        assert!(compact.short_ids.len() <= MAX_TXS);
        assert_eq!(compact.encode(), data);
    }
    if let Ok(block) = stave_net::BlockParts::from_block(data) {
        assert_eq!(block.encode().expect("a decoded block re-encodes"), data);
    }
}

/// A peer's header and senders of one block (`CERTIFIED` responses): a length, that many
/// header bytes and whole 20-byte senders, read back exactly, or nothing.
pub fn header_senders(data: &[u8]) {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let decoded = stave_net::HeaderSenders::decode(&bytes);
    let well_formed = data.len() >= 4 && {
        let length = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
        (data.len() - 4)
            .checked_sub(length)
            .is_some_and(|rest| rest.is_multiple_of(20))
    };
    assert_eq!(decoded.is_some(), well_formed);
    if let Some(item) = decoded {
        assert_eq!(item.encode(), data);
    }
}

/// A validator's push of a finalized block (`FINALIZED`): a typed error, or a push that
/// encodes to bytes decoding to itself, with one sender per short id and a certificate.
pub fn finalized_push(data: &[u8]) {
    if let Ok(push) = stave_net::FinalizedPush::decode(data, MAX_TXS) {
        assert_eq!(push.senders.len(), push.compact.short_ids.len());
        assert!(!push.certificate.is_empty());
        let encoded = push.encode().expect("a decoded push re-encodes");
        let again = stave_net::FinalizedPush::decode(&encoded, MAX_TXS).expect("decodes");
        assert_eq!(again, push);
    }
}

/// A peer's request for blocks by number (`BLOCKS`, `CERTIFIED`): exactly 12 bytes read
/// back exactly, anything else a typed refusal naming its length.
pub fn range_request(data: &[u8]) {
    use stave_net::gossip::{RangeRequest, RangeRequestError};
    match RangeRequest::decode(data) {
        Ok(request) => assert_eq!(request.encode(), data),
        Err(RangeRequestError::Length(len)) => {
            assert_eq!(len, data.len());
            assert_ne!(len, RangeRequest::LEN);
        }
        Err(error) => panic!("unexpected refusal: {error}"),
    }
}
