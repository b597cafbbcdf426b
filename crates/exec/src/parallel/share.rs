//! How a block is cut into chunks: the first chunk's share is learned from the blocks
//! before ([`FirstShare`]), the later chunks split the rest evenly ([`shared_chunks`]).

use std::{collections::VecDeque, ops::Range, time::Duration};

use parking_lot::Mutex;

/// Transactions `range` split into `parts` contiguous chunks as even as can be.
fn chunks(range: Range<usize>, parts: usize) -> Vec<Range<usize>> {
    let len = range.len();
    (0..parts)
        .map(|part| range.start + len * part / parts..range.start + len * (part + 1) / parts)
        .filter(|chunk| !chunk.is_empty())
        .collect()
}

/// Transactions `range` split into `parts` contiguous chunks: the first `share` of them
/// (in [`FirstShare::ONE`]ths) in the first, the rest as even as can be.
pub(super) fn shared_chunks(range: Range<usize>, parts: usize, share: u32) -> Vec<Range<usize>> {
    if parts < 2 {
        return chunks(range, parts);
    }
    let first_end = range.start + range.len() * share as usize / FirstShare::ONE as usize;
    let mut all = chunks(range.start..first_end, 1);
    all.extend(chunks(first_end..range.end, parts - 1));
    all
}

/// The first chunk's share of a block, learned from the blocks before it. The first chunk
/// runs for real, while the others speculate, log every read and write and check samples
/// of their reads, so a speculated transaction may cost more than a real one, and more so
/// while a new executor's logs grow. It starts from [`FirstShare::SPECULATION_COST`]; each
/// block whose chunks all ran tells the share at which they would have finished together,
/// and the next block's first chunk gets the median of the last [`FirstShare::BLOCKS`].
///
/// A median, not an average: a block executed beside other work (the node's import
/// pipeline flushes state layers to disk meanwhile) comes out unbalanced, its speculator
/// slow; it is an odd block out, and should not move the share of the blocks that follow
/// it alone. (`stave bench pipeline` runs such blocks between those it times alone, and
/// the median left those better balanced than moving the share half way to each block's
/// own did.)
#[derive(Debug)]
pub(super) struct FirstShare {
    /// The share before any block was learned from.
    initial: u32,
    /// The shares the last blocks (at most [`FirstShare::BLOCKS`]) would have finished
    /// together with, oldest first.
    recent: Mutex<VecDeque<u32>>,
}

impl FirstShare {
    /// The whole block.
    const ONE: u32 = 1 << 16;
    /// Transactions a chunk needs for its time to say anything.
    const MIN_TXS: usize = 64;
    /// What a speculated transaction costs, in real ones, until blocks say otherwise: a
    /// little more in a new executor's first blocks, while its logs grow, than once they
    /// have grown, for transfers and ERC-20 transfers alike.
    const SPECULATION_COST: f64 = 1.1;
    /// Blocks the share is the median of: the odd blocks out among them do not move it
    /// while they are fewer than half, and a lasting change moves it within four blocks.
    const BLOCKS: usize = 7;

    /// The share at which the chunks would finish together on `threads` threads if a
    /// speculated transaction cost [`FirstShare::SPECULATION_COST`].
    pub(super) fn new(threads: usize) -> Self {
        let share = Self::balanced(threads.max(1), 1.0, 1.0 / Self::SPECULATION_COST);
        Self {
            initial: (share * f64::from(Self::ONE)) as u32,
            recent: Mutex::new(VecDeque::with_capacity(Self::BLOCKS + 1)),
        }
    }

    /// The first chunk's share (of 1) at which it and `threads - 1` others finish
    /// together, when it runs `first_rate` transactions a second and they `later_rate`.
    fn balanced(threads: usize, first_rate: f64, later_rate: f64) -> f64 {
        first_rate / (first_rate + (threads - 1) as f64 * later_rate)
    }

    /// The share the next block's first chunk gets.
    pub(super) fn get(&self) -> u32 {
        let mut recent: Vec<u32> = self.recent.lock().iter().copied().collect();
        recent.sort_unstable();
        recent
            .get(recent.len() / 2)
            .copied()
            .unwrap_or(self.initial)
    }

