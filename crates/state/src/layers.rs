//! The stack: diff layers (L2) over an origin pool (L1.5), a clean cache (L3) and the
//! disk layer, and the snapshots the executor and RPC read through.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy_primitives::{Address, B256, U256, map::HashMap};
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};
use stave_primitives::{StateDiff, StateError};
use stave_storage::{
    KvStore, StorageError,
    commit::{self, TxPositions},
    read,
};
use thread_local::ThreadLocal;

use crate::{
    bloom::KeyBloom,
    error::StateLayerError,
    history::KeptHistory,
    key::{StateKey, StateValue},
    layer::{DiffLayer, keys, merge},
    sharded::ReadMostly,
    snapshot::Snapshot,
    touched::TouchedAccounts,
};

/// Layers kept in memory: the state of each of the last 128 blocks can be read.
pub const KEPT_LAYERS: usize = 128;
/// Layers flushed to disk at once, beyond the kept ones: one write per 16 blocks, in which
/// a key written by several blocks is written once.
pub const FLUSH_BATCH: usize = 16;
/// Default size of the clean cache (L3), in entries.
pub const DEFAULT_CLEAN_CACHE_ENTRIES: usize = 4_000_000;
/// Shards of the origin pool.
const ORIGIN_SHARDS: usize = 32;
/// Shards of the clean cache.
const CLEAN_SHARDS: usize = 16;
/// Values a prefetching thread loads before it puts them in the origin pool: each put
/// write-locks the shards they go to (see [`crate::sharded`]), but a value not put there
/// yet is no use to the executor, which reads it from disk again. A prefetch runs on
/// beside the block it loads for, a few transactions ahead, so the batch is small.
const PREFETCH_BATCH: usize = 2;
/// Values the origin pool holds before it is emptied (at a block boundary).
const ORIGIN_CAPACITY: usize = 1 << 20;
/// Values one thread's [`ColdReads`] keeps until the next layer is prepared; the reads
/// beyond are not kept (a thread serving queries while no block comes, say).
const COLD_READS_KEPT: usize = 1 << 16;
/// Entries the clean cache makes room for when the layers are made: the keys of ~10
/// blocks of 2,500 transfers, so that the first flushes after a start do not rehash its
/// tables under their locks while the executing threads read it. The origin pool is not
/// pre-sized: its tables, touched at random, would then fault in pages they may never
/// use.
const RESERVED_ENTRIES: usize = 1 << 16;

thread_local! {
    /// What this thread's prefetch reads loaded from disk (see [`prefetch_disk_loads`]).
    static PREFETCH_DISK_LOADS: std::cell::Cell<DiskLoads> = const {
        std::cell::Cell::new(DiskLoads { count: 0, time: Duration::ZERO })
    };
}

/// Values read from below the layers' memory (LMDB: the OS page cache or the disk) and
/// the time those reads took, for one thread's prefetch reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskLoads {
    /// Values read.
    pub count: u64,
    /// Time the reads took, and nothing else (not the EVM's work between them).
    pub time: Duration,
}

impl DiskLoads {
    /// The loads made after `earlier`, a reading of the same thread's counter.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            count: self.count - earlier.count,
            time: self.time.saturating_sub(earlier.time),
        }
    }

    /// Whether there were loads and they took at least `per_load` each on average.
    pub fn averaged_at_least(self, per_load: Duration) -> bool {
        self.count > 0
            && self.time >= per_load.saturating_mul(self.count.try_into().unwrap_or(u32::MAX))
    }
}

/// What the calling thread's prefetch reads have loaded from below the layers so far. A
/// prefetcher compares it before and after a transaction: loads that took page-cache
/// time mean the state it touches is in memory, and prefetching
/// the next ones would only cost the executor the CPU it takes; disk time means it is
/// not.
pub fn prefetch_disk_loads() -> DiskLoads {
    PREFETCH_DISK_LOADS.with(std::cell::Cell::get)
}

/// How many state reads each layer served (and what prefetching loaded for nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerReads {
    /// Served by the executing block's own changes (L1, the executor's overlay).
    pub block: u64,
    /// Served by the origin pool of values read this block (L1.5).
    pub origin: u64,
    /// Served by a diff layer (L2).
    pub diff: u64,
    /// Served by the clean cache (L3).
    pub clean: u64,
    /// Read from disk: the misses.
    pub disk: u64,
    /// Values prefetchers loaded into the origin pool that execution never read.
    pub wasted_prefetch: u64,
}

