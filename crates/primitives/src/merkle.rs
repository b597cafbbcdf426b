//! The binary Merkle roots that commit a block header to its transactions, receipts and
//! state changes.
//!
//! [`merkle_root`]: leaves are hashes (of transactions, or of [`chunked_root`]'s leaves).
//! Each level hashes pairs `keccak256(left || right)`;
//! an odd node at the end of a level moves up unpaired (never duplicated, so two lists
//! cannot share a root the way Bitcoin's CVE-2012-2459 allowed). The root is
//! `keccak256(count as u64 big-endian || top)`, so a list and the list of its inner nodes
//! never share a root either. Levels are hashed in parallel with rayon.

use std::{borrow::Cow, ops::Range};

use alloy_primitives::{B256, keccak256};
use rayon::prelude::*;

/// Below this many nodes a level is hashed on the calling thread: hashing a pair of nodes
/// costs less than handing the work to the pool.
const PARALLEL_MIN_NODES: usize = 1024;

/// Fewer leaves than this a [`chunked_root`] hashes in one part: less keccak than it is
/// worth waking another thread for.
const MIN_LEAVES_PER_PART: usize = 16;

/// Items per leaf of a [`chunked_root`]: 32, so a leaf of small items (a transfer's receipt
/// is 10 bytes) fills keccak's 136-byte blocks instead of paying a whole permutation each.
pub const ITEMS_PER_LEAF: usize = 32;

/// The Merkle root over `hashes`; a header's `transactions_root` is this over its txs' hashes.
pub fn merkle_root(hashes: &[B256]) -> B256 {
    let top = match hashes.len() {
        0 => B256::ZERO,
        1 => hashes[0],
        _ => {
            let mut level = hash_level(hashes);
            while level.len() > 1 {
                level = hash_level(&level);
            }
            level[0]
        }
    };
    let mut preimage = [0u8; 40];
    preimage[..8].copy_from_slice(&(hashes.len() as u64).to_be_bytes());
    preimage[8..].copy_from_slice(top.as_slice());
    keccak256(preimage)
}

/// Where a [`chunked_root`]'s leaves are hashed: the list is cut into parts, hashed on
/// threads of their own when there are threads for them.
pub trait LeafHasher: Sync {
    /// Parts worth cutting a list into: the threads that would hash them, or more when
    /// the threads share them out as they go.
    fn parts(&self) -> usize;
    /// Runs `hash_part(i)` for every `i` in `0..parts`, and returns the results in order.
    fn hash_parts(
        &self,
        parts: usize,
        hash_part: &(dyn Fn(usize) -> Vec<B256> + Sync),
    ) -> Vec<Vec<B256>>;
}

/// Hashes every leaf on the calling thread (the serial baseline, and small lists).
#[derive(Debug, Clone, Copy, Default)]
pub struct SerialLeaves;

impl LeafHasher for SerialLeaves {
    fn parts(&self) -> usize {
        1
    }

    fn hash_parts(
        &self,
        parts: usize,
        hash_part: &(dyn Fn(usize) -> Vec<B256> + Sync),
    ) -> Vec<Vec<B256>> {
        (0..parts).map(hash_part).collect()
    }
}

/// Hashes the parts on rayon's global pool: for work nothing else runs beside (a
/// genesis, the blocks replayed at start). While the pipeline recovers the next block's
/// signatures there, a block's roots would queue behind that work, so a block's roots are
/// hashed on the executor's threads instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalPoolLeaves;

impl LeafHasher for GlobalPoolLeaves {
    fn parts(&self) -> usize {
        rayon::current_num_threads()
    }

    fn hash_parts(
        &self,
        parts: usize,
        hash_part: &(dyn Fn(usize) -> Vec<B256> + Sync),
    ) -> Vec<Vec<B256>> {
        (0..parts).into_par_iter().map(hash_part).collect()
    }
}

/// The [`merkle_root`] over leaves of [`ITEMS_PER_LEAF`] consecutive items each, a leaf
/// being `keccak256` of its items' encodings concatenated; the leaves are cut into as
/// many parts as `hasher` asks for (each part at least 16 leaves), hashed there.
/// `encode` must append a prefix-free encoding (no item's a prefix of another's, as RLP's),
/// so that a leaf's bytes determine its items and the root determines the whole list.
///
/// Hashing each item on its own would cost at least one keccak permutation per item plus
/// one per tree node; leaves of 32 items cost about one per 136 bytes of encoding: for
/// 2,500 transfer receipts, about 300 permutations instead of 7,500.
pub fn chunked_root<T: Sync>(
    items: &[T],
    encode: impl Fn(&T, &mut Vec<u8>) + Sync,
    hasher: &dyn LeafHasher,
) -> B256 {
    chunked_roots(&[(&[], &Chunked::new(items, encode))], hasher)[0]
}

