//! The P2P frame (as FISCO BCOS 2.x, all big-endian; see docs/wire-formats.md, P2P frame):
//!
//! ```text
//! off size field
//! 0   4    length        16 + payload bytes as sent
//! 4   2    version       bit 15 set = payload is Snappy (raw format) compressed
//! 6   4    protocol_id   (group_id: i16) << 16 | module_id: u16 ; negative = response
//! 10  2    packet_type
//! 12  4    seq
//! 16  ...  payload
//! ```
//!
//! Unlike the original, the decoder refuses a frame longer than the limit from its header,
//! before buffering it; checks a compressed payload's declared length against the limit
//! before allocating; and never hands compressed bytes upward. Every refusal is a typed
//! [`FrameError`], on which the connection is closed and the peer scored down.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes of the header.
pub const HEADER_LEN: usize = 16;
/// Bit of `version` that marks a Snappy-compressed payload.
pub const COMPRESSED: u16 = 0x8000;
/// Default largest payload (after decompression): 33 MiB, so a consensus message carrying a
/// whole block (at most 32 MiB) and its framing fits.
pub const DEFAULT_MAX_PAYLOAD: usize = 33 << 20;
/// Default largest frame, header included: the header and the most Snappy may turn
/// [`DEFAULT_MAX_PAYLOAD`] into (`32 + n + n / 6` bytes, for incompressible input).
pub const DEFAULT_MAX_FRAME: usize =
    HEADER_LEN + 32 + DEFAULT_MAX_PAYLOAD + DEFAULT_MAX_PAYLOAD / 6;
/// Default size above which payloads are compressed: 1 KiB.
pub const DEFAULT_COMPRESS_ABOVE: usize = 1024;

/// Limits and compression of a connection's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameConfig {
    /// Largest frame accepted or sent, header included.
    pub max_frame: usize,
    /// Largest payload after decompression.
    pub max_payload: usize,
    /// Payloads longer than this are compressed; `None` sends everything raw.
    pub compress_above: Option<usize>,
}

impl Default for FrameConfig {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            max_payload: DEFAULT_MAX_PAYLOAD,
            compress_above: Some(DEFAULT_COMPRESS_ABOVE),
        }
    }
}

impl FrameConfig {
    /// True if every payload of `len` bytes can be sent and received under these limits,
    /// however badly it compresses: for layers that must fit messages of a known largest size.
    pub fn admits_payload(&self, len: usize) -> bool {
        let largest_body = match self.compress_above {
            // Snappy's bound; 0 means the input is too large for it.
            Some(above) if len > above => match snap::raw::max_compress_len(len) {
                0 => return false,
                bound => bound,
            },
            _ => len,
        };
        len <= self.max_payload && HEADER_LEN + largest_body <= self.max_frame
    }
}

/// Which group and module a frame is for, and whether it answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolId(pub i32);

impl ProtocolId {
    /// The request id of `module` in `group` (a non-negative group).
    pub fn request(group: i16, module: u16) -> Self {
        Self((i32::from(group) << 16) | i32::from(module))
    }

    /// The id a response to a request with this id carries: its negation.
    pub fn response(self) -> Self {
        Self(self.0.wrapping_neg())
    }

    /// True for a response.
    pub fn is_response(self) -> bool {
        self.0 < 0
    }

    /// The group (of the request this is or answers).
    pub fn group(self) -> i16 {
        (self.0.unsigned_abs() >> 16) as i16
    }

    /// The module (of the request this is or answers).
    pub fn module(self) -> u16 {
        (self.0.unsigned_abs() & 0xffff) as u16
    }
}

/// A frame as the layers above see it: the payload always uncompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Protocol version (bit 15 is the codec's, never set here).
    pub version: u16,
    /// Group, module and direction.
    pub protocol_id: ProtocolId,
    /// Message type within the module.
    pub packet_type: u16,
    /// Matches a response to its request.
    pub seq: u32,
    /// The message.
    pub payload: Bytes,
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The header's length is shorter than the header itself.
    #[error("frame length {length} is shorter than the {HEADER_LEN}-byte header")]
    TooShort {
        /// The declared length.
        length: usize,
    },
    /// The frame is longer than the limit.
    #[error("frame of {length} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The declared (or encoded) length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// A compressed payload declares more bytes than the limit (a decompression bomb).
    #[error("compressed payload declares {declared} bytes, more than the limit of {max}")]
    DecompressedTooLarge {
        /// The length its Snappy header declares.
        declared: usize,
        /// The limit.
        max: usize,
    },
    /// An uncompressed payload is longer than the payload limit.
    #[error("payload of {length} bytes exceeds the limit of {max}")]
    PayloadTooLarge {
        /// The payload's length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// The payload is not valid Snappy.
    #[error("payload does not decompress: {0}")]
    Decompression(String),
    /// Snappy refused to compress the payload (on the sending side: too large for it).
    #[error("payload does not compress: {0}")]
    Compression(String),
    /// The version uses bits this node does not know.
    #[error("unknown frame version {0:#06x}")]
    UnknownVersion(u16),
    /// Reading or writing the socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The version this node speaks.
pub const VERSION: u16 = 1;

/// The protocol id of keepalive frames (group `0x7fff`, module 0, empty payload): a
/// connection with nothing else to send sends one now and then, and the peer's reader
/// takes it as a sign of life and passes it to no module.
pub const KEEPALIVE: ProtocolId = ProtocolId(0x7fff_0000);

/// A keepalive frame, encoded.
pub fn keepalive_frame() -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN);
    out.put_u32(HEADER_LEN as u32);
    out.put_u16(VERSION);
    out.put_i32(KEEPALIVE.0);
    out.put_u16(0);
    out.put_u32(0);
    out.freeze()
}