impl LayerReads {
    /// All reads the executor made.
    pub fn total(&self) -> u64 {
        self.block + self.origin + self.diff + self.clean + self.disk
    }

    /// The reads made since `earlier`, a count taken before these.
    fn since(&self, earlier: &LayerReads) -> LayerReads {
        LayerReads {
            block: self.block - earlier.block,
            origin: self.origin - earlier.origin,
            diff: self.diff - earlier.diff,
            clean: self.clean - earlier.clean,
            disk: self.disk - earlier.disk,
            wasted_prefetch: self.wasted_prefetch - earlier.wasted_prefetch,
        }
    }
}

/// Reads since the layers were made; they only grow. Each read adds to them, and
/// `stave_state_reads_total` gets what they gained once per block ([`StateLayers::publish`]).
/// A metrics call per read cost more than the read itself (`cargo bench -p stave-state
/// --bench layers`; MEASUREMENTS.md).
///
/// Each thread adds to a stripe of its own, on cache lines of its own: with one set of
/// counters, every read of the two executing threads moved their line to its core.
#[derive(Default)]
pub(crate) struct Counters([CachePadded<Counts>; COUNTER_STRIPES]);

/// Stripes of [`Counters`]: threads beyond it share them.
const COUNTER_STRIPES: usize = 8;

/// One stripe of [`Counters`].
#[derive(Default)]
pub(crate) struct Counts {
    /// Served by the executing block's own changes.
    pub(crate) block: AtomicU64,
    origin: AtomicU64,
    /// Served by a diff layer.
    pub(crate) diff: AtomicU64,
    clean: AtomicU64,
    disk: AtomicU64,
    wasted_prefetch: AtomicU64,
}

impl Counters {
    /// Adds `count` to the calling thread's stripe of the counter `which` picks.
    pub(crate) fn add(&self, which: fn(&Counts) -> &AtomicU64, count: u64) {
        static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % COUNTER_STRIPES;
        }
        let stripe = STRIPE.with(|stripe| *stripe);
        which(&self.0[stripe]).fetch_add(count, Ordering::Relaxed);
    }

    /// The counter `which` picks, over every stripe.
    fn sum(&self, which: fn(&Counts) -> &AtomicU64) -> u64 {
        self.0
            .iter()
            .map(|stripe| which(stripe).load(Ordering::Relaxed))
            .sum()
    }
}

/// A value in the origin pool, with whether a prefetcher loaded it and execution used it.
struct OriginEntry {
    value: StateValue,
    prefetched: bool,
    used: AtomicBool,
}

/// Values execution on one thread read from below the layers (the clean cache or disk),
/// for the origin pool once the next layer is prepared ([`StateLayers::prepare`]); or
/// values a prefetching thread loaded, for the pool once it has a batch of them.
///
/// Inserting each into the pool as it was read (a shard's write lock, an insert into a
/// table the executing threads share and grow) made every cold read dearer, and most of
/// those values are of keys the block then writes (a transfer's two accounts), which its
/// layer hides from the pool anyway. [`StateLayers::prepare`] drops those and keeps the
/// values a later block may read again; a value read twice before then is read from
/// below twice. Buffering made execute faster, serial and staged, for transfers and
/// ERC-20 alike (MEASUREMENTS.md).
#[derive(Default)]
struct ColdReads {
    /// The disk layer's height when the values were read: values read before a flush are
    /// dropped, as the flush may have written their keys.
    flushed: u64,
    values: Vec<(StateKey, StateValue)>,
}

impl ColdReads {
    /// The values, for more read while the disk layer is at `flushed`: emptied first if
    /// they were read at another height.
    fn at(&mut self, flushed: u64) -> &mut Vec<(StateKey, StateValue)> {
        if self.flushed != flushed {
            self.values.clear();
            self.flushed = flushed;
        }
        &mut self.values
    }

