//! Stave's storage: a key-value interface ([`KvStore`]) with its tables ([`Table`]) and the
//! embedded default backend on LMDB ([`LmdbStore`]).
//!
//! [`read`] reads every stored value back by what it is (headers, bodies, receipts,
//! senders and blooms by block number, a block's number by hash, the stored state); no
//! other crate names a table or a key.
//!
//! [`commit::commit_block`] is the commit stage: a block, its receipts and its state diff
//! encoded in parallel into one batch. Every write is a [`WriteBatch`] applied in one
//! transaction: a reader, or a node
//! restarting after `kill -9`, sees all of a batch or none of it. A full map is a clear
//! [`StorageError::MapFull`], never a half-written block.
//!
//! ```
//! use stave_storage::{KvStore, LmdbStore, Table, WriteBatch};
//!
//! let dir = tempfile::tempdir()?;
//! let store = LmdbStore::open(dir.path(), 1 << 20)?;
//! let mut batch = WriteBatch::new();
//! batch.put(Table::Meta, b"head", 7u64.to_be_bytes());
//! store.write(batch)?;
//! assert_eq!(store.get(Table::Meta, b"head")?, Some(7u64.to_be_bytes().to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod commit;
mod error;
pub mod history;
mod kv;
mod layout;
mod lmdb;
pub mod read;

pub use error::StorageError;
pub use kv::{KeyValue, KvStore, Op, Table, WriteBatch};
pub use layout::storage_key;
pub use lmdb::{DEFAULT_MAP_SIZE, LmdbOptions, LmdbStore, MapSpace};
