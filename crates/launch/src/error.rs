//! Why a node could not be configured, started or stopped. Each variant's message says
//! what was being done (the file, the address); its source says what went wrong, so a
//! caller printing the whole chain (`anyhow`'s `{:#}`) gets one line with both.

use std::{net::SocketAddr, path::PathBuf};

use stave_codec::CodecError;
use stave_consensus::keys::KeyError;
use stave_net::{NetError, TlsError};
use stave_node::ImportError;
use stave_primitives::ChainSpecError;
use stave_rpc::RpcError;
use stave_storage::StorageError;

/// Why a node could not be configured, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A file or thread operation failed; the message names it.
    #[error("{what}")]
    Io {
        /// What was being done ("reading FILE", "starting the block producer").
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A TOML config file that does not parse (or has an unknown key).
    #[error("in {}", path.display())]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: toml::de::Error,
    },
    /// A genesis file that is not a valid chain spec.
    #[error("in {}", path.display())]
    Genesis {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ChainSpecError,
    },
    /// A chain spec that cannot be built (the dev chain's, a testnet's).
    #[error(transparent)]
    ChainSpec(#[from] ChainSpecError),
    /// A config that cannot work (a follower without peers, a bad node id...).
    #[error("{0}")]
    Config(String),
    /// The metrics endpoint could not listen.
    #[error("serving metrics on {addr} (`metrics_addr`)")]
    Metrics {
        /// Where it was to listen.
        addr: SocketAddr,
        /// Why it could not.
        #[source]
        source: std::io::Error,
    },
    /// The data dir's store could not be opened.
    #[error("opening {}", path.display())]
    OpenStore {
        /// The data dir.
        path: PathBuf,
        /// The store's error.
        #[source]
        source: StorageError,
    },
    /// Reading the store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The consensus epoch the node votes in could not be worked out from its chain.
    #[error("finding the consensus epoch to vote in")]
    Epochs(#[from] stave_consensus::EpochError<StorageError>),
    /// The chain refused to open, or a block could not be made, imported or written.
    #[error("{what}")]
    Import {
        /// What was being done ("producing a block").
        what: &'static str,
        /// The chain's error.
        #[source]
        source: ImportError,
    },
    /// The JSON-RPC server could not start.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// A certificate or key for the P2P network is unusable.
    #[error("{what}")]
    Tls {
        /// What was being read or made.
        what: String,
        /// What is wrong with it.
        #[source]
        source: TlsError,
    },
    /// The P2P network could not start.
    #[error("starting P2P on {listen} (`[p2p] listen`)")]
    Net {
        /// Where it was to listen.
        listen: SocketAddr,
        /// The network's error.
        #[source]
        source: NetError,
    },
    /// A consensus key that cannot be used.
    #[error("{what}")]
    Key {
        /// Which key, or which file it came from.
        what: String,
        /// What is wrong with it.
        #[source]
        source: KeyError,
    },
    /// A block stream that does not split into blocks.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A block to export that the data dir does not hold.
    #[error("block {0} is not stored")]
    MissingBlock(u64),
    /// Every node of a testnet exited before it was told to stop.
    #[error("every node exited")]
    AllNodesExited,
    /// A part the node cannot live without panicked (see `supervisor`).
    #[error("the {part} panicked: {message}")]
    Panicked {
        /// The part ("consensus engine").
        part: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A part the node cannot live without ended while the node was not stopping.
    #[error("the {0} ended by itself")]
    Ended(&'static str),
}

impl LaunchError {
    /// An [`LaunchError::Io`] saying what was being done.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    /// An [`LaunchError::Import`] saying what was being done.
    pub(crate) fn import(what: &'static str) -> impl FnOnce(ImportError) -> Self {
        move |source| Self::Import { what, source }
    }

    /// An [`LaunchError::Tls`] saying what was being read.
    pub(crate) fn tls(what: impl Into<String>) -> impl FnOnce(TlsError) -> Self {
        let what = what.into();
        move |source| Self::Tls { what, source }
    }
}

impl From<TlsError> for LaunchError {
    fn from(source: TlsError) -> Self {
        Self::Tls {
            what: "setting up P2P TLS".to_owned(),
            source,
        }
    }
}