    /// Drains the values, keeping their room; none if they were read before the disk
    /// layer reached `flushed`.
    fn drain_at(&mut self, flushed: u64) -> std::vec::Drain<'_, (StateKey, StateValue)> {
        if self.flushed != flushed {
            self.values.clear();
        }
        self.values.drain(..)
    }
}

/// Who is reading: execution at the head (counted per layer), a prefetcher (counted as
/// loads), a query at an earlier block the layers hold (not counted, and kept out of the
/// origin pool: a value below its layers may be newer in the head's), or a query at a
/// block the disk layer has passed (read from the state history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    Execution,
    Prefetch,
    Historical,
    Past(u64),
}

/// A block's layer, prepared but not pushed yet ([`StateLayers::prepare`]): its bloom
/// filter is built and its accounts are indexed, but no snapshot finds it.
#[must_use = "a prepared layer is published or discarded"]
pub struct PreparedLayer {
    number: u64,
    txs: TxPositions,
    bloom: KeyBloom,
}

impl std::fmt::Debug for PreparedLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedLayer")
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

/// The state of a chain: the last blocks' diff layers over the flushed state on disk.
pub struct StateLayers<'s> {
    pub(crate) store: &'s dyn KvStore,
    /// Oldest first; the last is the head.
    layers: RwLock<Vec<Arc<DiffLayer>>>,
    /// Which of them changed each account.
    pub(crate) touched: TouchedAccounts,
    /// The height the disk layer is at.
    flushed: AtomicU64,
    clean: ReadMostly<quick_cache::unsync::Cache<StateKey, StateValue>, CLEAN_SHARDS>,
    origin: ReadMostly<HashMap<StateKey, OriginEntry>, ORIGIN_SHARDS>,
    /// What each executing thread read from below the layers since the last layer was
    /// prepared, for the origin pool.
    cold_reads: ThreadLocal<Mutex<ColdReads>>,
    /// What each prefetching thread loaded and has not put in the origin pool yet.
    prefetched: ThreadLocal<Mutex<ColdReads>>,
    /// Historical reads hold it shared; a flush holds it exclusively, so the disk layer
    /// never moves under a snapshot of a block the flush reaches (nor the history under a
    /// read of a past block).
    pub(crate) gate: RwLock<()>,
    /// The history kept on disk of blocks the disk layer has passed, if any.
    pub(crate) history: Option<KeptHistory>,
    /// Blocks a flush must not pass, with how many holders pinned each: a dev chain can
    /// then go back to any of them ([`StateLayers::unwind`]).
    pins: Mutex<std::collections::BTreeMap<u64, usize>>,
    /// One flush at a time.
    flushing: Mutex<()>,
    pub(crate) counters: Counters,
    /// The counts when [`StateLayers::take_reads`] last ran.
    taken: Mutex<LayerReads>,
    /// The counts when the metrics last got them.
    published: Mutex<LayerReads>,
}

impl std::fmt::Debug for StateLayers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateLayers")
            .field("flushed", &self.flushed())
            .field("head", &self.head())
            .finish_non_exhaustive()
    }
}

pub(crate) fn state_error(error: StorageError) -> StateError {
    StateError(error.to_string())
}

impl<'s> StateLayers<'s> {
    /// The state stored in `store`, flushed up to block `flushed`, with no layers yet and
    /// a clean cache of `clean_entries` entries.
    pub fn new(store: &'s dyn KvStore, flushed: u64, clean_entries: usize) -> Self {
        metrics::gauge!("stave_state_flushed_height").set(flushed as f64);
        let clean = ReadMostly::new(|| {
            let mut shard = quick_cache::unsync::Cache::new((clean_entries / CLEAN_SHARDS).max(1));
            shard.reserve(clean_entries.min(RESERVED_ENTRIES) / CLEAN_SHARDS);
            shard
        });
        Self {
            store,
            layers: RwLock::new(Vec::with_capacity(KEPT_LAYERS + FLUSH_BATCH + 1)),
            touched: TouchedAccounts::new(),
            flushed: AtomicU64::new(flushed),
            clean,
            origin: ReadMostly::new(HashMap::default),
            cold_reads: ThreadLocal::new(),
            prefetched: ThreadLocal::new(),
            gate: RwLock::new(()),
            history: None,
            pins: Mutex::default(),
            flushing: Mutex::new(()),
            counters: Counters::default(),
            taken: Mutex::default(),
            published: Mutex::default(),
        }
    }

