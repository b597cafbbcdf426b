//! The embedded default backend: LMDB through heed. ACID, crash-safe (copy-on-write
//! pages, a commit is one fsync'd meta-page switch), readers never block the writer.

use std::path::Path;

use heed::{
    CommitOrAbort, Database, Env, EnvOpenOptions, MdbError, RoTxn, RwTxn, WithoutTls, types::Bytes,
};
use parking_lot::Mutex;
use thread_local::ThreadLocal;

use crate::{
    error::StorageError,
    kv::{KeyValue, KvStore, Op, Table, WriteBatch},
};

/// Default map size: 64 GiB of address space (not of disk: LMDB maps lazily), enough
/// for years of a consortium chain at 1,000 TPS; `stave node` takes a larger one from
/// its config.
pub const DEFAULT_MAP_SIZE: usize = 64 << 30;

/// Reader slots in LMDB's lock file: each thread that reads keeps one (see
/// [`LmdbStore`]), so more than LMDB's default 126, for RPC's blocking threads.
const MAX_READERS: u32 = 4096;

/// A data dir opened with LMDB.
///
/// Each thread that reads keeps its read transaction open from one `get` to the next:
/// beginning one takes LMDB's reader-table mutex, shared by every thread, and cost more
/// than the read itself (executing a block makes thousands of reads, on all cores). A
/// write that commits drops them all, so a read that starts after `write` returned sees
/// what it wrote.
pub struct LmdbStore {
    /// Declared before `env`, so the transactions end before the environment closes.
    readers: ThreadLocal<Mutex<Option<RoTxn<'static, WithoutTls>>>>,
    env: Env<WithoutTls>,
    tables: [Database<'static, Bytes, Bytes>; Table::ALL.len()],
    map_size: usize,
}

impl std::fmt::Debug for LmdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbStore")
            .field("env", &self.env)
            .field("map_size", &self.map_size)
            .finish_non_exhaustive()
    }
}

/// How a data dir is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LmdbOptions {
    /// Size of the memory map in bytes (the most the data dir can hold).
    pub map_size: usize,
    /// Let the OS read ahead around each page LMDB faults in (LMDB's default). Off, every
    /// miss reads one page: better when the data is much larger than RAM and read at
    /// random, as state is.
    pub read_ahead: bool,
}

impl LmdbOptions {
    /// LMDB's defaults with a map of `map_size` bytes.
    pub fn new(map_size: usize) -> Self {
        Self {
            map_size,
            read_ahead: true,
        }
    }
}

/// How much of its map a data dir uses: what a full map (`StorageError::MapFull`) is
/// measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSpace {
    /// The map's size: the most the data dir can hold.
    pub map_bytes: u64,
    /// The pages in use up to the highest one written (freed pages below it are reused
    /// before the map grows).
    pub used_bytes: u64,
}

