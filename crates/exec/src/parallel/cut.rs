//! Where the first chunk ends: [`Cut`], one atomic word shared by the caller, which claims
//! transactions, and the second chunk's speculator, which cuts.

use std::{
    ops::Range,
    sync::atomic::{AtomicU64, Ordering},
};

/// Where the first chunk, run for real on the calling thread, ends and the second,
/// speculated on the pool, begins: decided by the second's speculator when it starts, from
/// how far the caller has got. Until then the caller runs on into the second chunk. A
/// speculator whose pool thread woke late (it happens to a few blocks in a hundred) then
/// leaves the caller more of the block instead of the block waiting for the speculator's
/// whole planned chunk, so the chunks end closer together than with a cut planned before
/// the block.
///
/// The caller claims a few transactions at a time and the speculator cuts once, both in one
/// word (claimed, end), so a claim never runs past the cut and the cut never falls before
/// a claim.
#[derive(Debug)]
pub(super) struct Cut(AtomicU64);

impl Cut {
    /// Transactions the caller claims at a time.
    const STEP: u64 = 8;

    /// True when a block of `txs` transactions can be cut: each count fits half the word.
    pub(super) fn fits(txs: usize) -> bool {
        u32::try_from(txs).is_ok()
    }

    /// Nothing claimed yet, and the caller may run up to `end` ([`Cut::fits`]).
    pub(super) fn new(end: usize) -> Self {
        Self(AtomicU64::new(end as u64))
    }

    /// The word's halves: (claimed, end).
    fn split(word: u64) -> (u64, u64) {
        (word >> 32, word & u64::from(u32::MAX))
    }

    /// The caller's next transactions: up to [`Cut::STEP`] after those it claimed, none at
    /// or past the cut; empty once it has claimed up to it.
    fn claim(&self) -> Range<usize> {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let (claimed, end) = Self::split(word);
            let next = (claimed + Self::STEP).min(end);
            if next == claimed {
                return claimed as usize..claimed as usize;
            }
            match self.0.compare_exchange_weak(
                word,
                next << 32 | end,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return claimed as usize..next as usize,
                Err(now) => word = now,
            }
        }
    }

    /// Every transaction the caller claims, in order, until it has claimed up to the cut.
    pub(super) fn claims(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::from_fn(|| Some(self.claim()).filter(|next| !next.is_empty())).flatten()
    }

    /// Cuts where `at` says for the transactions claimed so far, though never before them
    /// nor past where the caller may run, and returns the cut. Called once.
    pub(super) fn cut(&self, at: impl Fn(usize) -> usize) -> usize {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let (claimed, end) = Self::split(word);
            let cut = (at(claimed as usize) as u64).clamp(claimed, end);
            match self.0.compare_exchange_weak(
                word,
                claimed << 32 | cut,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return cut as usize,
                Err(now) => word = now,
            }
        }
    }

    /// Where the caller stops: the cut, once made.
    pub(super) fn end(&self) -> usize {
        Self::split(self.0.load(Ordering::Acquire)).1 as usize
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_claims_up_to_the_cut_and_the_cut_never_falls_before_a_claim() {
        let cut = Cut::new(30);
        assert_eq!(cut.claim(), 0..8);
        assert_eq!(cut.claim(), 8..16);
        assert_eq!(cut.cut(|claimed| claimed + 5), 21);
        assert_eq!(cut.claim(), 16..21);
        assert_eq!(cut.claim(), 21..21);
        assert_eq!(cut.end(), 21);
        // Before what was claimed: the cut is where the claims end.
        let near = Cut::new(30);
        assert_eq!(near.claim(), 0..8);
        assert_eq!(near.cut(|_| 3), 8);
        assert_eq!(near.claim(), 8..8);
        // Past where the caller may run: the cut is there.
        let far = Cut::new(30);
        assert_eq!(far.claim(), 0..8);
        assert_eq!(far.cut(|_| 99), 30);
        assert_eq!(far.end(), 30);

        // Cut while the caller claims, at all sorts of moments: its claims and the
        // speculator's range split the transactions exactly.
        for delay in 0..200 {
            let cut = Cut::new(1_000);
            let (claims, at) = std::thread::scope(|scope| {
                let caller = scope.spawn(|| cut.claims().collect::<Vec<_>>());
                for _ in 0..delay * 10 {
                    std::hint::spin_loop();
                }
                let at = cut.cut(|claimed| claimed + (1_000 - claimed) / 2);
                (caller.join().expect("the caller claims"), at)
            });
            assert_eq!(claims, (0..at).collect::<Vec<_>>(), "delay {delay}");
            assert_eq!(cut.end(), at);
        }
    }
}
