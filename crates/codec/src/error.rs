//! Why bytes were refused as an offset-indexed list or a block.

use alloy_primitives::B256;
use stave_primitives::TxError;

/// Why an offset-indexed list or a block failed to encode or decode.
///
/// Every variant names the index, offset or length that broke the rule, and no variant
/// is produced after a partial allocation sized by untrusted input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Fewer bytes than the count and offset table need.
    #[error("input of {len} bytes is too short for an offset-indexed list of {count} items")]
    Truncated {
        /// Declared item count (0 when even the count is missing).
        count: u64,
        /// Input length.
        len: usize,
    },
    /// `offsets[0]` is not 0.
    #[error("first offset is {0}, must be 0")]
    FirstOffsetNotZero(u32),
    /// An offset is smaller than the one before it.
    #[error("offset {index} is {offset}, below offset {} ({previous})", index - 1)]
    OffsetDecreasing {
        /// Index into the offset table.
        index: usize,
        /// Its value.
        offset: u32,
        /// The value before it.
        previous: u32,
    },
    /// An offset points past the end of the item bytes.
    #[error("offset {index} is {offset}, past the end of the {items_len} item bytes")]
    OffsetPastEnd {
        /// Index into the offset table.
        index: usize,
        /// Its value.
        offset: u32,
        /// Length of the item bytes.
        items_len: usize,
    },
    /// The last offset leaves bytes after the last item.
    #[error("final offset {offset} leaves {} trailing bytes after the items", items_len - *offset as usize)]
    TrailingBytes {
        /// The final offset.
        offset: u32,
        /// Length of the item bytes.
        items_len: usize,
    },
    /// An item does not decode as a transaction spanning exactly its bytes.
    #[error("transaction {index}: {source}")]
    Transaction {
        /// Item index.
        index: usize,
        /// Why it was refused.
        source: TxError,
    },
    /// The list would be larger than 4 GiB, which u32 offsets cannot address.
    #[error("list of {0} bytes exceeds the 4 GiB offset range")]
    ListTooLarge(usize),
    /// The block's outer RLP is malformed (not a list, wrong length, bad header or body).
    #[error("malformed block RLP: {0}")]
    BlockRlp(#[from] alloy_rlp::Error),
    /// Bytes follow the block's RLP list.
    #[error("{0} trailing bytes after the block")]
    TrailingBlockBytes(usize),
    /// An item of a block stream whose RLP header does not decode, or whose payload the
    /// stream does not hold in full.
    #[error("block stream: malformed RLP header")]
    StreamHeader {
        /// Where the item starts in the stream.
        offset: usize,
        /// The RLP error.
        #[source]
        source: alloy_rlp::Error,
    },
    /// The header's RLP decodes but is not the canonical encoding of what it decodes to.
    #[error("non-canonical header encoding")]
    NonCanonicalHeader,
    /// The body holds more transactions than the header's gas limit allows (see
    /// [`max_txs_for`](crate::max_txs_for)).
    #[error("{count} transactions, more than the {max} the block's gas limit allows")]
    TooManyTransactions {
        /// How many the body holds.
        count: usize,
        /// The most the gas limit allows.
        max: usize,
    },
    /// The body's transactions do not hash to the header's `transactions_root`.
    #[error("transactions root mismatch: header has {expected}, body gives {computed}")]
    TransactionsRootMismatch {
        /// The root in the header.
        expected: B256,
        /// The root of the body.
        computed: B256,
    },
}
