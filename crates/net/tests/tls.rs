//! Mutual TLS on loopback: nodes of one chain talk; a certificate from another CA, a node
//! off the allow-list and a plain TCP peer are all refused before a frame is read.

use std::{collections::HashSet, time::Duration};

use bytes::{Bytes, BytesMut};
use stave_net::{
    ChainCa, Frame, FrameCodec, FrameConfig, NodeIdentity, NodeTls, ProtocolId, TlsError,
    ed25519_node_id, encode_frame, frame::VERSION, node_id,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::timeout,
};
use tokio_util::codec::Decoder;

const LIMIT: Duration = Duration::from_secs(10);

struct Pair {
    listener: TcpListener,
    server: NodeTls,
}

async fn listen(server: NodeTls) -> Pair {
    Pair {
        listener: TcpListener::bind("127.0.0.1:0").await.expect("binds"),
        server,
    }
}

/// Serves one handshake with `server`; returns the address and what the handshake gave.
async fn serve_one(
    server: NodeTls,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<Result<stave_net::NodeId, TlsError>>,
) {
    let pair = listen(server).await;
    let address = pair.listener.local_addr().expect("address");
    let serving = tokio::spawn(async move {
        let (socket, _) = pair.listener.accept().await.expect("accepts");
        pair.server.accept(socket).await.map(|(_, id)| id)
    });
    (address, serving)
}

/// How the server side of [`serve_one`] ended, within [`LIMIT`].
async fn server_outcome(
    serving: tokio::task::JoinHandle<Result<stave_net::NodeId, TlsError>>,
) -> Result<stave_net::NodeId, TlsError> {
    timeout(LIMIT, serving)
        .await
        .expect("in time")
        .expect("task")
}

/// A mutual-TLS handshake between `server` (dialled as `server_name`) and `client` that
/// must succeed, each side learning the other's node id (`server_id`, `client_id`).
async fn handshake_succeeds(
    server: NodeTls,
    server_name: &str,
    server_id: stave_net::NodeId,
    client: &NodeTls,
    client_id: stave_net::NodeId,
) {
    let (address, serving) = serve_one(server).await;
    let socket = TcpStream::connect(address).await.expect("connects");
    let (_, peer) = timeout(LIMIT, client.connect(server_name, socket))
        .await
        .expect("in time")
        .expect("handshake");
    assert_eq!(peer, server_id);
    let seen = server_outcome(serving).await;
    assert_eq!(seen.expect("accepted"), client_id);
}

#[tokio::test]
async fn nodes_of_one_chain_exchange_frames_and_learn_each_others_ids() {
    let ca = ChainCa::generate("stave test chain").expect("ca");
    let (a, b) = (
        ca.issue("node0.stave").expect("a"),
        ca.issue("node1.stave").expect("b"),
    );
    let ids: HashSet<_> = [a.node_id().expect("id"), b.node_id().expect("id")].into();
    let server = NodeTls::new(&ca.certificate(), &a, ids.clone()).expect("tls");
    let client = NodeTls::new(&ca.certificate(), &b, ids).expect("tls");
    let pair = listen(server).await;
    let address = pair.listener.local_addr().expect("address");
    let serving = tokio::spawn(async move {
        let (socket, _) = pair.listener.accept().await.expect("accepts");
        let (mut stream, peer) = pair.server.accept(socket).await.expect("handshake");
        let mut buffer = BytesMut::new();
        let mut codec = FrameCodec::default();
        loop {
            if let Some(frame) = codec.decode(&mut buffer).expect("valid") {
                return (peer, frame);
            }
            assert!(
                stream.read_buf(&mut buffer).await.expect("reads") > 0,
                "closed early"
            );
        }
    });
    let socket = TcpStream::connect(address).await.expect("connects");
    let (mut stream, peer) = timeout(LIMIT, client.connect("node0.stave", socket))
        .await
        .expect("in time")
        .expect("handshake");
    assert_eq!(peer, a.node_id().expect("id"));
    let frame = Frame {
        version: VERSION,
        protocol_id: ProtocolId::request(1, 2),
        packet_type: 3,
        seq: 4,
        payload: Bytes::from(vec![9; 5_000]),
    };
    stream
        .write_all(&encode_frame(&frame, &FrameConfig::default()).expect("encodes"))
        .await
        .expect("writes");
    let (seen_peer, received) = timeout(LIMIT, serving)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(seen_peer, b.node_id().expect("id"));
    assert_eq!(received, frame);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let ca = ChainCa::generate("chain").expect("ca");
    let rogue_ca = ChainCa::generate("another chain").expect("ca");
    let good = ca.issue("node0.stave").expect("good");
    let rogue = rogue_ca.issue("node9.stave").expect("rogue");
    let allowed: HashSet<_> = [good.node_id().expect("id"), rogue.node_id().expect("id")].into();
    let (address, serving) =
        serve_one(NodeTls::new(&ca.certificate(), &good, allowed.clone()).expect("tls")).await;
    // The rogue node trusts its own CA, so it also refuses ours: either side may fail first.
    let rogue_tls = NodeTls::new(&rogue_ca.certificate(), &rogue, allowed).expect("tls");
    let socket = TcpStream::connect(address).await.expect("connects");
    let dialled = timeout(LIMIT, rogue_tls.connect("node0.stave", socket))
        .await
        .expect("in time");
    assert!(dialled.is_err());
    let served = server_outcome(serving).await;
    assert!(matches!(served, Err(TlsError::Io(_))), "{served:?}");
}

