//! Answering peers' requests: a block's transactions ([`BLOCK_TXS`]), stored blocks by
//! number ([`BLOCKS`]) and certified runs of headers with their senders ([`CERTIFIED`]).
//!
//! A module's requests arrive on one queue, but no peer can hold that queue up: each
//! answer is sent by a task of its own, which waits for room in the asker's send queue
//! while the next request is read. A peer gets at most [`IN_FLIGHT`] answers of a
//! module in flight; more requests meanwhile get an empty answer at once (or none, if
//! its queue is full). So a peer that asks and never reads pins at most that many
//! answers of this node's memory, and everyone else is served as before.

use std::{collections::HashMap, sync::Arc};

use bytes::Bytes;
use parking_lot::Mutex;
use stave_codec::encode_indexed;
use tokio::sync::mpsc;

#[cfg(doc)]
use super::{BLOCK_TXS, BLOCKS, CERTIFIED};
use super::{BlockSource, Gossip, MAX_BLOCKS_PER_REQUEST};
use crate::{
    peers::Inbound,
    score::{NodeId, Offence},
};

/// Answers of one module one peer may have in flight.
pub const IN_FLIGHT: usize = 4;
/// Most bytes one [`BLOCKS`] or [`CERTIFIED`] response carries (at least one item is sent).
const MAX_BLOCKS_RESPONSE_BYTES: usize = 16 << 20;

/// A request for `count` consecutive blocks (or their senders) from `from`: the payload
/// of [`BLOCKS`] and [`CERTIFIED`], `from` u64 LE ‖ `count` u32 LE, exactly 12 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRequest {
    /// The first block's number.
    pub from: u64,
    /// How many blocks (the server caps it at [`MAX_BLOCKS_PER_REQUEST`]).
    pub count: u32,
}

/// Why a request was refused (and its peer charged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A [`BLOCKS`] or [`CERTIFIED`] request that is not a range request.
    #[error(transparent)]
    Range(#[from] RangeRequestError),
    /// A [`BLOCK_TXS`] request of this many bytes: not a hash and whole indexes.
    #[error("block txs request of {0} bytes is not a 32-byte hash and 4-byte indexes")]
    BlockTxs(usize),
}

/// Why a range request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeRequestError {
    /// The payload is not exactly 12 bytes (fewer, or trailing bytes).
    #[error("range request of {0} bytes, not {len}", len = RangeRequest::LEN)]
    Length(usize),
}

impl RangeRequest {
    /// Bytes of the wire form.
    pub const LEN: usize = 12;

    /// The wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        out[..8].copy_from_slice(&self.from.to_le_bytes());
        out[8..].copy_from_slice(&self.count.to_le_bytes());
        out
    }

    /// Reads the wire form (a peer's, so hostile): exactly 12 bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, RangeRequestError> {
        let bytes: &[u8; Self::LEN] = bytes
            .try_into()
            .map_err(|_| RangeRequestError::Length(bytes.len()))?;
        let (from, count) = bytes.split_at(8);
        Ok(Self {
            from: u64::from_le_bytes(from.try_into().unwrap_or_default()),
            count: u32::from_le_bytes(count.try_into().unwrap_or_default()),
        })
    }
}

/// Answers in flight, per peer and module.
#[derive(Debug, Default)]
pub(super) struct InFlight(Mutex<HashMap<(NodeId, u16), usize>>);

impl InFlight {
    /// Takes one of `peer`'s places for `module`, if it has one left.
    fn take(self: &Arc<Self>, peer: NodeId, module: u16) -> Option<Place> {
        let mut counts = self.0.lock();
        let count = counts.entry((peer, module)).or_default();
        if *count >= IN_FLIGHT {
            return None;
        }
        *count += 1;
        Some(Place {
            in_flight: self.clone(),
            key: (peer, module),
        })
    }
}

/// One answer's place in flight, given back when dropped.
struct Place {
    in_flight: Arc<InFlight>,
    key: (NodeId, u16),
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.in_flight.0.lock();
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// How one module's answer is made from a request, on a blocking thread.
type Answer = Box<dyn Fn(&Gossip, &Inbound) -> Result<Vec<Bytes>, RequestError> + Send + Sync>;

impl Gossip {
    /// Starts the loops answering [`BLOCK_TXS`], [`BLOCKS`] and [`CERTIFIED`] requests.
    pub(super) fn serve(
        &self,
        block_txs: mpsc::Receiver<Inbound>,
        blocks: mpsc::Receiver<Inbound>,
        certified: mpsc::Receiver<Inbound>,
    ) {
        let answer_txs: Answer = Box::new(|gossip, request| gossip.block_txs(request));
        let answer_blocks: Answer = Box::new(|gossip, request| {
            gossip.range(request, |source, number| source.block(number))
        });
        let answer_certified: Answer = Box::new(|gossip, request| gossip.certified(request));
        for (inbound, what, answer) in [
            (block_txs, "block txs", answer_txs),
            (blocks, "blocks", answer_blocks),
            (certified, "certified runs", answer_certified),
        ] {
            self.inner.tasks.spawn(
                "gossip request server",
                self.clone().answer_loop(inbound, what, Arc::new(answer)),
            );
        }
    }