impl LmdbStore {
    /// Writes `entries` into `table` in one transaction with LMDB's append mode: keys in
    /// strictly ascending order, each after every key the table holds (any other order
    /// is refused and nothing is written). Pages are filled to the brim and no key is
    /// searched for, so a generated state of tens of millions of accounts is written at
    /// the disk's pace and takes half the pages random puts would leave.
    pub fn append_sorted<'e>(
        &self,
        table: Table,
        entries: impl IntoIterator<Item = (&'e [u8], &'e [u8])>,
    ) -> Result<(), StorageError> {
        let mut wtxn = self.env.write_txn().map_err(|e| self.error(e))?;
        let db = &self.tables[table.position()];
        for (key, value) in entries {
            db.put_with_flags(&mut wtxn, heed::PutFlags::APPEND, key, value)
                .map_err(|e| self.error(e))?;
        }
        wtxn.commit().map_err(|e| self.error(e))?;
        self.forget_readers();
        Ok(())
    }

    /// Ends every kept read transaction after a write: each still sees the state before
    /// it.
    fn forget_readers(&self) {
        for reader in self.readers.iter() {
            reader.lock().take();
        }
    }

    /// How much of the map the data dir uses now.
    pub fn space(&self) -> MapSpace {
        let info = self.env.info();
        let page = u64::from(self.env.unnamed_database_stat().page_size);
        MapSpace {
            map_bytes: info.map_size as u64,
            used_bytes: (info.last_page_number as u64 + 1) * page,
        }
    }

    /// Opens (creating if needed) the data dir at `path` with a map of `map_size` bytes.
    pub fn open(path: &Path, map_size: usize) -> Result<Self, StorageError> {
        Self::open_with(path, LmdbOptions::new(map_size))
    }

    /// Opens (creating if needed) the data dir at `path` with `options`.
    pub fn open_with(path: &Path, options: LmdbOptions) -> Result<Self, StorageError> {
        let LmdbOptions {
            map_size,
            read_ahead,
        } = options;
        let open = |source| StorageError::Open {
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(path).map_err(|e| open(heed::Error::Io(e)))?;
        // SAFETY: heed's contract for `open` is LMDB's: a local file system (the data dir is
        // the operator's local directory; README says not to put it on NFS), and LMDB's own
        // lock file, which we never touch, to coordinate processes.
        let env = unsafe {
            // Reader slots tied to transactions, not threads (MDB_NOTLS): with thread-local
            // slots, a pool thread that read the store and exits after the store closed
            // (rayon pools end their threads asynchronously) has LMDB's thread-exit
            // destructor write into the unmapped reader table: a segfault, seen in the
            // prefetch import test under load.
            let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
            env_options
                .map_size(map_size)
                .max_dbs(Table::ALL.len() as u32)
                .max_readers(MAX_READERS);
            if !read_ahead {
                // Only an access hint to the OS: it changes no guarantee LMDB gives.
                env_options.flags(heed::EnvFlags::NO_READ_AHEAD);
            }
            env_options.open(path).map_err(open)?
        };
        let wtxn = env.write_txn().map_err(open)?;
        let tables = env
            .create_databases_and_commit(wtxn, |options, wtxn| {
                let mut tables = Vec::with_capacity(Table::ALL.len());
                for table in Table::ALL {
                    tables.push(
                        options
                            .database_options()
                            .types::<Bytes, Bytes>()
                            .name(table.name())
                            .create(wtxn)?,
                    );
                }
                let tables: [_; Table::ALL.len()] = tables
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("the loop made one per table"));
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit(tables))
            })
            .map_err(open)?
            .unwrap_commit();
        Ok(Self {
            readers: ThreadLocal::new(),
            env,
            tables,
            map_size,
        })
    }

    fn error(&self, error: heed::Error) -> StorageError {
        /// errno values of a write the disk could not take.
        const WRITE_FAILURES: [i32; 4] = [libc::EIO, libc::EFBIG, libc::ENOSPC, libc::EDQUOT];
        let code = match &error {
            heed::Error::Io(io) => io.raw_os_error(),
            heed::Error::Mdb(MdbError::Other(code)) => Some(*code),
            _ => None,
        };
        match error {
            heed::Error::Mdb(MdbError::MapFull) => StorageError::MapFull {
                map_size: self.map_size,
            },
            other if code.is_some_and(|code| WRITE_FAILURES.contains(&code)) => {
                StorageError::Write(other)
            }
            other => StorageError::Lmdb(other),
        }
    }

    /// Applies `batch`'s operations in `wtxn`, in order.
    fn apply(&self, wtxn: &mut RwTxn<'_>, batch: WriteBatch<'_>) -> Result<(), StorageError> {
        for op in batch.ops() {
            match op {
                Op::Put(table, key, value) => self.tables[table.position()].put(wtxn, key, value),
                Op::Delete(table, key) => self.tables[table.position()].delete(wtxn, key).map(drop),
                Op::Clear(table) => self.tables[table.position()].clear(wtxn),
                Op::DeletePrefix(table, prefix) => {
                    let db = &self.tables[table.position()];
                    let keys: Result<Vec<Vec<u8>>, _> = db
                        .prefix_iter(wtxn, prefix)
                        .map_err(|e| self.error(e))?
                        .map(|entry| entry.map(|(key, _)| key.to_vec()))
                        .collect();
                    keys.map_err(|e| self.error(e))?
                        .iter()
                        .try_for_each(|key| db.delete(wtxn, key).map(drop))
                }
            }
            .map_err(|e| self.error(e))?;
        }
        Ok(())
    }
}

impl LmdbStore {
    /// Runs `read` in the calling thread's kept read transaction (begun if it has none).
    fn with_reader<T>(
        &self,
        read: impl FnOnce(&RoTxn<'static, WithoutTls>) -> Result<T, heed::Error>,
    ) -> Result<T, StorageError> {
        let mut reader = self.readers.get_or_default().lock();
        let rtxn = match reader.take() {
            Some(rtxn) => rtxn,
            None => self
                .env
                .clone()
                .static_read_txn()
                .map_err(|e| self.error(e))?,
        };
        let result = read(&rtxn).map_err(|e| self.error(e));
        *reader = Some(rtxn);
        result
    }
}

impl KvStore for LmdbStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.with_reader(|rtxn| {
            Ok(self.tables[table.position()]
                .get(rtxn, key)?
                .map(<[u8]>::to_vec))
        })
    }

    fn seek(&self, table: Table, from: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        use std::ops::Bound;
        self.with_reader(|rtxn| {
            // LMDB refuses an empty key, even as a bound: from the start is unbounded.
            let start = if from.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Included(from)
            };
            let range = (start, Bound::Unbounded);
            self.tables[table.position()]
                .range(rtxn, &range)?
                .next()
                .transpose()
                .map(|entry| entry.map(|(key, value)| (key.to_vec(), value.to_vec())))
        })
    }

    fn write_then(
        &self,
        first: WriteBatch<'_>,
        rest: &mut dyn FnMut() -> WriteBatch<'static>,
    ) -> Result<(), StorageError> {
        let mut wtxn = self.env.write_txn().map_err(|e| self.error(e))?;
        // Dropping `wtxn` on an error path aborts the whole of both batches.
        self.apply(&mut wtxn, first)?;
        self.apply(&mut wtxn, rest())?;
        wtxn.commit().map_err(|e| self.error(e))?;
        self.forget_readers();
        Ok(())
    }
}
