//! Compact blocks (as Bitcoin's BIP 152 and FISCO BCOS's partial blocks): a block travels as
//! its header and one 8-byte short id per transaction, and the receiver rebuilds the body
//! from the transactions it already holds, fetching only the ones it lacks.
//!
//! ```text
//! CompactBlock = RLP[header, short_ids]   short_ids: byte string, 8 bytes (LE) per tx
//! short_id(tx) = SipHash-1-3(key = first 16 bytes of the block hash,
//!                            u64 LE 32 ‖ tx hash)
//! ```
//!
//! Keying the hash by the block means a collision found for one block is useless for the
//! next. A collision, or a peer that lies, is caught when the rebuilt body's Merkle root does
//! not match the header's `transactions_root`.

use std::{
    collections::{HashMap, VecDeque},
    hash::{Hash, Hasher},
};

use alloy_primitives::{B256, keccak256};
use alloy_rlp::{Decodable, Encodable};
use bytes::Bytes;
use siphasher::sip::SipHasher13;
use stave_codec::{IndexedList, encode_block_parts, encode_indexed, max_txs_for};
use stave_primitives::{Header, merkle_root};

/// Bytes of one short id.
pub const SHORT_ID_LEN: usize = 8;

/// Why a block or compact block could not be read or rebuilt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The outer structure is not what the format says.
    #[error("malformed: {0}")]
    Rlp(#[from] alloy_rlp::Error),
    /// The header bytes are not the canonical encoding of the header they decode to.
    #[error("header is not canonically encoded")]
    NonCanonicalHeader,
    /// The short ids are not a whole number of 8-byte ids.
    #[error("short ids take {0} bytes, not a multiple of {SHORT_ID_LEN}")]
    ShortIdsLength(usize),
    /// More transactions than a block may hold.
    #[error("{count} transactions, more than the limit of {max}")]
    TooManyTxs {
        /// What the message declares.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The body is not a valid offset-indexed list.
    #[error("body: {0}")]
    Body(#[from] stave_codec::CodecError),
    /// Some transactions are still missing.
    #[error("{0} transactions are still missing")]
    Incomplete(usize),
    /// The rebuilt transactions do not hash to the header's `transactions_root`.
    #[error("rebuilt body does not match the transactions root {expected}")]
    RootMismatch {
        /// The header's root.
        expected: B256,
    },
}

/// A block received as its header and short ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactBlock {
    /// The header.
    pub header: Header,
    /// keccak-256 of the header bytes as received.
    pub hash: B256,
    /// One short id per transaction, in block order.
    pub short_ids: Vec<u64>,
}

/// The short id of transaction `tx_hash` in the block `block_hash`.
///
/// The hashed bytes are spelled out rather than fed through `Hash`, whose length prefix
/// is a `usize` in native byte order and so differs between hosts; these are what a
/// 64-bit little-endian host's `Hash` fed, so ids stay what such nodes always sent.
pub fn short_id(block_hash: &B256, tx_hash: &B256) -> u64 {
    let (k0, k1) = sip_keys(block_hash);
    let mut hasher = SipHasher13::new_with_keys(k0, k1);
    hasher.write(&(B256::len_bytes() as u64).to_le_bytes());
    hasher.write(tx_hash.as_slice());
    hasher.finish()
}

fn sip_keys(block_hash: &B256) -> (u64, u64) {
    let word = |at: usize| {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&block_hash[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    (word(0), word(8))
}

impl CompactBlock {
    /// The compact form of a block with header `header` (hash `hash`) and transactions
    /// `tx_hashes`.
    pub fn new(header: Header, hash: B256, tx_hashes: &[B256]) -> Self {
        let short_ids = tx_hashes.iter().map(|tx| short_id(&hash, tx)).collect();
        Self {
            header,
            hash,
            short_ids,
        }
    }

    /// Its wire form.
    pub fn encode(&self) -> Vec<u8> {
        let ids: Vec<u8> = self
            .short_ids
            .iter()
            .flat_map(|id| id.to_le_bytes())
            .collect();
        let ids = ids.as_slice();
        let payload_length = self.header.length() + ids.length();
        let mut out = Vec::with_capacity(payload_length + 9);
        alloy_rlp::Header {
            list: true,
            payload_length,
        }
        .encode(&mut out);
        self.header.encode(&mut out);
        ids.encode(&mut out);
        out
    }
}

/// Reads the outer list and the header of `RLP[header, second]`; returns the header, its
/// hash and the second item's bytes.
fn split_header(bytes: &[u8]) -> Result<(Header, B256, &[u8]), CompactError> {
    let mut buf = bytes;
    let outer = alloy_rlp::Header::decode(&mut buf)?;
    if !outer.list {
        return Err(alloy_rlp::Error::UnexpectedString.into());
    }
    if outer.payload_length != buf.len() {
        return Err(alloy_rlp::Error::UnexpectedLength.into());
    }
    let header_start = buf;
    let header = Header::decode(&mut buf)?;
    let header_bytes = &header_start[..header_start.len() - buf.len()];
    if header.length() != header_bytes.len() {
        return Err(CompactError::NonCanonicalHeader);
    }
    let second = alloy_rlp::Header::decode_bytes(&mut buf, false)?;
    if !buf.is_empty() {
        return Err(alloy_rlp::Error::UnexpectedLength.into());
    }
    Ok((header, keccak256(header_bytes), second))
}

/// Decodes a compact block of at most `max_txs` transactions, and at most as many as its
/// gas limit allows ([`max_txs_for`]).
pub fn decode_compact(bytes: &[u8], max_txs: usize) -> Result<CompactBlock, CompactError> {
    let (header, hash, ids) = split_header(bytes)?;
    if ids.len() % SHORT_ID_LEN != 0 {
        return Err(CompactError::ShortIdsLength(ids.len()));
    }
    check_count(ids.len() / SHORT_ID_LEN, max_txs.min(max_txs_for(&header)))?;
    let short_ids = ids
        .chunks_exact(SHORT_ID_LEN)
        .map(|id| {
            let mut word = [0; SHORT_ID_LEN];
            word.copy_from_slice(id);
            u64::from_le_bytes(word)
        })
        .collect();
    Ok(CompactBlock {
        header,
        hash,
        short_ids,
    })
}

/// A block's header, hash and transaction list, refused if the list holds more
/// transactions than the header's gas limit allows ([`max_txs_for`]).
fn split_body(bytes: &[u8]) -> Result<(Header, B256, IndexedList<'_>), CompactError> {
    let (header, hash, body) = split_header(bytes)?;
    let list = IndexedList::parse(body)?;
    check_count(list.len(), max_txs_for(&header))?;
    Ok((header, hash, list))
}

/// Checks a peer's block in its wire form as far as can be done without decoding a
/// transaction: its framing, and no more transactions than its gas limit allows. What
/// a node catching up runs on each fetched block before handing it on to be decoded.
pub fn check_block(bytes: &[u8]) -> Result<(), CompactError> {
    split_body(bytes).map(drop)
}

/// Refuses `count` transactions if more than `max`.
fn check_count(count: usize, max: usize) -> Result<(), CompactError> {
    if count > max {
        return Err(CompactError::TooManyTxs { count, max });
    }
    Ok(())
}

/// A block's parts as gossip handles them: header, hash, and each transaction's bytes and
/// hash.
#[derive(Debug, Clone)]
pub struct BlockParts {
    /// The header.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// Each transaction's canonical encoding, in block order.
    pub txs: Vec<Bytes>,
    /// Each transaction's hash.
    pub tx_hashes: Vec<B256>,
}

impl BlockParts {
    /// Splits a block in its wire form (docs/wire-formats.md), hashing its transactions, and
    /// checks them against the header's `transactions_root`. More transactions than the
    /// gas limit allows ([`max_txs_for`]) are refused before any is copied.
    pub fn from_block(bytes: &[u8]) -> Result<Self, CompactError> {
        let (header, hash, list) = split_body(bytes)?;
        let txs: Vec<Bytes> = list.iter().map(Bytes::copy_from_slice).collect();
        let tx_hashes = txs.iter().map(keccak256).collect();
        let parts = Self {
            header,
            hash,
            txs,
            tx_hashes,
        };
        parts.check_root()?;
        Ok(parts)
    }

    /// Checks the transaction hashes against the header's `transactions_root`.
    pub fn check_root(&self) -> Result<(), CompactError> {
        if merkle_root(&self.tx_hashes) == self.header.transactions_root {
            Ok(())
        } else {
            Err(CompactError::RootMismatch {
                expected: self.header.transactions_root,
            })
        }
    }

    /// The compact form of the block.
    pub fn compact(&self) -> CompactBlock {
        CompactBlock::new(self.header.clone(), self.hash, &self.tx_hashes)
    }

    /// The block in its wire form.
    pub fn encode(&self) -> Result<Vec<u8>, CompactError> {
        let body = encode_indexed(&self.txs, |tx, out| out.extend_from_slice(tx))?;
        Ok(encode_block_parts(&self.header, &body))
    }
}

/// A bounded map that forgets its oldest entries first.
#[derive(Debug)]
pub struct FifoMap<K, V> {
    capacity: usize,
    order: VecDeque<K>,
    entries: HashMap<K, V>,
}

impl<K: Hash + Eq + Clone, V> FifoMap<K, V> {
    /// A map holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }

    /// Inserts `key` unless present; returns true if it was new.
    pub fn insert(&mut self, key: K, value: V) -> bool {
        if self.entries.contains_key(&key) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.entries.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.entries.insert(key, value);
        true
    }

    /// True if `key` is held.
    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter()
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A compact block being rebuilt: the transactions found so far.
#[derive(Debug, Clone)]
pub struct Rebuild {
    /// The block.
    pub compact: CompactBlock,
    /// Each slot's transaction (bytes and hash), if known.
    pub slots: Vec<Option<(Bytes, B256)>>,
}

impl Rebuild {
    /// Fills the slots from `known` (transactions by hash). A short id that matches two
    /// known transactions is left empty, to be fetched.
    pub fn new(compact: CompactBlock, known: &FifoMap<B256, Bytes>) -> Self {
        let wanted: HashMap<u64, usize> = compact
            .short_ids
            .iter()
            .enumerate()
            .map(|(index, id)| (*id, index))
            .collect();
        let mut slots: Vec<Option<(Bytes, B256)>> = vec![None; compact.short_ids.len()];
        let mut ambiguous = Vec::new();
        for (hash, tx) in known.iter() {
            let id = short_id(&compact.hash, hash);
            if let Some(&index) = wanted.get(&id) {
                if slots[index].is_some() {
                    ambiguous.push(index);
                }
                slots[index] = Some((tx.clone(), *hash));
            }
        }
        for index in ambiguous {
            slots[index] = None;
        }
        // Two slots with one short id (a collision inside the block) both need fetching.
        for (index, id) in compact.short_ids.iter().enumerate() {
            if wanted.get(id) != Some(&index) {
                slots[index] = None;
                if let Some(&other) = wanted.get(id) {
                    slots[other] = None;
                }
            }
        }
        Self { compact, slots }
    }

    /// Indexes of the slots still empty.
    pub fn missing(&self) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_none())
            .map(|(index, _)| index as u32)
            .collect()
    }

    /// Fills slots `indexes` with `txs` (fetched from a peer, in the same order).
    pub fn fill(&mut self, indexes: &[u32], txs: Vec<Bytes>) {
        for (index, tx) in indexes.iter().zip(txs) {
            if let Some(slot) = self.slots.get_mut(*index as usize) {
                let hash = keccak256(&tx);
                *slot = Some((tx, hash));
            }
        }
    }

    /// The block, if every slot is filled and the body matches the header's root.
    pub fn finish(self) -> Result<BlockParts, CompactError> {
        let missing = self.slots.iter().filter(|slot| slot.is_none()).count();
        if missing > 0 {
            return Err(CompactError::Incomplete(missing));
        }
        let mut txs = Vec::with_capacity(self.slots.len());
        let mut tx_hashes = Vec::with_capacity(self.slots.len());
        for (tx, hash) in self.slots.into_iter().flatten() {
            txs.push(tx);
            tx_hashes.push(hash);
        }
        let parts = BlockParts {
            header: self.compact.header,
            hash: self.compact.hash,
            txs,
            tx_hashes,
        };
        parts.check_root()?;
        Ok(parts)
    }
}