/// A list a [`chunked_root`] commits to, seen as its leaves.
pub(crate) trait LeafList: Sync {
    /// How many leaves the list has.
    fn leaves(&self) -> usize;
    /// Appends the hashes of the leaves in `range` to `out`.
    fn hash_leaves(&self, range: Range<usize>, out: &mut Vec<B256>);
}

/// Items and their encoding, in leaves of [`ITEMS_PER_LEAF`].
pub(crate) struct Chunked<'a, T, E> {
    items: &'a [T],
    encode: E,
}

impl<'a, T, E> Chunked<'a, T, E> {
    /// `items`, each encoded by `encode` (see [`chunked_root`]).
    pub(crate) fn new(items: &'a [T], encode: E) -> Self {
        Self { items, encode }
    }
}

impl<T: Sync, E: Fn(&T, &mut Vec<u8>) + Sync> LeafList for Chunked<'_, T, E> {
    fn leaves(&self) -> usize {
        self.items.len().div_ceil(ITEMS_PER_LEAF)
    }

    fn hash_leaves(&self, range: Range<usize>, out: &mut Vec<B256>) {
        let item = |leaf: usize| (leaf * ITEMS_PER_LEAF).min(self.items.len());
        let mut bytes = Vec::new();
        out.extend(
            self.items[item(range.start)..item(range.end)]
                .chunks(ITEMS_PER_LEAF)
                .map(|chunk| {
                    bytes.clear();
                    chunk
                        .iter()
                        .for_each(|item| (self.encode)(item, &mut bytes));
                    keccak256(&bytes)
                }),
        );
    }
}

/// The [`chunked_root`] of each of `lists`, their leaves hashed together: the leaves of all
/// of them, one after another, are cut into as many parts as `hasher` asks for, so the
/// threads share the work of both of a block's roots and are handed work once, not once
/// per root; then each list's Merkle top is hashed from its leaves, the lists' tops
/// handed to `hasher` as parts of their own. Each list comes as the hashes of its first
/// leaves, hashed ahead, and the leaves after them, to hash here.
pub(crate) fn chunked_roots(
    lists: &[(&[B256], &dyn LeafList)],
    hasher: &dyn LeafHasher,
) -> Vec<B256> {
    let counts: Vec<usize> = lists.iter().map(|(_, list)| list.leaves()).collect();
    let leaves: usize = counts.iter().sum();
    let parts = hasher.parts().min(leaves / MIN_LEAVES_PER_PART).max(1);
    // Part `i` hashes its share of the leaves of the lists laid end to end.
    let hash_part = |part: usize| {
        let (start, end) = (
            part_start(leaves, parts, part),
            part_start(leaves, parts, part + 1),
        );
        let mut hashed = Vec::with_capacity(end - start);
        let mut offset = 0;
        for ((_, list), count) in lists.iter().zip(&counts) {
            let within = |leaf: usize| leaf.clamp(offset, offset + count) - offset;
            list.hash_leaves(within(start)..within(end), &mut hashed);
            offset += count;
        }
        hashed
    };
    let hashed: Vec<B256> = if parts == 1 {
        hash_part(0)
    } else {
        hasher.hash_parts(parts, &hash_part).concat()
    };
    let mut rest = hashed.as_slice();
    let leaves_of: Vec<Cow<'_, [B256]>> = lists
        .iter()
        .zip(counts)
        .map(|((ahead, _), count)| {
            let (list, later) = rest.split_at(count);
            rest = later;
            if ahead.is_empty() {
                Cow::Borrowed(list)
            } else {
                Cow::Owned([ahead, list].concat())
            }
        })
        .collect();
    if parts == 1 || lists.len() == 1 {
        return leaves_of.iter().map(|leaves| merkle_root(leaves)).collect();
    }
    // Then the lists' Merkle tops side by side, the longest first: the calling thread
    // starts on it while a helper comes for the next, so neither top waits for the other.
    let mut longest_first: Vec<usize> = (0..lists.len()).collect();
    longest_first.sort_by_key(|&list| std::cmp::Reverse(leaves_of[list].len()));
    let tops = hasher.hash_parts(lists.len(), &|part| {
        vec![merkle_root(&leaves_of[longest_first[part]])]
    });
    let mut roots = vec![B256::ZERO; lists.len()];
    for (list, top) in longest_first.into_iter().zip(tops) {
        roots[list] = top[0];
    }
    roots
}

/// Where part `part` of `parts` starts among `leaves` leaves (`part == parts`: the end).
/// The parts shrink linearly, part `i` weighing `parts - i`: threads that take them in
/// turn are handed the small ones last, so they finish within a small part of each other.
/// Cut evenly, one thread could be left hashing a whole last part after the other had run
/// out.
fn part_start(leaves: usize, parts: usize, part: usize) -> usize {
    let weight_before = part * parts - part * part.saturating_sub(1) / 2;
    let total = parts * (parts + 1) / 2;
    leaves * weight_before / total
}

