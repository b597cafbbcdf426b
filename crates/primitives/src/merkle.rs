//! The binary Merkle root that commits a block header to its transactions (and receipts).
//!
//! Leaves are hashes (of transactions, of receipts). Each level hashes pairs `keccak256(left || right)`;
//! an odd node at the end of a level moves up unpaired (never duplicated, so two lists
//! cannot share a root the way Bitcoin's CVE-2012-2459 allowed). The root is
//! `keccak256(count as u64 big-endian || top)`, so a list and the list of its inner nodes
//! never share a root either. Levels are hashed in parallel with rayon.

use alloy_primitives::{B256, keccak256};
use rayon::prelude::*;

/// Below this many nodes a level is hashed on the calling thread: a keccak of 64 bytes
/// costs ~200 ns, less than handing the work to the pool.
const PARALLEL_MIN_NODES: usize = 1024;

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

    #[test]
    fn empty_list_has_a_fixed_root() {
        let mut pre = [0u8; 40];
        pre[..8].copy_from_slice(&0u64.to_be_bytes());
        assert_eq!(merkle_root(&[]), keccak256(pre));
    }
}
