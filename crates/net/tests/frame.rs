//! The frame codec: round trips, compression above the threshold, and every hostile case
//! refused with its typed error before anything large is buffered or allocated.

mod support;

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use stave_net::{
    Frame, FrameCodec, FrameConfig, FrameError, ProtocolId, encode_frame,
    frame::{COMPRESSED, HEADER_LEN, VERSION},
};
use support::incompressible;
use tokio_util::codec::{Decoder, Encoder};

fn frame(payload: Vec<u8>) -> Frame {
    Frame {
        version: VERSION,
        protocol_id: ProtocolId::request(3, 1001),
        packet_type: 7,
        seq: 42,
        payload: Bytes::from(payload),
    }
}

fn decode_all(codec: &mut FrameCodec, bytes: &[u8]) -> Result<Option<Frame>, FrameError> {
    codec.decode(&mut BytesMut::from(bytes))
}

proptest! {
    #[test]
    fn frames_round_trip_and_compress_only_above_the_threshold(
        payload in prop::collection::vec(any::<u8>(), 0..3000),
        repeat in 1usize..4,
    ) {
        let payload: Vec<u8> = payload.repeat(repeat);
        let config = FrameConfig::default();
        let original = frame(payload.clone());
        let wire = encode_frame(&original, &config).expect("encodes");
        let compressed = u16::from_be_bytes([wire[4], wire[5]]) & COMPRESSED != 0;
        prop_assert_eq!(compressed, payload.len() > 1024);
        // The payload on the wire is standard raw Snappy, or the payload itself.
        let expected = if compressed {
            snap::raw::Encoder::new().compress_vec(&payload).expect("compresses")
        } else {
            payload.clone()
        };
        prop_assert_eq!(&wire[HEADER_LEN..], &expected[..]);
        prop_assert_eq!(u32::from_be_bytes([wire[0], wire[1], wire[2], wire[3]]) as usize, wire.len());
        let mut codec = FrameCodec::new(config);
        // Byte by byte: nothing until the last byte, then the frame.
        let mut buffer = BytesMut::new();
        for (i, byte) in wire.iter().enumerate() {
            buffer.put_u8(*byte);
            let decoded = codec.decode(&mut buffer).expect("valid");
            prop_assert_eq!(decoded.is_some(), i == wire.len() - 1);
            if let Some(decoded) = decoded {
                prop_assert_eq!(&decoded, &original);
            }
        }
    }
}

#[test]
fn the_header_is_sixteen_big_endian_bytes_as_designed() {
    // A response in group 3, module 1001, type 7, seq 42, with a 5-byte payload (sent raw).
    let mut response = frame(b"hello".to_vec());
    response.protocol_id = response.protocol_id.response();
    let wire = encode_frame(&response, &FrameConfig::default()).expect("encodes");
    #[rustfmt::skip]
    let golden: [u8; HEADER_LEN] = [
        0x00, 0x00, 0x00, 0x15, // length: 16 + 5
        0x00, 0x01,             // version 1, not compressed
        0xff, 0xfc, 0xfc, 0x17, // protocol_id: -((3 << 16) | 1001)
        0x00, 0x07,             // packet_type
        0x00, 0x00, 0x00, 0x2a, // seq
    ];
    assert_eq!(wire[..HEADER_LEN], golden);
    assert_eq!(&wire[HEADER_LEN..], b"hello");
    // Above the threshold: bit 15 of the version set, the length that of the compressed
    // payload, the rest as before.
    let request = frame(vec![0xab; 4096]);
    let wire = encode_frame(&request, &FrameConfig::default()).expect("encodes");
    assert_eq!(wire[..4], (wire.len() as u32).to_be_bytes());
    assert!(wire.len() < HEADER_LEN + 4096);
    assert_eq!(
        wire[4..HEADER_LEN],
        [
            0x80, 0x01, 0x00, 0x03, 0x03, 0xe9, 0x00, 0x07, 0x00, 0x00, 0x00, 0x2a
        ]
    );
}

#[test]
fn protocol_ids_carry_group_module_and_direction() {
    let request = ProtocolId::request(2, 0x1003);
    assert!(!request.is_response());
    assert_eq!((request.group(), request.module()), (2, 0x1003));
    let response = request.response();
    assert!(response.is_response());
    assert_eq!((response.group(), response.module()), (2, 0x1003));
}

#[test]
fn a_payload_over_the_limit_is_refused_by_sender_and_receiver() {
    let config = FrameConfig {
        max_frame: 1 << 12,
        max_payload: 1 << 10,
        compress_above: None,
    };
    let big = frame(vec![7; 1500]);
    assert!(matches!(
        encode_frame(&big, &config),
        Err(FrameError::PayloadTooLarge {
            length: 1500,
            max: 1024
        })
    ));
    // A peer with looser limits sends it anyway: refused on arrival.
    let loose = FrameConfig {
        max_payload: 1 << 12,
        ..config
    };
    let wire = encode_frame(&big, &loose).expect("encodes");
    assert!(matches!(
        decode_all(&mut FrameCodec::new(config), &wire),
        Err(FrameError::PayloadTooLarge { length: 1500, .. })
    ));
}