fn hash_pair(pair: &[B256]) -> B256 {
    match pair {
        [left, right] => {
            let mut preimage = [0u8; 64];
            preimage[..32].copy_from_slice(left.as_slice());
            preimage[32..].copy_from_slice(right.as_slice());
            keccak256(preimage)
        }
        // chunks(2) yields one node only at the odd end of a level.
        _ => pair[0],
    }
}

fn hash_level(nodes: &[B256]) -> Vec<B256> {
    if nodes.len() < PARALLEL_MIN_NODES {
        nodes.chunks(2).map(hash_pair).collect()
    } else {
        nodes.par_chunks(2).map(hash_pair).collect()
    }
}

/// Runs the parts one after another on the calling thread, as if it had `threads`
/// threads, and records how many parts it was given: the tests' hasher.
#[cfg(test)]
pub(crate) struct PartsSeen {
    pub(crate) threads: usize,
    pub(crate) seen: std::sync::Mutex<Vec<usize>>,
}

#[cfg(test)]
impl LeafHasher for PartsSeen {
    fn parts(&self) -> usize {
        self.threads
    }

    fn hash_parts(
        &self,
        parts: usize,
        hash_part: &(dyn Fn(usize) -> Vec<B256> + Sync),
    ) -> Vec<Vec<B256>> {
        self.seen.lock().expect("not poisoned").push(parts);
        SerialLeaves.hash_parts(parts, hash_part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<B256> {
        (0..n as u64).map(|i| keccak256(i.to_be_bytes())).collect()
    }

    /// The same tree computed the plain recursive way, as a reference.
    fn reference_top(nodes: &[B256]) -> B256 {
        if nodes.len() == 1 {
            return nodes[0];
        }
        let next: Vec<B256> = nodes.chunks(2).map(hash_pair).collect();
        reference_top(&next)
    }

    #[test]
    fn parallel_levels_match_serial_reference() {
        for n in [1, 2, 3, 7, 1023, 1024, 1025, 2500, 4097] {
            let l = leaves(n);
            let mut pre = (n as u64).to_be_bytes().to_vec();
            pre.extend_from_slice(reference_top(&l).as_slice());
            assert_eq!(merkle_root(&l), keccak256(pre), "n = {n}");
        }
    }

    #[test]
    fn root_depends_on_order_count_and_content() {
        let l = leaves(5);
        let mut swapped = l.clone();
        swapped.swap(1, 2);
        assert_ne!(merkle_root(&l), merkle_root(&swapped));
        assert_ne!(merkle_root(&l), merkle_root(&l[..4]));
        // An odd last leaf is not duplicated: [a, b, c] and [a, b, c, c] differ.
        let mut dup = l[..3].to_vec();
        dup.push(l[2]);
        assert_ne!(merkle_root(&l[..3]), merkle_root(&dup));
        // A list and the list of its level-one nodes differ.
        let inner: Vec<B256> = l[..4].chunks(2).map(hash_pair).collect();
        assert_ne!(merkle_root(&l[..4]), merkle_root(&inner));
    }

    fn encode_bytes(item: &Vec<u8>, out: &mut Vec<u8>) {
        alloy_rlp::Encodable::encode(item.as_slice(), out);
    }

    #[test]
    fn chunked_root_is_the_merkle_root_of_its_leaves_and_commits_to_every_item() {
        let items: Vec<Vec<u8>> = (0..70u8).map(|i| vec![i; usize::from(i % 5)]).collect();
        let leaf = |chunk: &[Vec<u8>]| {
            let mut bytes = Vec::new();
            chunk.iter().for_each(|item| encode_bytes(item, &mut bytes));
            keccak256(bytes)
        };
        let leaves: Vec<B256> = items.chunks(ITEMS_PER_LEAF).map(leaf).collect();
        assert_eq!(leaves.len(), 3);
        let root = chunked_root(&items, encode_bytes, &SerialLeaves);
        assert_eq!(root, merkle_root(&leaves));
        // Order, content, and the count within one leaf all change the root.
        let mut swapped = items.clone();
        swapped.swap(40, 41);
        assert_ne!(root, chunked_root(&swapped, encode_bytes, &SerialLeaves));
        let mut changed = items.clone();
        changed[69].push(0);
        assert_ne!(root, chunked_root(&changed, encode_bytes, &SerialLeaves));
        assert_ne!(
            root,
            chunked_root(&items[..69], encode_bytes, &SerialLeaves)
        );
        // Two items cannot pass for one: [a, b] and [a ‖ b] differ.
        let joined = vec![[items[1].clone(), items[2].clone()].concat()];
        assert_ne!(
            chunked_root(&items[1..3], encode_bytes, &SerialLeaves),
            chunked_root(&joined, encode_bytes, &SerialLeaves)
        );
        assert_eq!(
            chunked_root::<Vec<u8>>(&[], encode_bytes, &SerialLeaves),
            merkle_root(&[])
        );
    }

    #[test]
    fn a_root_hashed_in_parts_is_the_root_hashed_whole() {
        let encode = |item: &u32, out: &mut Vec<u8>| out.extend_from_slice(&item.to_be_bytes());
        // 5,000 items (157 leaves, the last one short) and lengths around the cuts.
        for len in [0, 1, 511, 512, 513, 1000, 5000] {
            let items: Vec<u32> = (0..len).collect();
            let whole = chunked_root(&items, encode, &SerialLeaves);
            for threads in [2, 3, 8] {
                let hasher = PartsSeen {
                    threads,
                    seen: Default::default(),
                };
                assert_eq!(
                    chunked_root(&items, encode, &hasher),
                    whole,
                    "{len}, {threads}"
                );
                let leaves = (len as usize).div_ceil(ITEMS_PER_LEAF);
                let expected = threads.min(leaves / MIN_LEAVES_PER_PART);
                let seen = hasher.seen.into_inner().expect("not poisoned");
                assert_eq!(seen, [expected].repeat(usize::from(expected > 1)), "{len}");
            }
            assert_eq!(chunked_root(&items, encode, &GlobalPoolLeaves), whole);
        }
    }

    #[test]
    fn lists_hashed_together_in_parts_have_the_merkle_roots_of_their_leaves() {
        let encode = |item: &u32, out: &mut Vec<u8>| out.extend_from_slice(&item.to_be_bytes());
        let leaf_hashes = |items: &[u32]| -> Vec<B256> {
            let chunked = Chunked::new(items, encode);
            let mut hashed = Vec::new();
            chunked.hash_leaves(0..chunked.leaves(), &mut hashed);
            hashed
        };
        // Trees of a few leaves and of many, odd and even at every level, cut into up to
        // 9 parts whose borders fall anywhere in either list, some leaves hashed ahead.
        for first_leaves in [0, 1, 2, 3, 16, 17, 31, 33, 64, 100, 157] {
            for second_leaves in [0, 1, 40, 79] {
                for ahead_len in [0, 1, 5] {
                    let first: Vec<u32> = (0..first_leaves * ITEMS_PER_LEAF as u32).collect();
                    // The second list's last leaf is short.
                    let second_len = (second_leaves * ITEMS_PER_LEAF as u32).saturating_sub(3);
                    let second: Vec<u32> = (0..second_len).map(|i| i ^ 0xabcd).collect();
                    let ahead = leaves(ahead_len);
                    let expected = [
                        merkle_root(&[ahead.clone(), leaf_hashes(&first)].concat()),
                        merkle_root(&leaf_hashes(&second)),
                    ];
                    for threads in 1..=9 {
                        let hasher = PartsSeen {
                            threads,
                            seen: Default::default(),
                        };
                        let roots = chunked_roots(
                            &[
                                (&ahead, &Chunked::new(&first, encode)),
                                (&[], &Chunked::new(&second, encode)),
                            ],
                            &hasher,
                        );
                        assert_eq!(
                            roots, expected,
                            "{first_leaves} + {ahead_len} ahead, {second_leaves}, {threads}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn parts_cover_the_leaves_in_order_and_shrink() {
        for leaves in [16, 17, 157, 236, 1000] {
            for parts in 1..=(leaves / MIN_LEAVES_PER_PART).min(16) {
                let starts: Vec<usize> = (0..=parts)
                    .map(|part| part_start(leaves, parts, part))
                    .collect();
                assert_eq!(
                    (starts[0], starts[parts]),
                    (0, leaves),
                    "{leaves} in {parts}"
                );
                let sizes: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
                assert!(sizes.iter().all(|&size| size > 0), "{sizes:?}");
                // Each part is within a leaf of `leaves * (parts - i) / total`.
                let total = parts * (parts + 1) / 2;
                for (i, &size) in sizes.iter().enumerate() {
                    let exact = (leaves * (parts - i)) as f64 / total as f64;
                    assert!(
                        (size as f64 - exact).abs() < 1.0,
                        "{leaves} in {parts}: {sizes:?}"
                    );
                }
                assert!(sizes.windows(2).all(|w| w[1] <= w[0] + 1), "{sizes:?}");
            }
        }
    }

    #[test]
    fn empty_list_has_a_fixed_root() {
        let mut pre = [0u8; 40];
        pre[..8].copy_from_slice(&0u64.to_be_bytes());
        assert_eq!(merkle_root(&[]), keccak256(pre));
    }
}