    /// The block the disk layer is at.
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// The newest block whose state is known.
    pub fn head(&self) -> u64 {
        self.layers
            .read()
            .last()
            .map_or_else(|| self.flushed(), |layer| layer.number)
    }

    /// Adds block `number`'s changes, and where its transactions are, as the new head layer.
    pub fn push(
        &self,
        number: u64,
        hash: B256,
        diff: StateDiff,
        txs: TxPositions,
    ) -> Result<(), StateLayerError> {
        let layer = self.prepare(number, &diff, txs)?;
        self.publish(layer, hash, diff)
    }

    /// The part of [`StateLayers::push`] that no snapshot sees, so that it may run while
    /// the block is being written: checks that block `number` follows the head, builds
    /// its bloom filter and indexes the accounts `diff` changed. [`StateLayers::publish`]
    /// then pushes the layer, or [`StateLayers::discard`] undoes this if the block is not
    /// stored after all.
    pub fn prepare(
        &self,
        number: u64,
        diff: &StateDiff,
        txs: TxPositions,
    ) -> Result<PreparedLayer, StateLayerError> {
        let (parent_bloom, rebuild_from) = {
            let layers = self.layers.read();
            let head = layers
                .last()
                .map_or_else(|| self.flushed(), |layer| layer.number);
            if number != head + 1 {
                return Err(StateLayerError::NotChild { number, head });
            }
            // Every KEPT_LAYERS blocks the bloom is rebuilt from the layers still held, so
            // keys of flushed layers do not pile up in it.
            let rebuild = number.is_multiple_of(KEPT_LAYERS as u64);
            let parent = layers
                .last()
                .filter(|_| !rebuild)
                .map(|layer| layer.bloom.clone());
            let from = rebuild.then(|| layers.clone());
            (parent, from)
        };
        let mut bloom = match (parent_bloom, rebuild_from) {
            (Some(parent), _) => (*parent).clone(),
            (None, Some(layers)) => {
                let mut bloom = KeyBloom::new();
                for layer in &layers {
                    keys(&layer.diff).for_each(|key| bloom.insert(&key));
                }
                bloom
            }
            (None, None) => KeyBloom::new(),
        };
        keys(diff).for_each(|key| bloom.insert(&key));
        self.keep_cold_reads(&bloom);
        // The origin values of the keys the block wrote stay: the layer hides them from
        // every snapshot that has it, and the flush that writes the layer to disk drops
        // them. A pool grown past its bound starts over.
        let held = self.origin.sum(HashMap::len);
        if held > ORIGIN_CAPACITY {
            self.clear_origin();
        }
        // Indexed before it is pushed: a snapshot that has the layer finds it listed (and
        // a snapshot below it skips the entry).
        self.touched.add(number, diff);
        Ok(PreparedLayer { number, txs, bloom })
    }

    /// Pushes a layer [`StateLayers::prepare`] made from `diff`, block `hash`'s changes, as
    /// the new head; fails if another layer was pushed meanwhile.
    pub fn publish(
        &self,
        layer: PreparedLayer,
        hash: B256,
        diff: StateDiff,
    ) -> Result<(), StateLayerError> {
        self.publish_reads();
        let mut layers = self.layers.write();
        let head = layers
            .last()
            .map_or_else(|| self.flushed(), |layer| layer.number);
        if layer.number != head + 1 {
            drop(layers);
            let number = layer.number;
            self.discard(layer, &diff);
            return Err(StateLayerError::NotChild { number, head });
        }
        layers.push(Arc::new(DiffLayer {
            number: layer.number,
            hash,
            diff,
            txs: layer.txs,
            bloom: Arc::new(layer.bloom),
        }));
        Ok(())
    }

    /// Undoes [`StateLayers::prepare`] for a layer that will not be pushed: its block was
    /// not stored (`diff` is what it was prepared from).
    pub fn discard(&self, layer: PreparedLayer, diff: &StateDiff) {
        self.touched.remove(layer.number, diff);
    }

