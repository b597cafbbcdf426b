//! A block stream, as `stave export` writes and `stave import` reads it: encoded blocks
//! concatenated, each a self-delimiting RLP list.

use crate::CodecError;

/// Splits a block stream into its items, each one block's wire form, without decoding
/// them: only the RLP header of each is read, to find where the next begins.
pub fn split_block_stream(bytes: &[u8]) -> Result<Vec<&[u8]>, CodecError> {
    let mut items = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let mut payload = rest;
        let malformed = |source| CodecError::StreamHeader { offset, source };
        // The header's decoding checks that its payload is there in full.
        let header = alloy_rlp::Header::decode(&mut payload).map_err(malformed)?;
        let len = rest.len() - payload.len() + header.payload_length;
        let (item, after) = rest
            .split_at_checked(len)
            .ok_or_else(|| malformed(alloy_rlp::Error::InputTooShort))?;
        items.push(item);
        rest = after;
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_concatenated_items_and_names_where_a_stream_breaks() {
        // Two RLP lists: [0x01] and [], then nothing.
        let stream = [0xc1, 0x01, 0xc0];
        let items = split_block_stream(&stream).expect("a stream");
        assert_eq!(items, vec![&[0xc1, 0x01][..], &[0xc0][..]]);
        assert_eq!(split_block_stream(&[]).expect("empty"), Vec::<&[u8]>::new());
        // The second item claims two payload bytes and has one.
        assert_eq!(
            split_block_stream(&[0xc0, 0xc2, 0x01]),
            Err(CodecError::StreamHeader {
                offset: 1,
                source: alloy_rlp::Error::InputTooShort
            })
        );
        // A long-list header whose length bytes are missing.
        assert!(matches!(
            split_block_stream(&[0xc0, 0xf9]),
            Err(CodecError::StreamHeader { offset: 1, .. })
        ));
    }
}
