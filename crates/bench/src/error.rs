//! Why a bench stopped.

/// Why a bench could not run to its report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A result the bench checks before timing was wrong.
    #[error("{0}")]
    Check(String),
    /// Importing, building or committing blocks failed.
    #[error(transparent)]
    Import(#[from] stave_node::ImportError),
    /// Executing a block failed.
    #[error(transparent)]
    Exec(#[from] stave_exec::ExecError),
    /// Recovering senders failed.
    #[error(transparent)]
    Verify(#[from] stave_verify::VerifyError),
    /// The data dir failed.
    #[error(transparent)]
    Storage(#[from] stave_storage::StorageError),
    /// Encoding or decoding failed.
    #[error(transparent)]
    Codec(#[from] stave_codec::CodecError),
    /// Signing failed.
    #[error(transparent)]
    Sdk(#[from] stave_sdk::SdkError),
    /// Framing a payload failed.
    #[error(transparent)]
    Frame(#[from] stave_net::FrameError),
    /// Making a compact block failed.
    #[error(transparent)]
    Compact(#[from] stave_net::CompactError),
    /// The loopback network failed.
    #[error(transparent)]
    Net(#[from] stave_net::NetError),
    /// The loopback TLS identities failed.
    #[error(transparent)]
    Tls(#[from] stave_net::TlsError),
    /// Snappy failed.
    #[error(transparent)]
    Snappy(#[from] snap::Error),
    /// A thread pool could not be built.
    #[error(transparent)]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
    /// A file or thread operation failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The stage chart could not be drawn.
    #[error("{0}")]
    Chart(String),
    /// A task of the net bench failed.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

impl BenchError {
    /// An I/O failure, said to be about `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Io { context, source }
    }
}