    /// Moves the values execution read from below the layers into the origin pool, but for
    /// keys `bloom` (the new layer's, which covers every held layer) may hold: a layer
    /// hides those. Values read before the last flush are dropped.
    fn keep_cold_reads(&self, bloom: &KeyBloom) {
        let flushed = self.flushed();
        let mut kept = Vec::new();
        for cold in self.cold_reads.iter() {
            kept.extend(
                cold.lock()
                    .drain_at(flushed)
                    .filter(|(key, _)| !bloom.may_hold(key)),
            );
        }
        self.put_in_origin(kept, Reader::Execution);
    }

    /// Puts `values`, which `reader` (execution or a prefetcher) read from below the
    /// layers, in the origin pool. A value execution read counts as used, also where a
    /// prefetcher had loaded it already.
    fn put_in_origin(
        &self,
        values: impl IntoIterator<Item = (StateKey, StateValue)>,
        reader: Reader,
    ) {
        let used = reader == Reader::Execution;
        self.origin.write_all(
            values,
            |(key, _)| key,
            |shard, (key, value)| {
                shard
                    .entry(key)
                    .and_modify(|entry| {
                        if used {
                            entry.used.store(true, Ordering::Relaxed);
                        }
                    })
                    .or_insert(OriginEntry {
                        value,
                        prefetched: !used,
                        used: AtomicBool::new(used),
                    });
            },
        );
    }

    /// Keeps `value`, which execution read from below the layers while the disk layer was
    /// at `flushed`, for the origin pool ([`ColdReads`]).
    fn note_cold_read(&self, flushed: u64, key: StateKey, value: &StateValue) {
        let mut cold = self.cold_reads.get_or_default().lock();
        let values = cold.at(flushed);
        if values.len() < COLD_READS_KEPT {
            values.push((key, value.clone()));
        }
    }

    /// Keeps `value`, which a prefetcher loaded from below the layers while the disk layer
    /// was at `flushed`; puts its thread's values in the origin pool every
    /// [`PREFETCH_BATCH`] of them.
    fn note_prefetched(&self, flushed: u64, key: StateKey, value: StateValue) {
        let mut loaded = self.prefetched.get_or_default().lock();
        let values = loaded.at(flushed);
        values.push((key, value));
        if values.len() >= PREFETCH_BATCH {
            self.pool_prefetched(&mut loaded);
        }
    }

    /// Puts what the prefetching threads loaded in the origin pool (a prefetch is done).
    pub(crate) fn publish_prefetched(&self) {
        for loaded in self.prefetched.iter() {
            self.pool_prefetched(&mut loaded.lock());
        }
    }

    /// Puts `loaded` in the origin pool, unless a flush has happened since it was read.
    fn pool_prefetched(&self, loaded: &mut ColdReads) {
        self.put_in_origin(loaded.drain_at(self.flushed()), Reader::Prefetch);
    }

    /// Empties the origin pool, counting prefetched values never used. Its entries stay
    /// valid across blocks (they are disk values, dropped when a flush writes their key;
    /// until then a layer that changed the key hides them), so it is emptied only when
    /// it outgrows its bound, or by a caller that wants the waste counted.
    pub fn clear_origin(&self) {
        let mut wasted = 0;
        self.origin.each(|shard| {
            wasted += shard
                .values()
                .filter(|entry| entry.prefetched && !entry.used.load(Ordering::Relaxed))
                .count() as u64;
            shard.clear();
        });
        self.counters.add(|c| &c.wasted_prefetch, wasted);
        metrics::counter!("stave_state_prefetch_wasted_total").increment(wasted);
    }

    /// A snapshot of the state at the head.
    pub fn latest(&self) -> Snapshot<'_, 's> {
        let stack: Vec<_> = self.layers.read().iter().rev().cloned().collect();
        Snapshot::new(self, stack, Reader::Execution)
    }

