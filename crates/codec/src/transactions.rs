//! Transaction lists in the offset-indexed form: encoded and decoded on all cores.

use stave_primitives::SignedTx;

use crate::{
    error::CodecError,
    indexed::{IndexedList, encode_indexed},
};

/// Encodes transactions (canonical EIP-2718 bytes each) as an offset-indexed list.
pub fn encode_transactions(txs: &[SignedTx]) -> Result<Vec<u8>, CodecError> {
    encode_indexed(txs, SignedTx::encode_into)
}

/// Decodes an offset-indexed transaction list on all cores: framing first, then every
/// item, which must decode to one transaction spanning exactly its bytes. Each
/// transaction's hash is computed from its exact bytes in the same parallel pass.
pub fn decode_transactions(bytes: &[u8]) -> Result<Vec<SignedTx>, CodecError> {
    decode_list(&IndexedList::parse(bytes)?)
}

/// [`decode_transactions`] of a list whose framing is already checked.
pub(crate) fn decode_list(list: &IndexedList<'_>) -> Result<Vec<SignedTx>, CodecError> {
    list.par_decode(SignedTx::decode)
        .map_err(|(index, source)| CodecError::Transaction { index, source })
}

/// Decodes an offset-indexed transaction list on the calling thread, item after item:
/// the serial baseline of the decode stage (same checks, same result as
/// [`decode_transactions`]).
pub fn decode_transactions_serial(bytes: &[u8]) -> Result<Vec<SignedTx>, CodecError> {
    decode_list_serial(&IndexedList::parse(bytes)?)
}

/// [`decode_transactions_serial`] of a list whose framing is already checked.
pub(crate) fn decode_list_serial(list: &IndexedList<'_>) -> Result<Vec<SignedTx>, CodecError> {
    list.iter()
        .enumerate()
        .map(|(index, item)| {
            SignedTx::decode(item).map_err(|source| CodecError::Transaction { index, source })
        })
        .collect()
}