#[tokio::test]
async fn a_node_off_the_allow_list_is_refused() {
    let ca = ChainCa::generate("chain").expect("ca");
    let (a, stranger) = (
        ca.issue("node0.stave").expect("a"),
        ca.issue("node5.stave").expect("s"),
    );
    let only_a: HashSet<_> = [a.node_id().expect("id")].into();
    let (address, serving) =
        serve_one(NodeTls::new(&ca.certificate(), &a, only_a.clone()).expect("tls")).await;
    let client = NodeTls::new(&ca.certificate(), &stranger, only_a).expect("tls");
    let socket = TcpStream::connect(address).await.expect("connects");
    let _ = timeout(LIMIT, client.connect("node0.stave", socket))
        .await
        .expect("in time");
    let served = server_outcome(serving).await;
    let stranger_id = stranger.node_id().expect("id");
    assert!(
        matches!(served, Err(TlsError::NotAllowed(id)) if id == stranger_id),
        "{served:?}"
    );
}

#[tokio::test]
async fn a_plain_tcp_peer_is_refused_before_any_frame_is_read() {
    let ca = ChainCa::generate("chain").expect("ca");
    let a = ca.issue("node0.stave").expect("a");
    let allowed: HashSet<_> = [a.node_id().expect("id")].into();
    let (address, serving) =
        serve_one(NodeTls::new(&ca.certificate(), &a, allowed).expect("tls")).await;
    let mut plain = TcpStream::connect(address).await.expect("connects");
    let frame = Frame {
        version: VERSION,
        protocol_id: ProtocolId::request(1, 1),
        packet_type: 0,
        seq: 1,
        payload: Bytes::from_static(b"hello"),
    };
    let _ = plain
        .write_all(&encode_frame(&frame, &FrameConfig::default()).expect("encodes"))
        .await;
    let served = server_outcome(serving).await;
    assert!(matches!(served, Err(TlsError::Io(_))), "{served:?}");
}

#[tokio::test]
async fn a_ca_and_identities_saved_as_pem_work_as_the_originals() {
    let ca = ChainCa::generate("chain").expect("ca");
    let (ca_pem, ca_key_pem) = ca.to_pem();
    let reloaded = ChainCa::from_pem(&ca_pem, &ca_key_pem).expect("reloads");
    assert_eq!(reloaded.certificate(), ca.certificate());
    // A node the reloaded CA admits is accepted by a node that trusts the original one.
    let server = ca.issue("node0.stave").expect("cert");
    let late = reloaded.issue("node1.stave").expect("cert");
    // Both identities travel through PEM files.
    let (cert, key) = late.to_pem();
    let late = NodeIdentity::from_pem("node1.stave", &cert, &key).expect("reloads");
    let (cert, key) = server.to_pem();
    let server = NodeIdentity::from_pem("node0.stave", &cert, &key).expect("reloads");
    let trusted = stave_net::tls::ca_certificate_from_pem(&ca_pem).expect("ca cert");
    let allowed: HashSet<_> = [server.node_id().expect("id"), late.node_id().expect("id")].into();
    handshake_succeeds(
        NodeTls::new(&trusted, &server, allowed.clone()).expect("tls"),
        "node0.stave",
        server.node_id().expect("id"),
        &NodeTls::new(&trusted, &late, allowed).expect("tls"),
        late.node_id().expect("id"),
    )
    .await;
}