#[test]
fn the_default_limits_admit_a_whole_block_however_it_compresses() {
    let config = FrameConfig::default();
    // A 32 MiB block with 64 KiB of consensus framing, even incompressible.
    let message = (32 << 20) + (64 << 10);
    assert!(config.admits_payload(message));
    assert!(!config.admits_payload(config.max_payload + 1));
    let tight = FrameConfig {
        max_frame: HEADER_LEN + message,
        max_payload: message,
        compress_above: Some(1024),
    };
    assert!(!tight.admits_payload(message), "snappy may grow it");
    assert!(
        FrameConfig {
            compress_above: None,
            ..tight
        }
        .admits_payload(message)
    );
    // Random bytes do not compress: the frame still fits.
    let payload = incompressible(message);
    let wire = encode_frame(&frame(payload.clone()), &config).expect("encodes");
    let decoded = decode_all(&mut FrameCodec::new(config), &wire)
        .expect("valid")
        .expect("whole");
    assert_eq!(decoded.payload.len(), payload.len());
}

#[test]
fn a_length_shorter_than_the_header_is_refused() {
    let mut codec = FrameCodec::default();
    let mut bytes = vec![0u8; HEADER_LEN];
    bytes[3] = 15;
    assert!(matches!(
        decode_all(&mut codec, &bytes),
        Err(FrameError::TooShort { length: 15 })
    ));
}

#[test]
fn an_oversize_frame_is_refused_from_its_header_alone() {
    let mut codec = FrameCodec::new(FrameConfig {
        max_frame: 1 << 10,
        ..FrameConfig::default()
    });
    // Only the 4 length bytes have arrived: the refusal does not wait for 2 KiB.
    let header = 2048u32.to_be_bytes();
    assert!(matches!(
        decode_all(&mut codec, &header),
        Err(FrameError::TooLarge {
            length: 2048,
            max: 1024
        })
    ));
    // And the sender refuses to build one.
    let big = frame(vec![7; 2000]);
    let config = FrameConfig {
        max_frame: 1 << 10,
        compress_above: None,
        ..FrameConfig::default()
    };
    assert!(matches!(
        encode_frame(&big, &config),
        Err(FrameError::TooLarge { .. })
    ));
}

/// A frame with the compressed flag and `payload` as its compressed bytes.
fn raw_compressed(payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u32((HEADER_LEN + payload.len()) as u32);
    out.put_u16(VERSION | COMPRESSED);
    out.put_i32(ProtocolId::request(1, 1).0);
    out.put_u16(0);
    out.put_u32(1);
    out.put_slice(payload);
    out.to_vec()
}

#[test]
fn a_decompression_bomb_is_refused_before_allocating() {
    let mut codec = FrameCodec::default();
    // Snappy's header is the uncompressed length as a varint: claim 4 GiB - 1 in 5 bytes.
    let bomb = raw_compressed(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00]);
    assert!(matches!(
        decode_all(&mut codec, &bomb),
        Err(FrameError::DecompressedTooLarge {
            declared: 0xffff_ffff,
            ..
        })
    ));
}

#[test]
fn corrupt_compressed_bytes_are_refused() {
    let mut codec = FrameCodec::default();
    // Declares 100 bytes, then a literal tag running past the end.
    let corrupt = raw_compressed(&[100, 0xfc, 0xff, 0x01]);
    assert!(matches!(
        decode_all(&mut codec, &corrupt),
        Err(FrameError::Decompression(_))
    ));
}

#[test]
fn an_unknown_version_is_refused() {
    let mut wire = encode_frame(&frame(vec![1, 2, 3]), &FrameConfig::default())
        .expect("encodes")
        .to_vec();
    wire[5] = 9;
    assert!(matches!(
        decode_all(&mut FrameCodec::default(), &wire),
        Err(FrameError::UnknownVersion(9))
    ));
}

#[test]
fn a_broadcast_is_compressed_once_and_sent_as_is() {
    let config = FrameConfig::default();
    let wire = encode_frame(&frame(vec![5; 10_000]), &config).expect("encodes");
    assert!(wire.len() < 1_000, "{} bytes", wire.len());
    let mut codec = FrameCodec::new(config);
    let mut out = BytesMut::new();
    for _ in 0..3 {
        codec.encode(wire.clone(), &mut out).expect("sends");
    }
    for _ in 0..3 {
        let decoded = codec.decode(&mut out).expect("valid").expect("whole");
        assert_eq!(decoded.payload.len(), 10_000);
    }
    assert!(out.is_empty());
}