    /// Runs `query` on the state after block `number` (any block from the oldest kept,
    /// [`StateLayers::oldest`], to the head); a flush waits until it returns.
    pub fn with_state_at<R>(
        &self,
        number: u64,
        query: impl FnOnce(&Snapshot<'_, 's>) -> R,
    ) -> Result<R, StateLayerError> {
        let _gate = self.gate.read();
        let layers = self.layers.read();
        let (flushed, newest) = (
            self.flushed(),
            layers
                .last()
                .map_or_else(|| self.flushed(), |layer| layer.number),
        );
        let oldest = self.oldest();
        if number < oldest || number > newest {
            return Err(StateLayerError::NotAvailable {
                number,
                oldest,
                newest,
            });
        }
        let (stack, reader) = if number < flushed {
            (Vec::new(), Reader::Past(number))
        } else {
            let stack = layers
                .iter()
                .rev()
                .filter(|layer| layer.number <= number)
                .cloned()
                .collect();
            (stack, Reader::Historical)
        };
        drop(layers);
        let snapshot = Snapshot::new(self, stack, reader);
        Ok(query(&snapshot))
    }

    /// Keeps the state of block `number` and every later one in memory until
    /// [`StateLayers::unpin`]: flushes stop at it, so the chain can be unwound to it.
    /// Fails if the disk layer has passed it.
    pub fn pin(&self, number: u64) -> Result<(), StateLayerError> {
        let _one = self.flushing.lock();
        let (oldest, newest) = (self.flushed(), self.head());
        if number < oldest || number > newest {
            return Err(StateLayerError::NotAvailable {
                number,
                oldest,
                newest,
            });
        }
        *self.pins.lock().entry(number).or_default() += 1;
        Ok(())
    }

    /// Releases one [`StateLayers::pin`] of `number`.
    pub fn unpin(&self, number: u64) {
        let mut pins = self.pins.lock();
        if let Some(count) = pins.get_mut(&number) {
            *count -= 1;
            if *count == 0 {
                pins.remove(&number);
            }
        }
    }

    /// Drops the layers of the blocks after `number`, which become unknown: the caller
    /// has removed those blocks from the store (a dev chain going back to a snapshot).
    /// Fails, changing nothing, if the disk layer has passed `number`.
    pub fn unwind(&self, number: u64) -> Result<(), StateLayerError> {
        let _one = self.flushing.lock();
        let _gate = self.gate.write();
        let mut layers = self.layers.write();
        let (oldest, newest) = (
            self.flushed(),
            layers
                .last()
                .map_or_else(|| self.flushed(), |layer| layer.number),
        );
        if number < oldest || number > newest {
            return Err(StateLayerError::NotAvailable {
                number,
                oldest,
                newest,
            });
        }
        let keep = layers.len() - usize::try_from(newest - number).expect("layers fit memory");
        // What lies below the layers (origin pool, clean cache, disk) is the disk layer's,
        // which does not move; each remaining layer's bloom covers only those below it.
        for layer in layers.drain(keep..) {
            self.touched.remove(layer.number, &layer.diff);
        }
        Ok(())
    }

    /// Writes the oldest layers beyond the kept ones to disk in one transaction, once
    /// [`FLUSH_BATCH`] of them have piled up, and drops them from memory. Returns the new
    /// disk height, if it moved.
    pub fn flush(&self, parallel: bool) -> Result<Option<u64>, StateLayerError> {
        self.flush_beyond(KEPT_LAYERS, FLUSH_BATCH, parallel)
    }

    /// Writes every layer to disk in one transaction, for a node that is stopping: a
    /// restart then has no block to re-execute. Returns the new disk height, if it moved.
    pub fn flush_all(&self, parallel: bool) -> Result<Option<u64>, StateLayerError> {
        self.flush_beyond(0, 1, parallel)
    }

