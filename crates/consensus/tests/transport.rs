//! The consensus channels on stave-net, on loopback: two validators whose certificates hold
//! their consensus keys exchange messages; a node with a certificate from the same CA but a
//! key that is not a validator's gets nothing accepted and is charged for trying; a blocked
//! validator is banned and reported.

use std::{collections::HashSet, time::Duration};

use bytes::Bytes;
use commonware_actor::{Feedback, Unreliable};
use commonware_codec::EncodeFixed as _;
use commonware_cryptography::{Signer as _, ed25519};
use commonware_p2p::{
    Blocker as _, CheckedSender as _, LimitedSender as _, Provider as _, Receiver as _, Recipients,
    Sender as _,
};
use commonware_utils::channel::mpsc::error::TryRecvError;
use stave_consensus::transport::{
    ConsensusNet, GROUP, MODULE_BASE, TransportError, module, validator_node_id,
};
use stave_net::{
    ChainCa, FrameConfig, Network, NetworkConfig, NodeId, NodeTls, ProtocolId, ScoreConfig,
    StaticPeer,
};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(15);

/// Node 0 and 1 are validators; node 2 has a CA certificate for a key outside the set.
struct Nodes {
    keys: Vec<ed25519::PrivateKey>,
    ids: Vec<NodeId>,
    networks: Vec<Network>,
}