#[test]
fn garbage_pem_is_a_typed_error() {
    let ca = ChainCa::generate("chain").expect("ca");
    let (cert, key) = ca.to_pem();
    for (cert, key) in [
        ("garbage", key.as_str()),
        (cert.as_str(), "garbage"),
        ("", ""),
    ] {
        assert!(matches!(
            ChainCa::from_pem(cert, key),
            Err(TlsError::Pem(_))
        ));
        assert!(matches!(
            NodeIdentity::from_pem("n", cert, key),
            Err(TlsError::Pem(_))
        ));
    }
}

/// RFC 8032 §7.1, test 1: a secret key (seed) and its public key.
const RFC8032_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const RFC8032_PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

fn bytes32(hex_text: &str) -> [u8; 32] {
    let mut out = [0; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex_text[2 * i..2 * i + 2], 16).expect("hex");
    }
    out
}

#[test]
fn a_certificate_for_a_seed_holds_its_rfc8032_public_key_and_has_the_predicted_id() {
    let ca = ChainCa::generate("chain").expect("ca");
    let identity = ca
        .issue_for_key("validator0.stave", &bytes32(RFC8032_SEED))
        .expect("certificate");
    // The id hashes the certificate's SubjectPublicKeyInfo, so equal ids mean the
    // certificate holds exactly the RFC 8032 public key of the seed.
    let predicted = ed25519_node_id(&bytes32(RFC8032_PUBLIC));
    assert_eq!(node_id(&identity.certificate).expect("id"), predicted);
    assert_eq!(identity.node_id().expect("id"), predicted);
    // The same seed again: another certificate, the same key and id.
    let again = ca
        .issue_for_key("validator0.stave", &bytes32(RFC8032_SEED))
        .expect("certificate");
    assert_eq!(again.node_id().expect("id"), predicted);
    // Another seed, another id.
    let other = ca
        .issue_for_key("validator1.stave", &[7; 32])
        .expect("certificate");
    assert_ne!(other.node_id().expect("id"), predicted);
}

#[tokio::test]
async fn nodes_with_ed25519_certificates_complete_mutual_tls_both_ways() {
    let ca = ChainCa::generate("chain").expect("ca");
    let a = ca.issue_for_key("node0.stave", &[1; 32]).expect("a");
    let b = ca.issue_for_key("node1.stave", &[2; 32]).expect("b");
    // An ed25519 identity survives its PEM files (what `stave` keeps on disk).
    let (cert, key) = b.to_pem();
    let b = NodeIdentity::from_pem("node1.stave", &cert, &key).expect("reloads");
    // A node with an ordinary (P-256) certificate talks to ed25519 ones in both roles too.
    let c = ca.issue("node2.stave").expect("c");
    let allowed: HashSet<_> = [&a, &b, &c]
        .iter()
        .map(|identity| identity.node_id().expect("id"))
        .collect();
    let tls = |identity: &NodeIdentity| {
        NodeTls::new(&ca.certificate(), identity, allowed.clone()).expect("tls")
    };
    for (server, server_name, client) in [
        (&a, "node0.stave", &b),
        (&b, "node1.stave", &a),
        (&a, "node0.stave", &c),
        (&c, "node2.stave", &b),
    ] {
        handshake_succeeds(
            tls(server),
            server_name,
            server.node_id().expect("id"),
            &tls(client),
            client.node_id().expect("id"),
        )
        .await;
    }
}
