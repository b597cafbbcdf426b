//! Stave's network layer: the framed wire format of docs/wire-formats.md ([`frame`]), with
//! Snappy compression above 1 KiB and hostile-input limits; peer scores with bans
//! ([`score`]); mutual TLS with a chain CA, node ids and an allow-list ([`tls`]); the peer
//! manager that keeps static peers connected and routes frames by protocol id ([`peers`]);
//! and transaction and compact-block gossip on top of it ([`gossip`], [`compact`]);
//! [`raise_fd_limit`] for a node that serves many connections. Both keep their long-lived
//! tasks ([`Task`]) for the node to watch.

pub mod compact;
mod fds;
pub mod frame;
pub mod gossip;
pub mod peers;
pub mod score;
mod tasks;
pub mod tls;

pub use compact::{BlockParts, CompactBlock, CompactError, decode_compact};
pub use fds::raise_fd_limit;
pub use frame::{Frame, FrameCodec, FrameConfig, FrameError, ProtocolId, encode_frame};
pub use gossip::{
    BlockSource, CertifiedRun, Finalized, FinalizedPush, Gossip, GossipConfig, GossipError,
    HeaderSenders, ReceivedBlock, TxAdmission,
};
pub use peers::{Inbound, NetError, Network, NetworkConfig, StaticPeer, short_id};
pub use score::{NodeId, Offence, PeerScores, ScoreConfig, Verdict};
pub use tasks::Task;
pub use tls::{ChainCa, NodeIdentity, NodeTls, TlsError, ed25519_node_id, node_id};