    /// Writes the layers below the newest `keep` to disk, once at least `batch` of them
    /// have piled up.
    fn flush_beyond(
        &self,
        keep: usize,
        batch: usize,
        parallel: bool,
    ) -> Result<Option<u64>, StateLayerError> {
        let _one = self.flushing.lock();
        let pinned = self.pins.lock().keys().next().copied().unwrap_or(u64::MAX);
        let oldest: Vec<Arc<DiffLayer>> = {
            let layers = self.layers.read();
            if layers.len() < keep + batch {
                return Ok(None);
            }
            layers[..layers.len() - keep]
                .iter()
                .take_while(|layer| layer.number <= pinned)
                .cloned()
                .collect()
        };
        let Some(height) = oldest.last().map(|layer| layer.number) else {
            return Ok(None);
        };
        let merged = merge(oldest.iter().map(|layer| &layer.diff));
        let txs: Vec<(u64, &TxPositions)> = oldest
            .iter()
            .map(|layer| (layer.number, &layer.txs))
            .collect();
        let prior = match &self.history {
            Some(_) => Some(self.prior_values(&oldest)?),
            None => None,
        };
        let gate = self.gate.write();
        commit::flush_state(
            self.store,
            &[&merged],
            &txs,
            prior.as_ref(),
            height,
            parallel,
        )?;
        // The clean cache mirrors the disk: give it the values just written, and drop every
        // slot of an account whose storage was wiped (rare: under Prague only an account
        // created in the same transaction can self-destruct; a full scan is fine).
        let wiped: std::collections::HashSet<Address> = merged
            .accounts
            .iter()
            .filter(|(_, change)| change.storage_cleared)
            .map(|(address, _)| *address)
            .collect();
        if !wiped.is_empty() {
            let stale = |key: &StateKey| matches!(key, StateKey::Storage(owner, _) if wiped.contains(owner));
            self.clean.each(|shard| shard.retain(|key, _| !stale(key)));
            self.origin.each(|shard| shard.retain(|key, _| !stale(key)));
        }
        let written: Vec<StateKey> = keys(&merged).collect();
        let values = written.iter().filter_map(|key| {
            let value = oldest.iter().rev().find_map(|layer| layer.get(key))?;
            Some((*key, value))
        });
        self.clean.write_all(
            values,
            |(key, _)| key,
            |shard, (key, value)| {
                shard.insert(key, value);
            },
        );
        self.origin.write_all(
            written,
            |key| key,
            |shard, key| {
                shard.remove(&key);
            },
        );
        self.flushed.store(height, Ordering::Release);
        self.layers.write().drain(..oldest.len());
        // Unlisted only once dropped: a snapshot that still has a layer finds it listed or
        // reads its values from the disk, which holds them now. `merged` names every
        // account the dropped layers changed.
        self.touched.forget_up_to(height, &merged);
        metrics::gauge!("stave_state_flushed_height").set(height as f64);
        drop(gate);
        self.prune_history(height)?;
        Ok(Some(height))
    }

    /// Where the committed transaction with this hash is (block number and index): in a
    /// layer for the blocks after the flushed height, on disk for the others. A layer is
    /// dropped only after the flush wrote its positions, so none is ever missed.
    pub fn tx_location(&self, hash: B256) -> Result<Option<(u64, u32)>, StorageError> {
        let in_layers = self
            .layers
            .read()
            .iter()
            .rev()
            .find_map(|layer| layer.txs.find(hash).map(|index| (layer.number, index)));
        match in_layers {
            Some(found) => Ok(Some(found)),
            None => read::tx_location(self.store, hash),
        }
    }

    /// Reads per layer since the last [`StateLayers::take_reads`].
    pub fn take_reads(&self) -> LayerReads {
        self.reads_since(&self.taken)
    }

    /// The reads made since the counts in `mark`, which then become the counts now.
    fn reads_since(&self, mark: &Mutex<LayerReads>) -> LayerReads {
        let now = self.reads_so_far();
        let mut mark = mark.lock();
        let reads = now.since(&mark);
        *mark = now;
        reads
    }

    fn reads_so_far(&self) -> LayerReads {
        let sum = |which| self.counters.sum(which);
        LayerReads {
            block: sum(|c| &c.block),
            origin: sum(|c| &c.origin),
            diff: sum(|c| &c.diff),
            clean: sum(|c| &c.clean),
            disk: sum(|c| &c.disk),
            wasted_prefetch: sum(|c| &c.wasted_prefetch),
        }
    }

    /// Adds the reads since the last call to `stave_state_reads_total`.
    fn publish_reads(&self) {
        let reads = self.reads_since(&self.published);
        for (layer, count) in [
            ("l1", reads.block),
            ("l15", reads.origin),
            ("l2", reads.diff),
            ("l3", reads.clean),
            ("disk", reads.disk),
        ] {
            metrics::counter!("stave_state_reads_total", "layer" => layer).increment(count);
        }
    }

    pub(crate) fn count(&self, reader: Reader, which: fn(&Counts) -> &AtomicU64) {
        if reader == Reader::Execution {
            self.counters.add(which, 1);
        }
    }

