//! Gossip on loopback: transactions reach every node's txpool once (senders cached on
//! admission), compact blocks are rebuilt from what a peer holds and fetch only what it
//! lacks, and a peer that lies about a block is charged and its block dropped.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use parking_lot::Mutex;
use stave_codec::encode_block;
use stave_exec::MemoryState;
use stave_net::{
    BlockParts, BlockSenders, BlockSource, CompactBlock, Gossip, GossipConfig, Network, Offence,
    ProtocolId, ReceivedBlock, TxAdmission, gossip,
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

    fn senders(&self, number: u64) -> Option<BlockSenders> {
        self.0
            .get(number as usize)
            .map(|block| made_up_senders(number, block))
    }
}

/// The senders `Stored` serves for block `number`: two, made up from the number.
fn made_up_senders(number: u64, block: &[u8]) -> BlockSenders {
    BlockSenders {
        hash: stave_primitives::keccak256(block),
        senders: vec![
            Address::repeat_byte(number as u8),
            Address::with_last_byte(1),
        ],
    }
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
async fn a_node_catching_up_fetches_the_senders_a_peer_recovered() {
    let chain = Chain::new(3);
    let (stored, _serving, behind) = serving_and_behind(&chain).await;

    let fetched = behind
        .gossip
        .fetch_senders(chain.ids[0], 3, 5)
        .await
        .expect("served");
    let expected: Vec<BlockSenders> = (3..8)
        .map(|n| made_up_senders(n, &stored[n as usize]))
        .collect();
    assert_eq!(fetched, expected);
    // Past the head: what there is, then nothing.
    let fetched = behind
        .gossip
        .fetch_senders(chain.ids[0], 8, 64)
        .await
        .expect("served");
    assert_eq!(fetched.len(), 2);

    // A peer answering with something that is not a hash and whole senders is an error.
    let liar = chain.start(2, vec![], |_| {}).await;
    let mut requests = liar.register(gossip::GROUP, gossip::SENDERS, 4);
    let asker = node(&chain, 1, &[(2, &liar)]).await;
    eventually("connection", || asker.network.peers().len() == 1).await;
    let answering = tokio::spawn(async move {
        let request = requests.recv().await.expect("a request");
        let item = [0u8; 32 + 19];
        let list = stave_codec::encode_indexed(&[item], |item, out| out.extend_from_slice(item))
            .expect("encodes");
        liar.respond(&request, Bytes::from(list))
            .await
            .expect("sent");
    });
    let refused = asker.gossip.fetch_senders(chain.ids[2], 0, 1).await;
    assert!(
        matches!(refused, Err(stave_net::GossipError::MalformedSenders)),
        "{refused:?}"
    );
    answering.await.expect("answered");
}
