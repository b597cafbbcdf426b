//! The offset-indexed list (see docs/wire-formats.md, offset-indexed list): a count, a
//! table of `N + 1` little-endian u32 offsets, then the items back to back.
//!
//! ```text
//! u32 LE  count N
//! u32 LE  offsets[N+1]      offsets[0] = 0, offsets[N] = len(items); relative to items start
//! bytes   items             item i = items[offsets[i] .. offsets[i+1]]
//! ```
//!
//! Standard RLP makes a decoder walk item i-1 to find item i; the table makes every item
//! reachable at once, so N items decode on N threads. The overhead is `4 * N + 8` bytes.
//!
//! [`IndexedList::parse`] validates the whole table before anything reads an item, so
//! [`IndexedList::get`] afterwards is a bounds-checked slice with no further failure mode.

use rayon::prelude::*;

use crate::error::CodecError;

/// Bytes of the count and of each offset.
const WORD: usize = 4;

/// Items per rayon task when decoding or encoding. A task of 16 transactions costs many
/// times rayon's per-task overhead, while a 2,500-tx block still splits into ~150 tasks
/// for the cores to balance.
pub(crate) const MIN_ITEMS_PER_TASK: usize = 16;

/// A validated, zero-copy view of an offset-indexed list borrowing its input.
#[derive(Debug, Clone, Copy)]
pub struct IndexedList<'a> {
    /// The offset table: `count + 1` little-endian u32, already checked.
    offsets: &'a [u8],
    /// The item bytes; `offsets` cover them exactly.
    items: &'a [u8],
}

impl<'a> IndexedList<'a> {
    /// Checks the framing of `bytes` and returns a view over it.
    ///
    /// Refuses (in this order): input too short for the declared count — checked before
    /// anything is allocated or read past the table —, a first offset other than 0, a
    /// decreasing offset, an offset past the end, and a final offset that leaves trailing
    /// bytes. Items themselves are not decoded.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CodecError> {
        let Some(count) = bytes.first_chunk::<WORD>().map(|c| u32::from_le_bytes(*c)) else {
            return Err(CodecError::Truncated {
                count: 0,
                len: bytes.len(),
            });
        };
        // In u64, so a count near u32::MAX cannot overflow the size computation.
        let table_len = (u64::from(count) + 1) * WORD as u64;
        if (WORD as u64) + table_len > bytes.len() as u64 {
            return Err(CodecError::Truncated {
                count: u64::from(count),
                len: bytes.len(),
            });
        }
        let (offsets, items) = bytes[WORD..].split_at(table_len as usize);
        let list = Self { offsets, items };
        let first = list.offset(0);
        if first != 0 {
            return Err(CodecError::FirstOffsetNotZero(first));
        }
        let mut previous = 0;
        for index in 1..=count as usize {
            let offset = list.offset(index);
            if offset < previous {
                return Err(CodecError::OffsetDecreasing {
                    index,
                    offset,
                    previous,
                });
            }
            if offset as usize > items.len() {
                return Err(CodecError::OffsetPastEnd {
                    index,
                    offset,
                    items_len: items.len(),
                });
            }
            previous = offset;
        }
        if previous as usize != items.len() {
            return Err(CodecError::TrailingBytes {
                offset: previous,
                items_len: items.len(),
            });
        }
        Ok(list)
    }

    fn offset(&self, index: usize) -> u32 {
        let at = index * WORD;
        u32::from_le_bytes([
            self.offsets[at],
            self.offsets[at + 1],
            self.offsets[at + 2],
            self.offsets[at + 3],
        ])
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.offsets.len() / WORD - 1
    }

    /// True when the list holds no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of item `index`, found from the table alone; `None` past the end.
    pub fn get(&self, index: usize) -> Option<&'a [u8]> {
        (index < self.len())
            .then(|| &self.items[self.offset(index) as usize..self.offset(index + 1) as usize])
    }

    /// The items' bytes in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(|i| &self.items[self.offset(i) as usize..self.offset(i + 1) as usize])
    }

    /// Decodes every item with `decode` on all cores and returns them in order. On
    /// failure, returns the lowest failing index with its error, whatever the scheduling.
    pub fn par_decode<T, E, F>(&self, decode: F) -> Result<Vec<T>, (usize, E)>
    where
        T: Send,
        E: Send,
        F: Fn(&'a [u8]) -> Result<T, E> + Sync,
    {
        let results: Vec<Result<T, E>> = (0..self.len())
            .into_par_iter()
            .with_min_len(MIN_ITEMS_PER_TASK)
            .map(|i| decode(&self.items[self.offset(i) as usize..self.offset(i + 1) as usize]))
            .collect();
        results
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.map_err(|e| (i, e)))
            .collect()
    }
}

