//! Stave's wire codecs: the offset-indexed list and the block encoding (docs/wire-formats.md).
//!
//! A block body is an [`IndexedList`] of canonical EIP-2718 transactions: a table of u32
//! offsets lets every transaction decode on its own thread, with its hash computed from
//! its exact bytes in the same pass. [`decode_block`] then checks the body against the
//! header's `transactions_root` before anyone executes it. Every malformed input is a
//! typed [`CodecError`] naming the index or offset; nothing panics, and nothing is
//! allocated from an unchecked length. The codec does no I/O.
//!
//! ```
//! use stave_codec::{IndexedList, encode_indexed};
//!
//! let bytes = encode_indexed(&[b"ab".to_vec(), b"c".to_vec()], |item, out| {
//!     out.extend_from_slice(item)
//! })?;
//! let list = IndexedList::parse(&bytes)?;
//! assert_eq!(list.get(1), Some(&b"c"[..]));
//! # Ok::<(), stave_codec::CodecError>(())
//! ```
//!
//! [`split_block_stream`] cuts a stream of concatenated blocks (`stave export`'s file)
//! into blocks. [`rlp_list`] keeps the standard RLP body form as the baseline benches
//! compare against.

mod block;
mod error;
mod indexed;
pub mod rlp_list;
mod stream;
mod transactions;

pub use block::{
    BlockParts, decode_block, encode_block, encode_block_parts, max_txs_for, split_block,
};
pub use error::CodecError;
pub use indexed::{IndexedList, encode_indexed};
pub use stream::split_block_stream;
pub use transactions::{decode_transactions, decode_transactions_serial, encode_transactions};
