//! Stave's network layer. So far: the framed wire format of DESIGN.md §3.3 ([`frame`]),
//! with Snappy compression above 1 KiB and hostile-input limits, and peer scores with
//! bans ([`score`]). Mutual TLS, the peer manager, gossip and compact blocks are still to
//! come (issue 11).

pub mod frame;
pub mod score;

pub use frame::{Frame, FrameCodec, FrameConfig, FrameError, ProtocolId, encode_frame};
pub use score::{NodeId, Offence, PeerScores, ScoreConfig, Verdict};
