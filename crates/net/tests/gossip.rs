//! Gossip on loopback: transactions reach every node's txpool once (senders cached on
//! admission), compact blocks are rebuilt from what a peer holds and fetch only what it
//! lacks, a block pushed as finalized arrives once with its certificate, and a peer that
//! lies about a block is charged and its block dropped.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use parking_lot::Mutex;
use stave_codec::encode_block;
use stave_exec::MemoryState;
use stave_net::{
    BlockParts, BlockSource, CertifiedRun, CompactBlock, Finalized, FinalizedPush, Gossip,
    GossipConfig, GossipError, HeaderSenders, Network, Offence, ProtocolId, ReceivedBlock,
    TxAdmission, gossip,
};
use stave_primitives::{
    Address, Block, ChainSpec, DEFAULT_BASE_FEE, DEV_GAS_LIMIT, Header, SignedTx,
};
use stave_sdk::{TxBuilder, Workload, signed_workload};
use stave_txpool::{PoolConfig, TxPool};
use stave_verify::SenderCache;
use support::{Chain, LIMIT, eventually};
use tokio::{sync::mpsc, time::timeout};

const CHAIN: u64 = 1337;
const ACCOUNTS: u64 = 400;

/// A node's txpool, admitting what gossip brings, counting what it was asked.
struct Pool {
    pool: TxPool,
    state: MemoryState,
    cache: Arc<SenderCache>,
    asked: AtomicUsize,
}

impl TxAdmission for Pool {
    fn admit(&self, txs: &[Bytes]) -> Vec<bool> {
        self.asked.fetch_add(txs.len(), Ordering::Relaxed);
        let raw: Vec<Vec<u8>> = txs.iter().map(|tx| tx.to_vec()).collect();
        self.pool
            .add(&raw, &self.state, DEFAULT_BASE_FEE)
            .into_iter()
            .map(|result| result.is_ok())
            .collect()
    }

    fn held(&self) -> Vec<Bytes> {
        self.pool.encoded().into_iter().map(Bytes::from).collect()
    }
}

fn pool() -> Arc<Pool> {
    let cache = Arc::new(SenderCache::new(1 << 14));
    Arc::new(Pool {
        pool: TxPool::new(PoolConfig::new(CHAIN, DEV_GAS_LIMIT), cache.clone()),
        state: MemoryState::from_genesis(&ChainSpec::dev(CHAIN, ACCOUNTS)),
        cache,
        asked: AtomicUsize::new(0),
    })
}

fn transfers(count: usize) -> Vec<SignedTx> {
    let builder = TxBuilder::eip1559(CHAIN, 2 * u128::from(DEFAULT_BASE_FEE), 1);
    signed_workload(Workload::Transfer, &builder, count).expect("signs")
}

fn raw(txs: &[SignedTx]) -> Vec<Bytes> {
    txs.iter().map(|tx| Bytes::from(tx.encoded())).collect()
}

/// A block carrying `txs`, with a right transactions root.
fn block(number: u64, txs: &[SignedTx]) -> Vec<u8> {
    let mut block = Block {
        header: Header {
            number,
            gas_limit: DEV_GAS_LIMIT,
            base_fee_per_gas: DEFAULT_BASE_FEE,
            ..Header::default()
        },
        transactions: txs.to_vec(),
    };
    block.header.transactions_root = block.compute_transactions_root();
    encode_block(&block).expect("encodes")
}

struct Node {
    network: Network,
    gossip: Gossip,
    pool: Arc<Pool>,
    blocks: mpsc::Receiver<ReceivedBlock>,
}

async fn node(chain: &Chain, i: usize, dial: &[(usize, &Network)]) -> Node {
    let peers = dial
        .iter()
        .map(|(j, network)| chain.peer(*j, network))
        .collect();
    // The pool first: gossip registers its modules as soon as the network is up, before
    // a peer greets it with what its pool holds.
    let pool = pool();
    let network = chain.start(i, peers, |_| {}).await;
    let (gossip, blocks) =
        Gossip::start(network.clone(), pool.clone(), None, GossipConfig::default());
    Node {
        network,
        gossip,
        pool,
        blocks,
    }
}