impl Nodes {
    async fn start() -> Self {
        let ca = ChainCa::generate("stave test chain").expect("ca");
        let keys: Vec<_> = (0..3).map(ed25519::PrivateKey::from_seed).collect();
        let identities: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                ca.issue_for_key(&format!("node{i}.stave"), &key.encode_fixed())
                    .expect("certificate")
            })
            .collect();
        let ids: Vec<NodeId> = keys
            .iter()
            .map(|key| validator_node_id(&key.public_key()))
            .collect();
        // The certificate's key is the consensus key: its id is the one the key predicts.
        for (identity, id) in identities.iter().zip(&ids) {
            assert_eq!(identity.node_id().expect("id"), *id);
        }
        let allowed: HashSet<NodeId> = ids.iter().copied().collect();
        let mut networks: Vec<Network> = Vec::new();
        for (i, identity) in identities.iter().enumerate() {
            let tls = NodeTls::new(&ca.certificate(), identity, allowed.clone()).expect("tls");
            let peers = networks
                .iter()
                .enumerate()
                .map(|(j, network)| StaticPeer {
                    name: format!("node{j}.stave"),
                    address: network.local_addr(),
                })
                .collect();
            let mut config = NetworkConfig::new("127.0.0.1:0".parse().expect("address"), peers);
            config.backoff_min = Duration::from_millis(20);
            config.backoff_max = Duration::from_millis(200);
            networks.push(Network::start(config, tls, ids[i]).await.expect("starts"));
        }
        Self {
            keys,
            ids,
            networks,
        }
    }

    fn validators(&self) -> Vec<ed25519::PublicKey> {
        self.keys[..2].iter().map(|key| key.public_key()).collect()
    }

    fn consensus(&self, i: usize) -> ConsensusNet {
        ConsensusNet::new(self.networks[i].clone(), &self.validators()).expect("consensus")
    }

    async fn connected(&self) {
        let start = std::time::Instant::now();
        while self
            .networks
            .iter()
            .any(|network| network.peers().len() < 2)
        {
            assert!(start.elapsed() < LIMIT, "nodes did not connect");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validators_exchange_messages_and_an_outsider_is_dropped_and_charged() {
    let nodes = Nodes::start().await;
    let (a, b) = (nodes.consensus(0), nodes.consensus(1));
    let (mut a_votes, _) = a.register(0).expect("channel");
    let (_, mut b_votes) = b.register(0).expect("channel");
    let (_, mut b_blocks) = b.register(3).expect("channel");
    nodes.connected().await;

    // `All` is every connected validator: node 1, not the outsider.
    let checked = a_votes.check(Recipients::All).expect("no rate limit");
    assert_eq!(checked.recipients(), vec![nodes.keys[1].public_key()]);
    let sent = a_votes.send(Recipients::All, Bytes::from_static(b"vote"), false);
    assert_eq!(sent, vec![nodes.keys[1].public_key()]);
    let (from, message) = timeout(LIMIT, b_votes.recv())
        .await
        .expect("in time")
        .expect("message");
    assert_eq!(from, nodes.keys[0].public_key());
    assert_eq!(message.as_ref(), b"vote");
    // The outsider is no recipient even when named.
    let sent = a_votes.send(
        Recipients::Some(vec![nodes.keys[2].public_key(), nodes.keys[1].public_key()]),
        Bytes::from_static(b"again"),
        false,
    );
    assert_eq!(sent, vec![nodes.keys[1].public_key()]);
    let (_, message) = timeout(LIMIT, b_votes.recv())
        .await
        .expect("in time")
        .expect("message");
    assert_eq!(message.as_ref(), b"again");

    // The outsider (a CA certificate, a key outside the set) speaks on the votes channel
    // straight through stave-net: dropped, and charged for it.
    let outsider = &nodes.networks[2];
    let votes = ProtocolId::request(GROUP, MODULE_BASE);
    let frame = outsider.frame(votes, 0, Bytes::from_static(b"forged vote"));
    outsider.try_send(nodes.ids[1], &frame).expect("queued");
    let start = std::time::Instant::now();
    while nodes.networks[1].score(&nodes.ids[2]) == ScoreConfig::default().initial {
        assert!(start.elapsed() < LIMIT, "the outsider was not charged");
        // Nothing from the outsider comes out of the channel.
        assert!(
            timeout(Duration::from_millis(50), b_votes.recv())
                .await
                .is_err()
        );
    }
    assert_eq!(
        nodes.networks[1].score(&nodes.ids[2]),
        ScoreConfig::default().initial - stave_net::Offence::Unauthorized.penalty()
    );
    // Channels are apart: a block-sized message on another channel arrives there.
    let (mut a_blocks, _) = a.register(3).expect("channel");
    let block = Bytes::from(vec![0xab; 4 << 20]);
    let sent = a_blocks.send(
        Recipients::One(nodes.keys[1].public_key()),
        block.clone(),
        false,
    );
    assert_eq!(sent.len(), 1);
    let (_, message) = timeout(LIMIT, b_blocks.recv())
        .await
        .expect("in time")
        .expect("message");
    assert_eq!(message.len(), block.len());
    assert!(
        timeout(Duration::from_millis(50), b_votes.recv())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_set_is_the_validators_and_a_block_is_a_ban() {
    let nodes = Nodes::start().await;
    let mut a = nodes.consensus(0);
    nodes.connected().await;

    let validators = commonware_utils::ordered::Set::try_from(nodes.validators()).expect("set");
    assert_eq!(
        a.peer_set(0).await.expect("set 0").primary,
        validators.clone()
    );
    assert!(a.peer_set(1).await.is_none());
    let mut subscription = a.subscribe().await;
    let update = subscription.try_recv().expect("set 0 at once");
    assert_eq!((update.index, update.latest.primary), (0, validators));
    // The subscription stays open: the engines stop when theirs closes.
    assert!(matches!(subscription.try_recv(), Err(TryRecvError::Empty)));

    let mut blocked = a.blocked();
    assert!(blocked.try_recv().expect("current set").is_empty());
    assert!(a.block(nodes.keys[1].public_key()).accepted());
    assert!(nodes.networks[0].is_banned(&nodes.ids[1]));
    let now_blocked = blocked.try_recv().expect("the new set");
    assert_eq!(
        now_blocked.iter().collect::<Vec<_>>(),
        vec![&nodes.keys[1].public_key()]
    );
    let start = std::time::Instant::now();
    while nodes.networks[0].peers().contains(&nodes.ids[1]) {
        assert!(
            start.elapsed() < LIMIT,
            "the blocked validator stayed connected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// commonware's resolver sends each request to one peer and waits its fetch timeout only
/// when the send was accepted: a validator that is not connected must refuse it, so the
/// request goes to another peer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_only_to_a_validator_that_is_not_connected_is_rejected() {
    let nodes = Nodes::start().await;
    nodes.connected().await;
    let absent = ed25519::PrivateKey::from_seed(9).public_key();
    let mut validators = nodes.validators();
    validators.push(absent.clone());
    let net = ConsensusNet::new(nodes.networks[0].clone(), &validators).expect("consensus");
    let (mut requests, _) = net.register(4).expect("channel");
    let send = |requests: &mut stave_consensus::transport::ChannelSender, to| {
        requests
            .check(to)
            .expect("no rate limit")
            .send(Bytes::from_static(b"request"), false)
    };
    assert_eq!(
        send(&mut requests, Recipients::One(absent.clone())),
        Unreliable::Rejected
    );
    assert_eq!(
        send(&mut requests, Recipients::One(nodes.keys[1].public_key())),
        Unreliable::new(Feedback::Ok)
    );
    // Some of the named validators connected: delivered to those.
    assert_eq!(
        send(
            &mut requests,
            Recipients::Some(vec![absent, nodes.keys[1].public_key()])
        ),
        Unreliable::new(Feedback::Ok)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_whose_frames_cannot_carry_a_block_is_refused() {
    let ca = ChainCa::generate("chain").expect("ca");
    let key = ed25519::PrivateKey::from_seed(0);
    let identity = ca
        .issue_for_key("node0.stave", &key.encode_fixed())
        .expect("certificate");
    let id = identity.node_id().expect("id");
    let tls = NodeTls::new(&ca.certificate(), &identity, [id].into()).expect("tls");
    let mut config = NetworkConfig::new("127.0.0.1:0".parse().expect("address"), vec![]);
    config.frame = FrameConfig {
        max_frame: 1 << 20,
        max_payload: 1 << 20,
        compress_above: Some(1024),
    };
    let network = Network::start(config, tls, id).await.expect("starts");
    assert!(matches!(
        ConsensusNet::new(network.clone(), &[key.public_key()]),
        Err(TransportError::FrameLimits { .. })
    ));
    network.shutdown();
    assert!(matches!(module(16), Err(TransportError::Channel(16))));
    assert_eq!(module(4).expect("in range"), MODULE_BASE + 4);
}

#[test]
fn the_certificate_key_is_commonwares_public_key_for_the_same_seed() {
    let ca = ChainCa::generate("chain").expect("ca");
    for seed in 0..4 {
        let key = ed25519::PrivateKey::from_seed(seed);
        let identity = ca
            .issue_for_key("node.stave", &key.encode_fixed())
            .expect("certificate");
        let public: [u8; 32] = key.public_key().as_ref().try_into().expect("32 bytes");
        // The certificate's id hashes its key; so it holds commonware's public key.
        assert_eq!(
            identity.node_id().expect("id"),
            stave_net::ed25519_node_id(&public)
        );
        assert_eq!(
            validator_node_id(&key.public_key()),
            stave_net::ed25519_node_id(&public)
        );
    }
}