    /// Answers each request of `inbound` (`what` names them in logs) with the list
    /// `answer` makes, in a task of its own (see the module doc).
    async fn answer_loop(
        self,
        mut inbound: mpsc::Receiver<Inbound>,
        what: &'static str,
        answer: Arc<Answer>,
    ) {
        let in_flight = Arc::new(InFlight::default());
        while let Some(request) = inbound.recv().await {
            let module = request.frame.protocol_id.module();
            let Some(place) = in_flight.take(request.peer, module) else {
                metrics::counter!("stave_gossip_requests_busy_total").increment(1);
                self.answer_now(&request, &[] as &[Bytes], what);
                continue;
            };
            let gossip = self.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let _place = place;
                let (asker, asked) = (gossip.clone(), request.clone());
                let items = tokio::task::spawn_blocking(move || answer(&asker, &asked)).await;
                let items = match items {
                    Ok(Ok(items)) => items,
                    Ok(Err(error)) => {
                        gossip.offence(request.peer, Offence::BadMessage, &error);
                        return;
                    }
                    Err(_) => return,
                };
                let Some(response) = response(&request, &items, what) else {
                    return;
                };
                if let Err(error) = gossip.inner.network.respond(&request, response).await {
                    tracing::debug!(%error, what, "response not sent");
                }
            });
        }
    }

    /// Answers `request` with `items` if its peer's queue has room now; drops it otherwise.
    fn answer_now<T: AsRef<[u8]> + Sync>(&self, request: &Inbound, items: &[T], what: &str) {
        let Some(payload) = response(request, items, what) else {
            return;
        };
        if let Err(error) = self.inner.network.try_respond(request, payload) {
            tracing::debug!(%error, what, "response not sent");
        }
    }

    /// The transactions a [`BLOCK_TXS`] request asks for: block hash `[32]` ‖ u32 LE
    /// index*. An unknown block (never seen, or evicted since) gets an empty list: the
    /// asker gives up on it.
    fn block_txs(&self, request: &Inbound) -> Result<Vec<Bytes>, RequestError> {
        let payload = &request.frame.payload;
        let malformed = RequestError::BlockTxs(payload.len());
        let (hash, indexes) = payload.split_first_chunk::<32>().ok_or(malformed)?;
        let (indexes, rest) = indexes.as_chunks::<4>();
        if !rest.is_empty() {
            return Err(malformed);
        }
        let block = self.inner.state.lock().blocks.get(&(*hash).into()).cloned();
        Ok(block.map_or_else(Vec::new, |block| {
            indexes
                .iter()
                .map_while(|index| block.txs.get(u32::from_le_bytes(*index) as usize).cloned())
                .collect()
        }))
    }

    /// The items a range request asks for, each block's from `item`, until the first
    /// block this node does not have or the response's byte limit.
    fn range(
        &self,
        request: &Inbound,
        item: fn(&dyn BlockSource, u64) -> Option<Vec<u8>>,
    ) -> Result<Vec<Bytes>, RequestError> {
        let RangeRequest { from, count } = RangeRequest::decode(&request.frame.payload)?;
        let mut items = Vec::new();
        let Some(source) = &self.inner.source else {
            return Ok(items);
        };
        let mut bytes = 0;
        let count = count.min(MAX_BLOCKS_PER_REQUEST);
        for number in (0..u64::from(count)).map_while(|i| from.checked_add(i)) {
            let Some(found) = item(source.as_ref(), number) else {
                break;
            };
            bytes += found.len();
            if bytes > MAX_BLOCKS_RESPONSE_BYTES && !items.is_empty() {
                break;
            }
            items.push(Bytes::from(found));
        }
        Ok(items)
    }
}

impl Gossip {
    /// The answer to a [`CERTIFIED`] request: the certificate of the highest block in the
    /// range this node has one for, then the headers and senders from the range's start
    /// up to that block; nothing if it has no certificate in the range.
    fn certified(&self, request: &Inbound) -> Result<Vec<Bytes>, RequestError> {
        let mut items = self.range(request, |source, number| {
            source.header_senders(number).map(|block| block.encode())
        })?;
        let RangeRequest { from, .. } = RangeRequest::decode(&request.frame.payload)?;
        let Some(source) = &self.inner.source else {
            return Ok(Vec::new());
        };
        let certified = (0..items.len()).rev().find_map(|index| {
            let certificate = source.finalization(from + index as u64)?;
            Some((index, certificate))
        });
        let Some((last, certificate)) = certified else {
            return Ok(Vec::new());
        };
        items.truncate(last + 1);
        items.insert(0, Bytes::from(certificate));
        Ok(items)
    }
}

/// `items` as an offset-indexed list; `None` (logged, naming `what`) if they cannot be.
fn response<T: AsRef<[u8]> + Sync>(request: &Inbound, items: &[T], what: &str) -> Option<Bytes> {
    match encode_indexed(items, |item, out| out.extend_from_slice(item.as_ref())) {
        Ok(response) => Some(Bytes::from(response)),
        Err(error) => {
            tracing::warn!(%error, what, peer = %crate::peers::short_id(&request.peer), "response not encodable");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_request_is_exactly_twelve_bytes() {
        let request = RangeRequest {
            from: 0x0102_0304_0506_0708,
            count: 64,
        };
        let encoded = request.encode();
        assert_eq!(encoded[..8], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(RangeRequest::decode(&encoded), Ok(request));
        let mut trailing = encoded.to_vec();
        trailing.push(0);
        assert_eq!(
            RangeRequest::decode(&trailing),
            Err(RangeRequestError::Length(13))
        );
        assert_eq!(
            RangeRequest::decode(&encoded[..11]),
            Err(RangeRequestError::Length(11))
        );
    }
}
