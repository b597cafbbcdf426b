//! Importing received blocks on the stored head: receive → execute → commit, one block at
//! a time ([`Chain::import`]) or as a stream whose stages overlap across blocks
//! ([`Chain::import_stream`]). Followers, `stave import`, a validator's catch-up and the
//! pipeline bench all come in here.

use alloy_primitives::B256;
use stave_primitives::{Header, Receipt, RecoveredTx, SealedBlock};
use stave_storage::{commit::Committed, read::header};

use super::{
    Chain, Prefetching,
    commit::{Flush, PreparedBlock},
    execute::{ExecuteOn, Executed, Prefetch},
    receive::{Incoming, Received, Verified},
    stage::{StageTimes, stage},
};
use crate::error::ImportError;

/// A block's header and transactions, for a prefetch that outlives the block's journey
/// through the stages.
struct PrefetchJob {
    header: Header,
    txs: Vec<RecoveredTx>,
}

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
    /// block N+1 is decoded and verified while block N executes and commits. With a
    /// prefetcher (see [`Chain::with_prefetcher`]) block N+1's reads are prefetched from
    /// the moment it is verified until it has executed: ahead of it while block N runs,
    /// then beside it. Calls `on_block` after each block; stops at the first error (every
    /// block before it is committed).
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
        std::thread::scope(|scope| {
            let mut pending = this.receive(first)?;
            // The prefetch of `pending`'s reads: it runs on while `pending` executes, and
            // is stopped once it has (the first block has nothing before it to hide its
            // prefetch behind, so it starts beside its execution).
            let mut prefetching = match &pending {
                Received::Verified(verified) => this.prefetch_job(verified).map(|job| {
                    Prefetching::spawn(scope, move |stop| {
                        this.run_prefetch(&job.header, &job.txs, stop)
                    })
                }),
                Received::Stored { .. } => None,
            };
            loop {
                let next = blocks.next();
                let on = match &pending {
                    Received::Verified(verified) => ExecuteOn::beside(verified, next.is_some()),
                    Received::Stored { .. } => ExecuteOn::AllThreads,
                };
                // Block N+1 is received on a thread of its own, which hands it over and
                // then prefetches its reads while block N executes, and on while block
                // N+1 itself executes in the next round.
                let ahead = next.map(|bytes| {
                    let (handover, received) = std::sync::mpsc::sync_channel(1);
                    let prefetch = Prefetching::spawn(scope, move |stop| {
                        let outcome = this.receive(bytes);
                        let job = match &outcome {
                            Ok(Received::Verified(verified)) => this.prefetch_job(verified),
                            _ => None,
                        };
                        // The receiver waits for this; it is gone only on an error.
                        let _ = handover.send(outcome);
                        job.and_then(|job| this.run_prefetch(&job.header, &job.txs, stop))
                    });
                    (received, prefetch)
                });
                // The oldest state layers go to disk in the background.
                let flushing = scope.spawn(|| this.layers.flush(true));
                let applied = this.apply(pending, Flush::Later, on, Prefetch::Skip);
                if let Some(prefetch) = prefetching.take() {
                    prefetch.finish();
                }
                let applied = applied.and_then(|imported| match flushing.join() {
                    Ok(result) => result.map(|_| imported).map_err(ImportError::from),
                    Err(panic) => std::panic::resume_unwind(panic),
                });
                let imported = match applied {
                    Ok(imported) => imported,
                    Err(error) => {
                        if let Some((_, prefetch)) = ahead {
                            prefetch.finish();
                        }
                        return Err(error);
                    }
                };
                on_block(imported);
                let Some((received, prefetch)) = ahead else {
                    return Ok(());
                };
                match received.recv() {
                    Ok(received) => {
                        prefetching = Some(prefetch);
                        pending = received?;
                    }
                    // The thread ended without handing the block over: it panicked.
                    Err(_) => {
                        prefetch.finish();
                        unreachable!("a receiving thread that panicked was joined");
                    }
                }
            }
        })
    }

    /// What a prefetch of `verified` needs, owned, so it can run on while the block itself
    /// moves on to execution; `None` without a prefetcher or for a block without
    /// transactions.
    fn prefetch_job(&self, verified: &Verified<'_>) -> Option<PrefetchJob> {
        self.prefetcher.as_ref()?;
        (!verified.recovered.is_empty()).then(|| PrefetchJob {
            header: verified.block.header().clone(),
            txs: verified.recovered.clone(),
        })
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
