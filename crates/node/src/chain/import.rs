//! Importing received blocks on the stored head: receive → execute → commit, one block at
//! a time ([`Chain::import`]) or as a stream whose stages overlap across blocks
//! ([`Chain::import_stream`]). Followers, `stave import`, a validator's catch-up and the
//! pipeline bench all come in here.

use std::sync::atomic::{AtomicBool, Ordering};

use alloy_primitives::B256;
use stave_primitives::{Receipt, RecoveredTx, SealedBlock};
use stave_storage::{commit::Committed, read::header};

use super::{
    Chain,
    commit::{Flush, PreparedBlock},
    execute::{ExecuteOn, Executed, Prefetch},
    receive::{Incoming, Received},
    stage::{StageTimes, stage},
};
use crate::error::ImportError;

/// What importing a block did: the import pipeline's output.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The block's number.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// False when the block was already stored (a redelivery).
    pub new: bool,
    /// Time per stage.
    pub times: StageTimes,
    /// Signatures the parallel verify stage recovered for it (the other senders came from
    /// the sender cache or were agreed, see [`Incoming`]); 0 in serial mode.
    pub recoveries: u64,
    /// The block.
    pub block: SealedBlock,
    /// Its transactions with their senders (none for a redelivery).
    pub recovered: Vec<RecoveredTx>,
    /// Its receipts (none for a redelivery).
    pub receipts: Vec<Receipt>,
}

impl Chain<'_> {
    /// Runs an encoded block through decode, verify, execute and commit (prefetching its
    /// reads beside its execution, with a prefetcher). A block already stored is accepted
    /// again without effect.
    pub fn import(&mut self, bytes: &[u8]) -> Result<Imported, ImportError> {
        let received = self.receive(bytes.into())?;
        self.apply(
            received,
            Flush::Now,
            ExecuteOn::AllThreads,
            Prefetch::Beside,
        )
    }

    /// Imports consecutive encoded blocks, overlapping stages across blocks when parallel:
    /// block N+1 is decoded, verified and (with a prefetcher, see
    /// [`Chain::with_prefetcher`]) prefetched while block N executes and commits. Calls
    /// `on_block` after each block; stops at the first error (every block before it is
    /// committed).
    pub fn import_stream<'b>(
        &mut self,
        blocks: impl IntoIterator<Item = impl Into<Incoming<'b>>>,
        mut on_block: impl FnMut(Imported),
    ) -> Result<(), ImportError> {
        let mut blocks = blocks.into_iter().map(Into::into);
        let Some(first) = blocks.next() else {
            return Ok(());
        };
        if !self.parallel() {
            for incoming in std::iter::once(first).chain(blocks) {
                let received = self.receive(incoming)?;
                on_block(self.apply(
                    received,
                    Flush::Now,
                    ExecuteOn::AllThreads,
                    Prefetch::Skip,
                )?);
            }
            return Ok(());
        }
        let this = &*self;
        let prefetcher = this.prefetcher.as_deref();
        let mut pending = this.receive(first)?;
        loop {
            let next = blocks.next();
            let on = match &pending {
                Received::Verified(verified) => ExecuteOn::beside(verified, next.is_some()),
                Received::Stored { .. } => ExecuteOn::AllThreads,
            };
            // Set once block N is applied: block N+1 is about to execute and reads for
            // itself what the prefetch has not loaded by then.
            let stop_prefetch = AtomicBool::new(false);
            let (applied, received) = std::thread::scope(|scope| {
                let stop_prefetch = &stop_prefetch;
                let ahead = next.map(|bytes| {
                    scope.spawn(move || {
                        let received = this.receive(bytes)?;
                        if let (Some(prefetcher), Received::Verified(verified)) =
                            (prefetcher, &received)
                        {
                            let header = verified.block.header();
                            let (_, elapsed) = stage("prefetch", header.number, || {
                                prefetcher.prefetch(
                                    &this.layers.latest(),
                                    this.env(header),
                                    &verified.recovered,
                                    stop_prefetch,
                                );
                            });
                            tracing::debug!(prefetch_us = elapsed.as_micros() as u64, "prefetched");
                        }
                        Ok::<_, ImportError>(received)
                    })
                });
                // The oldest state layers go to disk in the background.
                let flushing = scope.spawn(|| this.layers.flush(true));
                let applied = this.apply(pending, Flush::Later, on, Prefetch::Skip);
                stop_prefetch.store(true, Ordering::Relaxed);
                let flushed = flushing.join();
                (
                    applied.and_then(|imported| match flushed {
                        Ok(result) => result.map(|_| imported).map_err(ImportError::from),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }),
                    ahead.map(|handle| handle.join()),
                )
            });
            on_block(applied?);
            match received {
                None => return Ok(()),
                Some(Ok(received)) => pending = received?,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
            }
        }
    }

    /// The execute and commit stages of a received block, on top of the stored head.
    fn apply(
        &self,
        received: Received<'_>,
        flush: Flush,
        on: ExecuteOn,
        prefetch: Prefetch,
    ) -> Result<Imported, ImportError> {
        let verified = match received {
            Received::Stored { block, times } => {
                return Ok(Imported {
                    number: block.number(),
                    hash: block.hash(),
                    new: false,
                    times,
                    recoveries: 0,
                    block,
                    recovered: Vec::new(),
                    receipts: Vec::new(),
                });
            }
            Received::Verified(verified) => verified,
        };
        let number = verified.block.number();
        let (head_number, head_hash) = self.head()?;
        if number != head_number + 1 || verified.block.header().parent_hash != head_hash {
            return Err(ImportError::NotChild {
                number,
                head_number,
                head: head_hash,
            });
        }
        let parent = header(self.store, head_number)?.ok_or(ImportError::NoGenesis)?;
        let Executed {
            block,
            body,
            recovered,
            outcome,
            recoveries,
            mut times,
        } = self.execute_verified(verified, &self.layers.latest(), &parent, on, prefetch)?;

        let (committed, elapsed) = stage("commit", number, || {
            let mut prepared = PreparedBlock::received(block, body, outcome, &recovered);
            let committed = self.commit_parts(&mut prepared, flush)?;
            Ok::<_, ImportError>((committed, prepared))
        });
        let (committed, prepared) = committed?;
        times.commit = elapsed;
        Ok(Imported {
            number,
            hash: prepared.block.hash(),
            new: committed == Committed::New,
            times,
            recoveries,
            block: prepared.block,
            recovered,
            receipts: prepared.receipts,
        })
    }
}
