//! Stave's network layer. So far: the framed wire format of DESIGN.md §3.3 ([`frame`]),
//! with Snappy compression above 1 KiB and hostile-input limits; peer scores with bans
//! ([`score`]); mutual TLS with a chain CA, node ids and an allow-list ([`tls`]). The peer
//! manager, gossip and compact blocks are still to come (issue 11).

pub mod frame;
pub mod score;
pub mod tls;

pub use frame::{Frame, FrameCodec, FrameConfig, FrameError, ProtocolId, encode_frame};
pub use score::{NodeId, Offence, PeerScores, ScoreConfig, Verdict};
pub use tls::{ChainCa, NodeIdentity, NodeTls, TlsError, node_id};