/// Encodes `items` as an offset-indexed list, encoding chunks of items on all cores and
/// placing them by a prefix sum of their lengths.
pub fn encode_indexed<T, F>(items: &[T], encode: F) -> Result<Vec<u8>, CodecError>
where
    T: Sync,
    F: Fn(&T, &mut Vec<u8>) + Sync,
{
    // Each chunk encodes into one buffer and records where each item ends in it.
    let chunks: Vec<(Vec<u8>, Vec<usize>)> = items
        .par_chunks(MIN_ITEMS_PER_TASK)
        .map(|chunk| {
            let mut buf = Vec::new();
            let ends = chunk
                .iter()
                .map(|item| {
                    encode(item, &mut buf);
                    buf.len()
                })
                .collect();
            (buf, ends)
        })
        .collect();
    let items_len: usize = chunks.iter().map(|(buf, _)| buf.len()).sum();
    if u32::try_from(items_len).is_err() {
        return Err(CodecError::ListTooLarge(items_len));
    }
    let count = u32::try_from(items.len()).map_err(|_| CodecError::ListTooLarge(items_len))?;
    let mut out = Vec::with_capacity(WORD * (items.len() + 2) + items_len);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut base = 0;
    for (buf, ends) in &chunks {
        for end in ends {
            // Fits: the total was checked against u32 above.
            out.extend_from_slice(&((base + end) as u32).to_le_bytes());
        }
        base += buf.len();
    }
    for (buf, _) in &chunks {
        out.extend_from_slice(buf);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_bytes(items: &[Vec<u8>]) -> Vec<u8> {
        encode_indexed(items, |item, out| out.extend_from_slice(item)).expect("small list")
    }

    fn list(count: u32, offsets: &[u32], items: &[u8]) -> Vec<u8> {
        let mut out = count.to_le_bytes().to_vec();
        for o in offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
        out.extend_from_slice(items);
        out
    }

    #[test]
    fn empty_list_is_count_zero_and_one_offset() {
        let bytes = encode_bytes(&[]);
        assert_eq!(bytes, list(0, &[0], &[]));
        let view = IndexedList::parse(&bytes).expect("valid");
        assert!(view.is_empty());
        assert_eq!(view.get(0), None);
    }

    #[test]
    fn items_come_back_by_index_and_in_order() {
        let items: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; i as usize % 7]).collect();
        let bytes = encode_bytes(&items);
        assert_eq!(
            bytes.len(),
            4 * items.len() + 8 + items.iter().map(Vec::len).sum::<usize>()
        );
        let view = IndexedList::parse(&bytes).expect("valid");
        assert_eq!(view.len(), 100);
        assert_eq!(view.get(42), Some(&items[42][..]));
        assert_eq!(view.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), items);
    }

    #[test]
    fn rejects_missing_count_and_short_table() {
        assert_eq!(
            IndexedList::parse(&[1, 0]).unwrap_err(),
            CodecError::Truncated { count: 0, len: 2 }
        );
        // Declares 3 items but carries only two offsets.
        let bytes = list(3, &[0, 0], &[]);
        assert!(matches!(
            IndexedList::parse(&bytes),
            Err(CodecError::Truncated { count: 3, .. })
        ));
    }

    #[test]
    fn rejects_count_too_large_for_the_input_without_allocating() {
        let bytes = list(u32::MAX, &[0], &[]);
        assert!(matches!(
            IndexedList::parse(&bytes),
            Err(CodecError::Truncated {
                count: 4_294_967_295,
                ..
            })
        ));
    }

    #[test]
    fn rejects_offset_not_starting_at_zero() {
        let bytes = list(1, &[1, 2], &[7, 7]);
        assert_eq!(
            IndexedList::parse(&bytes).unwrap_err(),
            CodecError::FirstOffsetNotZero(1)
        );
    }

    #[test]
    fn rejects_decreasing_offsets() {
        let bytes = list(2, &[0, 2, 1], &[7, 7]);
        assert_eq!(
            IndexedList::parse(&bytes).unwrap_err(),
            CodecError::OffsetDecreasing {
                index: 2,
                offset: 1,
                previous: 2
            }
        );
    }

    #[test]
    fn rejects_offset_past_end() {
        let bytes = list(2, &[0, 5, 5], &[7, 7]);
        assert_eq!(
            IndexedList::parse(&bytes).unwrap_err(),
            CodecError::OffsetPastEnd {
                index: 1,
                offset: 5,
                items_len: 2
            }
        );
    }

    #[test]
    fn rejects_final_offset_short_of_the_end_as_trailing_bytes() {
        let bytes = list(1, &[0, 1], &[7, 7, 7]);
        assert_eq!(
            IndexedList::parse(&bytes).unwrap_err(),
            CodecError::TrailingBytes {
                offset: 1,
                items_len: 3
            }
        );
    }

    #[test]
    fn par_decode_reports_the_lowest_failing_index() {
        let items: Vec<Vec<u8>> = (0..500u32).map(|i| vec![(i % 251) as u8]).collect();
        let bytes = encode_bytes(&items);
        let view = IndexedList::parse(&bytes).expect("valid");
        let result = view.par_decode(|b| if b[0] % 50 == 49 { Err(b[0]) } else { Ok(b[0]) });
        assert_eq!(result.unwrap_err(), (49, 49));
        let all = view.par_decode(|b| Ok::<_, ()>(b[0])).expect("all decode");
        assert_eq!(all.len(), 500);
        assert_eq!(all[251], 0);
    }
}