/// An admission that defers or refuses on demand, recording how many it was asked about
/// and how many it took.
#[derive(Default)]
struct Moody {
    defer: AtomicBool,
    refuse: AtomicBool,
    asked: AtomicUsize,
    taken: AtomicUsize,
}

impl TxAdmission for Moody {
    fn deferring(&self) -> bool {
        self.defer.load(Ordering::Relaxed)
    }

    fn admit(&self, txs: &[Bytes]) -> Vec<bool> {
        self.asked.fetch_add(txs.len(), Ordering::Relaxed);
        let take = !self.refuse.load(Ordering::Relaxed);
        if take {
            self.taken.fetch_add(txs.len(), Ordering::Relaxed);
        }
        vec![take; txs.len()]
    }
}

/// What a deferring node drops, and what a pool refuses, is looked at again when it comes
/// again (a full node's rebroadcast); what a pool took is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_and_refused_txs_are_looked_at_again_and_taken_ones_are_not() {
    let chain = Chain::new(2);
    let a = node(&chain, 0, &[]).await;
    let moody = Arc::new(Moody::default());
    let network = chain
        .start(1, vec![chain.peer(0, &a.network)], |_| {})
        .await;
    let (_b, _) = Gossip::start(
        network.clone(),
        moody.clone(),
        None,
        GossipConfig::default(),
    );
    eventually("connection", || network.peers().len() == 1).await;
    let txs = raw(&transfers(10));

    moody.defer.store(true, Ordering::Relaxed);
    a.gossip.rebroadcast(&txs);
    // Loopback delivers the batch well within this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        moody.asked.load(Ordering::Relaxed),
        0,
        "deferred: not admitted"
    );

    moody.defer.store(false, Ordering::Relaxed);
    moody.refuse.store(true, Ordering::Relaxed);
    a.gossip.rebroadcast(&txs);
    eventually("the refused batch", || {
        moody.asked.load(Ordering::Relaxed) == 10
    })
    .await;

    moody.refuse.store(false, Ordering::Relaxed);
    a.gossip.rebroadcast(&txs);
    eventually("the batch taken", || {
        moody.taken.load(Ordering::Relaxed) == 10
    })
    .await;

    a.gossip.rebroadcast(&txs);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        moody.asked.load(Ordering::Relaxed),
        20,
        "taken ones are known"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txs_reach_every_pool_once_through_a_relay_with_senders_cached() {
    let chain = Chain::new(3);
    // A line: 0 - 1 - 2. Node 2 hears of 0's txs only through 1.
    let a = node(&chain, 0, &[]).await;
    let b = node(&chain, 1, &[(0, &a.network)]).await;
    let c = node(&chain, 2, &[(1, &b.network)]).await;
    eventually("line", || b.network.peers().len() == 2).await;
    assert_eq!(a.network.peers(), vec![chain.ids[1]]);

    let txs = transfers(300);
    a.gossip.announce_txs(raw(&txs));
    eventually("txs at the end of the line", || {
        c.pool.pool.len() == txs.len()
    })
    .await;
    eventually("txs in the middle", || b.pool.pool.len() == txs.len()).await;
    for tx in &txs {
        let sender = c.pool.cache.get(&tx.hash());
        assert!(sender.is_some(), "sender of {} not cached", tx.hash());
    }
    // Announcing them again sends nothing: every pool was asked about each tx once.
    a.gossip.announce_txs(raw(&txs));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.pool.asked.load(Ordering::Relaxed), txs.len());
    assert_eq!(c.pool.asked.load(Ordering::Relaxed), txs.len());
    // Node 1 forwarded to 2 but not back to 0, which asked its pool about nothing.
    assert_eq!(a.pool.asked.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txs_a_node_holds_reach_a_peer_that_connects_later() {
    let chain = Chain::new(2);
    let a = node(&chain, 0, &[]).await;
    // Admitted and announced while node 0 has no peer: the announcement reaches nobody.
    let txs = transfers(300);
    let admitted = a.pool.admit(&raw(&txs));
    assert!(
        admitted.iter().all(|ok| *ok),
        "the pool admits every transfer"
    );
    a.gossip.announce_txs(raw(&txs));
    // The batch goes out after its delay (20 ms), to nobody.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(a.network.peers().is_empty());

    // Node 1 connects later and is offered what node 0's pool holds, each once.
    let b = node(&chain, 1, &[(0, &a.network)]).await;
    eventually("the held txs at the new peer", || {
        b.pool.pool.len() == txs.len()
    })
    .await;
    assert_eq!(b.pool.asked.load(Ordering::Relaxed), txs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_block_is_rebuilt_from_gossiped_txs_and_fetches_only_the_rest() {
    let chain = Chain::new(2);
    let a = node(&chain, 0, &[]).await;
    let mut b = node(&chain, 1, &[(0, &a.network)]).await;
    eventually("connection", || b.network.peers().len() == 1).await;

    let txs = transfers(400);
    // Node 1 holds the first 300 from gossip; the last 100 it has never seen.
    a.gossip.announce_txs(raw(&txs[..300]));
    eventually("gossiped txs", || b.gossip.known_txs() == 300).await;
    let bytes = block(1, &txs);
    let hash = a.gossip.announce_block(&bytes).expect("valid block");
    let received = timeout(LIMIT, b.blocks.recv())
        .await
        .expect("in time")
        .expect("block");
    assert_eq!(received.hash, hash);
    assert_eq!(received.number, 1);
    assert_eq!(received.from, chain.ids[0]);
    assert_eq!(received.fetched, 100);
    assert_eq!(received.bytes.to_vec(), bytes);

    // A block whose txs node 1 all holds needs no fetch at all.
    let next = block(2, &txs[..300]);
    a.gossip.announce_block(&next).expect("valid block");
    let received = timeout(LIMIT, b.blocks.recv())
        .await
        .expect("in time")
        .expect("block");
    assert_eq!((received.number, received.fetched), (2, 0));
    assert_eq!(received.bytes.to_vec(), next);
    // The same block again is not delivered twice.
    a.gossip.announce_block(&next).expect("valid block");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(b.blocks.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_blocks_travel_on_through_a_relay() {
    let chain = Chain::new(3);
    let a = node(&chain, 0, &[]).await;
    let mut b = node(&chain, 1, &[(0, &a.network)]).await;
    let mut c = node(&chain, 2, &[(1, &b.network)]).await;
    eventually("line", || b.network.peers().len() == 2).await;
    let txs = transfers(50);
    let bytes = block(7, &txs);
    a.gossip.announce_block(&bytes).expect("valid block");
    for node in [&mut b, &mut c] {
        let received = timeout(LIMIT, node.blocks.recv())
            .await
            .expect("in time")
            .expect("block");
        assert_eq!(received.bytes.to_vec(), bytes);
    }
    // Node 2 fetched from node 1, which had them from the block itself.
    assert_eq!(c.gossip.known_txs(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_lying_about_a_block_is_charged_and_the_block_dropped() {
    let chain = Chain::new(2);
    let liar = chain.start(0, vec![], |_| {}).await;
    // The liar answers requests for block txs with txs that are not the block's.
    let mut requests = liar.register(gossip::GROUP, gossip::BLOCK_TXS, 16);
    let responder = liar.clone();
    // Workload txs are deterministic: these are other txs than the block's ten.
    let decoys = transfers(40).split_off(20);
    let answered = Arc::new(Mutex::new(0));
    let counter = answered.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            let wanted = (request.frame.payload.len() - 32) / 4;
            let body = stave_codec::encode_indexed(&raw(&decoys[..wanted]), |tx, out| {
                out.extend_from_slice(tx)
            })
            .expect("encodes");
            *counter.lock() += 1;
            let _ = responder.respond(&request, Bytes::from(body)).await;
        }
    });
    let mut honest = node(&chain, 1, &[(0, &liar)]).await;
    eventually("connection", || honest.network.peers().len() == 1).await;

    let txs = transfers(10);
    let parts = BlockParts::from_block(&block(3, &txs)).expect("valid");
    let compact = CompactBlock::new(parts.header.clone(), parts.hash, &parts.tx_hashes);
    let frame = liar.frame(
        ProtocolId::request(gossip::GROUP, gossip::COMPACT_BLOCK),
        0,
        Bytes::from(compact.encode()),
    );
    liar.broadcast(&frame, None).expect("sends");
    eventually("a fetch answered", || *answered.lock() == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        honest.blocks.try_recv().is_err(),
        "a wrong block was delivered"
    );
    // Node 1 asked once (it knew none of the txs: the first fetch was the whole body), found
    // the root wrong, and charged the liar.
    assert_eq!(*answered.lock(), 1);
    let charged = 100 - Offence::BadMessage.penalty();
    assert_eq!(honest.network.score(&chain.ids[0]), charged);

    // A malformed tx batch is charged too, and admits nothing.
    let frame = liar.frame(
        ProtocolId::request(gossip::GROUP, gossip::TXS),
        0,
        Bytes::from_static(&[1, 0, 0, 0, 9, 9]),
    );
    liar.broadcast(&frame, None).expect("sends");
    eventually("second charge", || {
        honest.network.score(&chain.ids[0]) == charged - Offence::BadMessage.penalty()
    })
    .await;
    assert_eq!(honest.pool.asked.load(Ordering::Relaxed), 0);
}

/// Blocks 0..n, as a node that stored them serves them.
struct Stored(Vec<Vec<u8>>);

impl BlockSource for Stored {
    fn block(&self, number: u64) -> Option<Vec<u8>> {
        self.0.get(number as usize).cloned()
    }

    fn header_senders(&self, number: u64) -> Option<HeaderSenders> {
        self.0
            .get(number as usize)
            .map(|block| made_up_header(number, block))
    }

    fn finalization(&self, number: u64) -> Option<Vec<u8>> {
        (number % 4 == 1).then(|| made_up_certificate(number))
    }
}

/// The header and senders `Stored` serves for block `number`: the block's first bytes and
/// two senders made up from the number.
fn made_up_header(number: u64, block: &[u8]) -> HeaderSenders {
    HeaderSenders {
        header: Bytes::copy_from_slice(&block[..12]),
        senders: vec![
            Address::repeat_byte(number as u8),
            Address::with_last_byte(1),
        ],
    }
}

/// The certificate `Stored` holds for every fourth block (1, 5, 9): made up from its number.
fn made_up_certificate(number: u64) -> Vec<u8> {
    format!("certificate of {number}").into_bytes()
}

/// Node 0 serving blocks 0..10 (two transfers each) from [`Stored`], its gossip (keep it
/// alive), and node 1 connected to it.
async fn serving_and_behind(chain: &Chain) -> (Vec<Vec<u8>>, Gossip, Node) {
    let txs = transfers(20);
    let stored: Vec<Vec<u8>> = (0..10).map(|n| block(n, &txs[n as usize..][..2])).collect();
    let network = chain.start(0, vec![], |_| {}).await;
    let (serving, _) = Gossip::start(
        network.clone(),
        pool(),
        Some(Arc::new(Stored(stored.clone()))),
        GossipConfig::default(),
    );
    let behind = node(chain, 1, &[(0, &network)]).await;
    eventually("connection", || behind.network.peers().len() == 1).await;
    (stored, serving, behind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_catching_up_fetches_stored_blocks_by_number() {
    let chain = Chain::new(3);
    let (stored, _serving, behind) = serving_and_behind(&chain).await;

    let fetched = behind
        .gossip
        .fetch_blocks(chain.ids[0], 3, 5)
        .await
        .expect("served");
    assert_eq!(
        fetched,
        stored[3..8]
            .iter()
            .map(|b| Bytes::from(b.clone()))
            .collect::<Vec<_>>()
    );
    // Past the head: what there is, then nothing.
    let fetched = behind
        .gossip
        .fetch_blocks(chain.ids[0], 8, 64)
        .await
        .expect("served");
    assert_eq!(fetched.len(), 2);
    let fetched = behind
        .gossip
        .fetch_blocks(chain.ids[0], u64::MAX, 64)
        .await
        .expect("served");
    assert!(fetched.is_empty());
    // A node that serves no blocks answers with none.
    let asker = node(&chain, 2, &[(1, &behind.network)]).await;
    eventually("connection", || asker.network.peers().len() == 1).await;
    let fetched = asker
        .gossip
        .fetch_blocks(chain.ids[1], 0, 4)
        .await
        .expect("answered");
    assert!(fetched.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_catching_up_fetches_a_run_up_to_the_last_block_the_peer_certified() {
    let chain = Chain::new(3);
    let (stored, _serving, behind) = serving_and_behind(&chain).await;
    let fetch = |from, count| behind.gossip.fetch_certified(chain.ids[0], from, count);

    // Blocks 3..8 asked for: 5 is the last certified one.
    let run = fetch(3, 5).await.expect("served").expect("a run");
    let expected = CertifiedRun {
        certificate: Bytes::from(made_up_certificate(5)),
        blocks: (3..=5)
            .map(|n| made_up_header(n, &stored[n as usize]))
            .collect(),
    };
    assert_eq!(run, expected);
    // Past the head: up to the last certified block it has (9).
    let run = fetch(6, 64).await.expect("served").expect("a run");
    assert_eq!(run.blocks.len(), 4);
    assert_eq!(run.certificate, Bytes::from(made_up_certificate(9)));
    // No certificate in the range: nothing.
    assert_eq!(fetch(2, 3).await.expect("served"), None);
    assert_eq!(fetch(u64::MAX, 64).await.expect("served"), None);

    // A peer answering with a header whose length runs past its item is an error.
    let liar = chain.start(2, vec![], |_| {}).await;
    let mut requests = liar.register(gossip::GROUP, gossip::CERTIFIED, 4);
    let asker = node(&chain, 1, &[(2, &liar)]).await;
    eventually("connection", || asker.network.peers().len() == 1).await;
    let answering = tokio::spawn(async move {
        let request = requests.recv().await.expect("a request");
        let mut item = 100u32.to_le_bytes().to_vec();
        item.extend_from_slice(&[7; 40]);
        let items = [b"certificate".to_vec(), item];
        let list = stave_codec::encode_indexed(&items, |item, out| out.extend_from_slice(item))
            .expect("encodes");
        liar.respond(&request, Bytes::from(list))
            .await
            .expect("sent");
    });
    let refused = asker.gossip.fetch_certified(chain.ids[2], 0, 1).await;
    assert!(
        matches!(refused, Err(stave_net::GossipError::MalformedCertified)),
        "{refused:?}"
    );
    answering.await.expect("answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_finalized_block_arrives_once_with_its_certificate_and_senders() {
    let chain = Chain::new(3);
    let (stored, serving, mut behind) = serving_and_behind(&chain).await;
    let certificate = Bytes::from_static(b"certificate of 3");

    let pushed = serving
        .push_finalized(3, certificate.clone(), &[chain.ids[1]])
        .await
        .expect("stored");
    assert_eq!(pushed, 1);
    let received = timeout(LIMIT, behind.blocks.recv())
        .await
        .expect("in time")
        .expect("block");
    assert_eq!((received.number, received.from), (3, chain.ids[0]));
    // Node 1 held none of the block's txs: it fetched them from the pusher.
    assert_eq!(received.fetched, 2);
    assert_eq!(received.bytes.to_vec(), stored[3]);
    let expected = Finalized {
        certificate: certificate.clone(),
        senders: made_up_header(3, &stored[3]).senders,
    };
    assert_eq!(received.finalized, Some(expected));
    // Every validator pushes the block: it is handed on once.
    serving
        .push_finalized(3, certificate, &[chain.ids[1]])
        .await
        .expect("stored");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(behind.blocks.try_recv().is_err());
    // A block the pusher does not hold is not pushed.
    let missing = serving
        .push_finalized(50, Bytes::from_static(b"c"), &[chain.ids[1]])
        .await;
    assert!(matches!(missing, Err(GossipError::NotStored(50))));

    // A push whose senders do not match its transactions is charged and dropped.
    let liar = chain.start(2, vec![], |_| {}).await;
    let mut behind = node(&chain, 1, &[(2, &liar)]).await;
    eventually("connection", || behind.network.peers().len() == 1).await;
    let parts = BlockParts::from_block(&stored[4]).expect("valid");
    let push = FinalizedPush {
        certificate: Bytes::from_static(b"certificate"),
        senders: vec![Address::with_last_byte(1)],
        compact: parts.compact(),
    };
    let frame = liar.frame(
        ProtocolId::request(gossip::GROUP, gossip::FINALIZED),
        0,
        Bytes::from(push.encode().expect("encodes")),
    );
    liar.broadcast(&frame, None).expect("sends");
    eventually("a charge", || {
        behind.network.score(&chain.ids[2]) == 100 - Offence::BadMessage.penalty()
    })
    .await;
    assert!(behind.blocks.try_recv().is_err());
}

/// The same large block at every number: a source whose answers are large.
struct Large(Vec<u8>);

impl BlockSource for Large {
    fn block(&self, _number: u64) -> Option<Vec<u8>> {
        Some(self.0.clone())
    }

    fn header_senders(&self, _number: u64) -> Option<HeaderSenders> {
        None
    }

    fn finalization(&self, _number: u64) -> Option<Vec<u8>> {
        None
    }
}

/// A frame asking for `count` blocks from `from`, encoded as a peer sends it.
fn range_frame(seq: u32, payload: Vec<u8>) -> Bytes {
    let frame = stave_net::Frame {
        version: stave_net::frame::VERSION,
        protocol_id: ProtocolId::request(gossip::GROUP, gossip::BLOCKS),
        packet_type: 0,
        seq,
        payload: Bytes::from(payload),
    };
    stave_net::encode_frame(&frame, &stave_net::FrameConfig::default()).expect("encodes")
}

/// A peer that asks for blocks again and again and never reads the answers: another
/// peer's requests are still answered promptly, each well within the request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_asks_for_blocks_and_never_reads_holds_up_no_one() {
    let chain = Chain::new(3);
    let network = chain
        .start(0, vec![], |config| {
            config.send_queue_bytes = 4 << 20;
        })
        .await;
    let (_serving, _) = Gossip::start(
        network.clone(),
        pool(),
        Some(Arc::new(Large(block(1, &transfers(4_000))))),
        GossipConfig::default(),
    );
    // The hog: node 1, over raw TLS, asking for 16 MiB at a time, reading nothing.
    let socket = tokio::net::TcpStream::connect(network.local_addr())
        .await
        .expect("connects");
    let (mut hog, _) = chain.tls[1]
        .connect(&chain.names[0], socket)
        .await
        .expect("handshake");
    eventually("the hog connects", || network.peers().len() == 1).await;
    for seq in 0..64 {
        let request = stave_net::gossip::RangeRequest { from: 0, count: 64 };
        tokio::io::AsyncWriteExt::write_all(&mut hog, &range_frame(seq, request.encode().to_vec()))
            .await
            .expect("writes");
    }
    // Let the hog's answers fill its queue and socket.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let honest = node(&chain, 2, &[(0, &network)]).await;
    eventually("the honest peer connects", || {
        honest.network.peers().len() == 1
    })
    .await;
    for round in 0..5 {
        let started = std::time::Instant::now();
        let blocks = honest
            .gossip
            .fetch_blocks(chain.ids[0], round, 4)
            .await
            .expect("served despite the hog");
        assert_eq!(blocks.len(), 4);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "round {round} took {took:?}");
    }
    assert_eq!(network.peers().len(), 2, "both still connected");
    drop(hog);
}

/// A range request with bytes after its 12 is refused, not answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_request_with_trailing_bytes_is_refused() {
    let chain = Chain::new(2);
    let (_stored, _serving, behind) = serving_and_behind(&chain).await;
    let mut payload = stave_net::gossip::RangeRequest { from: 0, count: 2 }
        .encode()
        .to_vec();
    payload.push(0);
    let asking = timeout(
        Duration::from_secs(2),
        behind.network.request(
            chain.ids[0],
            ProtocolId::request(gossip::GROUP, gossip::BLOCKS),
            0,
            Bytes::from(payload),
        ),
    );
    assert!(
        matches!(asking.await, Err(_) | Ok(Err(_))),
        "a request with trailing bytes was answered"
    );
    // Well-formed, the same request is answered.
    let fetched = behind
        .gossip
        .fetch_blocks(chain.ids[0], 0, 2)
        .await
        .expect("served");
    assert_eq!(fetched.len(), 2);
}

/// Compact blocks are taken only from the configured block sources; a block from another
/// peer is dropped and that peer charged. A peer that no longer keeps a block it
/// announced (evicted for newer ones) answers the fetch with nothing and is not charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_come_only_from_block_sources_and_an_evicted_block_costs_nothing() {
    let chain = Chain::new(3);
    let producer = node(&chain, 0, &[]).await;
    let stranger = node(&chain, 1, &[]).await;
    let network = chain
        .start(
            2,
            vec![
                chain.peer(0, &producer.network),
                chain.peer(1, &stranger.network),
            ],
            |_| {},
        )
        .await;
    let (_gossip, mut blocks) = Gossip::start(
        network.clone(),
        pool(),
        None,
        GossipConfig {
            block_sources: Some([chain.ids[0]].into_iter().collect()),
            ..GossipConfig::default()
        },
    );
    eventually("connections", || network.peers().len() == 2).await;
    let txs = transfers(4);
    stranger
        .gossip
        .announce_block(&block(5, &txs))
        .expect("valid block");
    eventually("the stranger charged", || {
        network.score(&chain.ids[1]) == 100 - Offence::Unauthorized.penalty()
    })
    .await;
    producer
        .gossip
        .announce_block(&block(6, &txs))
        .expect("valid block");
    let received = timeout(LIMIT, blocks.recv())
        .await
        .expect("in time")
        .expect("block");
    assert_eq!((received.number, received.from), (6, chain.ids[0]));
    assert!(blocks.try_recv().is_err(), "the stranger's block was taken");

    // A compact block whose transactions its sender no longer keeps: the fetch gets an
    // empty answer, and the producer is not charged for it.
    let unknown = block(7, &transfers(8)[4..]);
    let parts = BlockParts::from_block(&unknown).expect("valid");
    let compact = CompactBlock::new(parts.header.clone(), parts.hash, &parts.tx_hashes);
    let frame = producer.network.frame(
        ProtocolId::request(gossip::GROUP, gossip::COMPACT_BLOCK),
        0,
        Bytes::from(compact.encode()),
    );
    producer.network.broadcast(&frame, None).expect("sends");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        blocks.try_recv().is_err(),
        "a block without its txs was taken"
    );
    assert_eq!(
        network.score(&chain.ids[0]),
        100,
        "the producer was charged"
    );
}
