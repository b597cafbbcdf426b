//! Storage errors.

/// Why a storage operation failed. After any error, nothing of the failed write is
/// visible: LMDB aborts the whole transaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The memory map is full: the data dir needs a larger `map_size` (the node config's
    /// key; `--map-size` of `stave import` and `stave export`).
    #[error(
        "the database map of {map_size} bytes is full: raise `map_size` in the node's config \
         (`--map-size` for `stave import`) and restart; nothing of this write was stored"
    )]
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
    /// Writing the data dir failed at the OS level: the disk is full (ENOSPC, or a file
    /// size limit), over quota, or failing (EIO; LMDB reports a short write as EIO).
    #[error(
        "writing the data dir failed ({0}): the disk may be full or failing; nothing of this \
         write was stored. Free space (or fix the disk) and restart: work resumes after the \
         last stored block"
    )]
    Write(heed::Error),
    /// Any other LMDB failure (corruption, a bad environment).
    #[error("storage failure: {0}")]
    Lmdb(heed::Error),
    /// A block that does not extend the stored head.
    #[error("block {number} does not extend the stored head {head:?}")]
    Gap {
        /// The stored head's number, if any block is stored.
        head: Option<u64>,
        /// The block's number.
        number: u64,
    },
    /// A different block is already committed at this height.
    #[error("block {number} is already committed with hash {stored}, not {offered}")]
    Conflict {
        /// The height.
        number: u64,
        /// The stored block's hash.
        stored: alloy_primitives::B256,
        /// The offered block's hash.
        offered: alloy_primitives::B256,
    },
    /// A stored value does not decode: the data dir is damaged.
    #[error("corrupt {table} entry: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What is wrong.
        reason: String,
    },
}