/// Encodes `frame` once (compressing it if it is large), for one peer or a broadcast to
/// many: the returned bytes are cheap to clone. A payload over `max_payload` is refused
/// here, since the peer's decoder would refuse it (and charge this node for it).
pub fn encode_frame(frame: &Frame, config: &FrameConfig) -> Result<Bytes, FrameError> {
    if frame.payload.len() > config.max_payload {
        return Err(FrameError::PayloadTooLarge {
            length: frame.payload.len(),
            max: config.max_payload,
        });
    }
    let compress = config
        .compress_above
        .is_some_and(|above| frame.payload.len() > above);
    // The payload goes straight after the header (compressed there, not compressed into
    // a buffer of its own and copied); the header is written once its length is known.
    let (version, mut out) = if compress {
        let bound = snap::raw::max_compress_len(frame.payload.len());
        let mut out = BytesMut::zeroed(HEADER_LEN + bound);
        let written = snap::raw::Encoder::new()
            .compress(&frame.payload, &mut out[HEADER_LEN..])
            .map_err(|error| FrameError::Compression(error.to_string()))?;
        out.truncate(HEADER_LEN + written);
        (frame.version | COMPRESSED, out)
    } else {
        let mut out = BytesMut::with_capacity(HEADER_LEN + frame.payload.len());
        out.resize(HEADER_LEN, 0);
        out.extend_from_slice(&frame.payload);
        (frame.version & !COMPRESSED, out)
    };
    let length = out.len();
    if length > config.max_frame || length > u32::MAX as usize {
        return Err(FrameError::TooLarge {
            length,
            max: config.max_frame,
        });
    }
    let mut header = &mut out[..HEADER_LEN];
    header.put_u32(length as u32);
    header.put_u16(version);
    header.put_i32(frame.protocol_id.0);
    header.put_u16(frame.packet_type);
    header.put_u32(frame.seq);
    Ok(out.freeze())
}

/// The frame codec of a connection (tokio-util).
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameCodec {
    config: FrameConfig,
}

impl FrameCodec {
    /// A codec with these limits.
    pub fn new(config: FrameConfig) -> Self {
        Self { config }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if length < HEADER_LEN {
            return Err(FrameError::TooShort { length });
        }
        if length > self.config.max_frame {
            return Err(FrameError::TooLarge {
                length,
                max: self.config.max_frame,
            });
        }
        if src.len() < length {
            src.reserve(length - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(length);
        frame.advance(4);
        let version = frame.get_u16();
        let protocol_id = ProtocolId(frame.get_i32());
        let packet_type = frame.get_u16();
        let seq = frame.get_u32();
        if version & !COMPRESSED > VERSION {
            return Err(FrameError::UnknownVersion(version));
        }
        let payload = if version & COMPRESSED != 0 {
            let declared = snap::raw::decompress_len(&frame)
                .map_err(|error| FrameError::Decompression(error.to_string()))?;
            if declared > self.config.max_payload {
                return Err(FrameError::DecompressedTooLarge {
                    declared,
                    max: self.config.max_payload,
                });
            }
            let mut out = vec![0; declared];
            let written = snap::raw::Decoder::new()
                .decompress(&frame, &mut out)
                .map_err(|error| FrameError::Decompression(error.to_string()))?;
            out.truncate(written);
            Bytes::from(out)
        } else if frame.len() > self.config.max_payload {
            return Err(FrameError::PayloadTooLarge {
                length: frame.len(),
                max: self.config.max_payload,
            });
        } else {
            frame.freeze()
        };
        Ok(Some(Frame {
            version: version & !COMPRESSED,
            protocol_id,
            packet_type,
            seq,
            payload,
        }))
    }
}

impl Encoder<&Frame> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.extend_from_slice(&encode_frame(frame, &self.config)?);
        Ok(())
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    /// Sends a frame [`encode_frame`] already encoded (a broadcast, compressed once).
    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.extend_from_slice(&frame);
        Ok(())
    }
}