    /// Learns from a block on `threads` threads whose first chunk of `first` transactions
    /// was done after `first_took`, and whose slowest other chunk, of `later`
    /// transactions, after `later_took`.
    pub(super) fn learn(
        &self,
        threads: usize,
        (first, first_took): (usize, Duration),
        (later, later_took): (usize, Duration),
    ) {
        if threads < 2 || first.min(later) < Self::MIN_TXS {
            return;
        }
        let first_rate = first as f64 / first_took.as_secs_f64().max(1e-9);
        let later_rate = later as f64 / later_took.as_secs_f64().max(1e-9);
        let one = f64::from(Self::ONE);
        // Never less than half an even share, nor more than three quarters of the block.
        let balanced = (Self::balanced(threads, first_rate, later_rate) * one)
            .clamp(one / (2 * threads) as f64, one * 0.75);
        let mut recent = self.recent.lock();
        recent.push_back(balanced as u32);
        if recent.len() > Self::BLOCKS {
            recent.pop_front();
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_chunk_takes_its_share_and_the_others_split_the_rest() {
        let quarter = FirstShare::ONE / 4;
        for (len, parts, share, first) in [
            (100, 2, 3 * quarter, 75),
            (100, 3, quarter, 25),
            (101, 2, 2 * quarter, 50),
            (7, 1, quarter, 7),
        ] {
            let chunks = shared_chunks(5..5 + len, parts, share);
            let covered: Vec<usize> = chunks.iter().flat_map(|c| c.clone()).collect();
            assert_eq!(covered, (5..5 + len).collect::<Vec<_>>(), "{chunks:?}");
            assert_eq!(chunks.len(), parts);
            assert_eq!(chunks[0].len(), first, "{chunks:?}");
            let later = chunks[1..].iter().map(|c| c.len());
            let spread = later.clone().max().unwrap_or(0) - later.min().unwrap_or(0);
            assert!(spread <= 1, "{chunks:?}");
        }
    }
    #[test]
    fn the_first_share_moves_to_where_the_chunks_finish_together() {
        let ms = Duration::from_millis;
        let share = FirstShare::new(2);
        let of_one = |share: &FirstShare| f64::from(share.get()) / f64::from(FirstShare::ONE);
        let cost = FirstShare::SPECULATION_COST;
        assert!((of_one(&share) - cost / (1.0 + cost)).abs() < 0.001);
        // A block cut at the share learned so far, whose first chunk takes 2 ms a
        // transaction and whose later one `later_cost` ms.
        let block = |share: &FirstShare, later_cost: u64| {
            let first = (share.get() as usize * 2500).div_ceil(FirstShare::ONE as usize);
            let later = 2500 - first;
            share.learn(
                2,
                (first, ms(2 * first as u64)),
                (later, ms(later as u64 * later_cost)),
            );
        };
        // Speculated transactions take 1.5 times as long: the chunks finish together when
        // the first takes 60% of the block.
        block(&share, 3);
        assert!((of_one(&share) - 0.6).abs() < 0.001, "{}", of_one(&share));
        // A block run beside other work, its speculator twice as slow, is one odd
        // block out: the next one is cut as before.
        for _ in 0..FirstShare::BLOCKS {
            block(&share, 3);
        }
        block(&share, 6);
        assert!((of_one(&share) - 0.6).abs() < 0.001, "{}", of_one(&share));
        // A lasting change is followed within half the blocks remembered.
        for _ in 0..FirstShare::BLOCKS.div_ceil(2) {
            block(&share, 2);
        }
        assert!((of_one(&share) - 0.5).abs() < 0.001, "{}", of_one(&share));
        // Chunks too small to time, or one thread, teach nothing.
        let before = share.get();
        for _ in 0..FirstShare::BLOCKS {
            share.learn(2, (10, ms(1)), (2490, ms(100)));
            share.learn(1, (2500, ms(1)), (2500, ms(100)));
        }
        assert_eq!(share.get(), before);
        // However slow the speculators, the first chunk keeps at most three quarters.
        for _ in 0..FirstShare::BLOCKS {
            share.learn(4, (1000, ms(1)), (1000, ms(1000)));
        }
        assert!(share.get() <= FirstShare::ONE * 3 / 4, "{}", share.get());
        assert!(share.get() >= FirstShare::ONE * 3 / 4 - 16);
    }
    #[test]
    fn chunks_cover_the_range_in_order_and_differ_by_at_most_one() {
        for len in 0..40 {
            for parts in 1..10 {
                let chunks = chunks(3..3 + len, parts);
                let covered: Vec<usize> = chunks.iter().flat_map(|c| c.clone()).collect();
                assert_eq!(
                    covered,
                    (3..3 + len).collect::<Vec<_>>(),
                    "{len} in {parts}"
                );
                assert_eq!(chunks.len(), parts.min(len));
                let sizes = chunks.iter().map(|c| c.len());
                let spread = sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0);
                assert!(spread <= 1, "{len} in {parts}: {chunks:?}");
            }
        }
    }
}
