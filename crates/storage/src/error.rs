//! Storage errors.

/// Why a storage operation failed. After any error, nothing of the failed write is
/// visible: LMDB aborts the whole transaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The memory map is full: the data dir needs a larger `map_size`.
    #[error("the database map of {map_size} bytes is full: raise storage.map_size and restart")]
    MapFull {
        /// The configured map size in bytes.
        map_size: usize,
    },
    /// The data dir could not be created or opened.
    #[error("cannot open the data dir {path}: {source}")]
    Open {
        /// The data dir.
        path: std::path::PathBuf,
        /// The underlying error.
        source: heed::Error,
    },
    /// Any other LMDB failure (disk full, I/O error, corruption).
    #[error("storage failure: {0}")]
    Lmdb(heed::Error),
}