    /// A value below the diff layers: origin pool, clean cache, then disk.
    ///
    /// A value read from disk goes into the origin pool only (a prefetcher's in batches,
    /// execution's when the next layer is prepared: [`ColdReads`]), which keeps it until a
    /// flush writes its key or the pool outgrows its bound. The clean cache gets values
    /// when a flush writes them: most keys a block reads from disk it also writes (a
    /// transfer's sender and recipient), so a copy in the clean cache would be stale by
    /// the flush, and the insert (S3-FIFO bookkeeping, a slab that grows) made every disk
    /// read cost more: `bench pipeline` measured both the serial execute stage and the
    /// pipelined import clearly faster without it.
    pub(crate) fn below(&self, key: StateKey, reader: Reader) -> Result<StateValue, StateError> {
        if let Reader::Past(number) = reader {
            return self.read_past(&key, number).map_err(state_error);
        }
        if reader == Reader::Historical {
            return match self.clean_value(&key) {
                Some(value) => Ok(value),
                None => self.read_disk(&key).map_err(state_error),
            };
        }
        if let Some(entry) = self.origin.read(&key).get(&key) {
            // Only the first use writes: a store on every read dirtied the entry's line.
            if reader == Reader::Execution && !entry.used.load(Ordering::Relaxed) {
                entry.used.store(true, Ordering::Relaxed);
            }
            self.count(reader, |c| &c.origin);
            return Ok(entry.value.clone());
        }
        // Read before the value: a flush after this point makes the value one to drop.
        let flushed = self.flushed();
        let value = match self.clean_value(&key) {
            Some(value) => {
                self.count(reader, |c| &c.clean);
                value
            }
            None => {
                self.count(reader, |c| &c.disk);
                // Only a prefetch's reads are timed: the clock stays off execution's path.
                let started = (reader == Reader::Prefetch).then(Instant::now);
                let value = self.read_disk(&key);
                if let Some(started) = started {
                    metrics::counter!("stave_state_prefetch_loads_total").increment(1);
                    PREFETCH_DISK_LOADS.with(|loads| {
                        let DiskLoads { count, time } = loads.get();
                        loads.set(DiskLoads {
                            count: count + 1,
                            time: time + started.elapsed(),
                        });
                    });
                }
                value.map_err(state_error)?
            }
        };
        if reader == Reader::Execution {
            self.note_cold_read(flushed, key, &value);
            return Ok(value);
        }
        self.note_prefetched(flushed, key, value.clone());
        Ok(value)
    }

    /// The disk layer's value of `key`, from the origin pool or the clean cache when they
    /// hold it; not counted as a read.
    pub(crate) fn stored_value(&self, key: &StateKey) -> Result<StateValue, StorageError> {
        if let Some(entry) = self.origin.read(key).get(key) {
            return Ok(entry.value.clone());
        }
        match self.clean_value(key) {
            Some(value) => Ok(value),
            None => self.read_disk(key),
        }
    }

    /// The clean cache's value of `key`.
    fn clean_value(&self, key: &StateKey) -> Option<StateValue> {
        self.clean.read(key).get(key).cloned()
    }

    fn read_disk(&self, key: &StateKey) -> Result<StateValue, StorageError> {
        Ok(match key {
            StateKey::Account(address) => StateValue::Account(read::account(self.store, *address)?),
            StateKey::Storage(address, slot) => {
                StateValue::Storage(read::storage(self.store, *address, *slot)?)
            }
            StateKey::Code(hash) => StateValue::Code(read::code(self.store, *hash)?),
            StateKey::Wiped(_) => StateValue::Storage(U256::ZERO),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::DiskLoads;

    #[test]
    fn loads_are_judged_by_their_average_time() {
        let us = Duration::from_micros;
        let loads = |count, time| DiskLoads { count, time };
        assert!(
            !loads(0, us(0)).averaged_at_least(Duration::ZERO),
            "no loads"
        );
        assert!(loads(1, us(0)).averaged_at_least(Duration::ZERO));
        assert!(loads(3, us(30)).averaged_at_least(us(10)));
        assert!(!loads(3, us(29)).averaged_at_least(us(10)));
        let later = loads(5, us(100)).since(loads(3, us(29)));
        assert_eq!(later, loads(2, us(71)));
    }
}
