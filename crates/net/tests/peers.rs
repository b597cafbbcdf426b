//! The peer manager on loopback: static peers connect and reconnect, one connection per
//! pair, requests matched by seq, routing by module, and hostile peers closed and banned
//! while the node keeps serving.

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use stave_net::{
    FrameCodec, FrameConfig, NetError, Offence, ProtocolId, Verdict, encode_frame, frame::VERSION,
};
use support::{Chain, LIMIT, eventually, incompressible};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::timeout,
};

const GROUP: i16 = 7;
const ECHO: u16 = 1;
const NEWS: u16 = 2;

/// A compressible payload larger than the compression threshold.
fn big_payload() -> Bytes {
    Bytes::from(b"stave ".repeat(2_000))
}

#[tokio::test]
async fn static_peers_connect_and_answer_requests_matched_by_seq() {
    let chain = Chain::new(2);
    let server = chain.start(0, vec![], |_| {}).await;
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    let mut echo = server.register(GROUP, ECHO, 64);
    let responder = server.clone();
    tokio::spawn(async move {
        while let Some(request) = echo.recv().await {
            let mut answer = request.frame.payload.to_vec();
            answer.reverse();
            responder
                .respond(&request, Bytes::from(answer))
                .await
                .expect("responds");
        }
    });
    eventually("connection", || client.peers() == vec![chain.ids[0]]).await;
    assert_eq!(server.peers(), vec![chain.ids[1]]);

    // Many requests in flight at once, small and compressed: each gets its own answer.
    let requests: Vec<_> = (0..50u32)
        .map(|i| {
            let client = client.clone();
            let peer = chain.ids[0];
            tokio::spawn(async move {
                let payload = if i % 2 == 0 {
                    Bytes::from(i.to_be_bytes().to_vec())
                } else {
                    big_payload()
                };
                let answer = client
                    .request(peer, ProtocolId::request(GROUP, ECHO), 0, payload.clone())
                    .await
                    .expect("answered");
                let mut expected = payload.to_vec();
                expected.reverse();
                assert_eq!(answer.to_vec(), expected);
            })
        })
        .collect();
    for request in requests {
        timeout(LIMIT, request)
            .await
            .expect("in time")
            .expect("no panic");
    }
}

#[tokio::test]
async fn nodes_dialling_each_other_keep_one_connection_and_broadcasts_arrive_once() {
    let chain = Chain::new(3);
    // 1 dials 0, 2 dials 0 and 1: a full mesh of three.
    let a = chain.start(0, vec![], |_| {}).await;
    let b = chain.start(1, vec![chain.peer(0, &a)], |_| {}).await;
    let c = chain
        .start(2, vec![chain.peer(0, &a), chain.peer(1, &b)], |_| {})
        .await;
    let mut news_b = b.register(GROUP, NEWS, 64);
    let mut news_c = c.register(GROUP, NEWS, 64);
    eventually("full mesh", || {
        a.peers().len() == 2 && b.peers().len() == 2 && c.peers().len() == 2
    })
    .await;
    let frame = a.frame(ProtocolId::request(GROUP, NEWS), 3, big_payload());
    assert_eq!(a.broadcast(&frame, None).expect("encodes"), 2);
    for news in [&mut news_b, &mut news_c] {
        let got = timeout(LIMIT, news.recv())
            .await
            .expect("in time")
            .expect("frame");
        assert_eq!(got.peer, chain.ids[0]);
        assert_eq!(got.frame.payload, big_payload());
        assert_eq!(got.frame.packet_type, 3);
    }
    // `except` leaves a peer out.
    let frame = a.frame(
        ProtocolId::request(GROUP, NEWS),
        4,
        Bytes::from_static(b"x"),
    );
    assert_eq!(a.broadcast(&frame, Some(chain.ids[1])).expect("encodes"), 1);
    let got = timeout(LIMIT, news_c.recv())
        .await
        .expect("in time")
        .expect("frame");
    assert_eq!(got.frame.packet_type, 4);
    assert!(news_b.try_recv().is_err());
}

#[tokio::test]
async fn try_send_queues_without_waiting_and_says_who_is_not_connected() {
    let chain = Chain::new(3);
    let a = chain.start(0, vec![], |_| {}).await;
    let b = chain.start(1, vec![chain.peer(0, &a)], |_| {}).await;
    let mut news = b.register(GROUP, NEWS, 64);
    eventually("connection", || a.peers() == vec![chain.ids[1]]).await;
    let frame = a.frame(ProtocolId::request(GROUP, NEWS), 5, big_payload());
    // Node 2 never started: not connected; node 1 gets the frame.
    let outcomes = a
        .try_send_each(&[chain.ids[2], chain.ids[1]], &frame)
        .expect("encodes");
    assert!(matches!(outcomes[0], Err(NetError::NotConnected(id)) if id == chain.ids[2]));
    assert!(outcomes[1].is_ok());
    a.try_send(
        chain.ids[1],
        &a.frame(ProtocolId::request(GROUP, NEWS), 6, Bytes::new()),
    )
    .expect("queued");
    for packet_type in [5, 6] {
        let got = timeout(LIMIT, news.recv())
            .await
            .expect("in time")
            .expect("frame");
        assert_eq!(
            (got.peer, got.frame.packet_type),
            (chain.ids[0], packet_type)
        );
    }
    // A frame too large for the limits is the frame's error, before any peer.
    let mut huge = frame.clone();
    huge.payload = Bytes::from(vec![0; a.frame_config().max_payload + 1]);
    assert!(matches!(
        a.try_send_each(&[chain.ids[1]], &huge),
        Err(NetError::Frame(_))
    ));
    assert!(!a.is_shut_down());
    a.shutdown();
    assert!(a.is_shut_down());
}

#[tokio::test]
async fn a_blocked_peer_is_banned_and_disconnected_at_once() {
    let chain = Chain::new(2);
    let a = chain.start(0, vec![], |_| {}).await;
    let b = chain.start(1, vec![chain.peer(0, &a)], |_| {}).await;
    eventually("connection", || a.peers() == vec![chain.ids[1]]).await;
    assert!(matches!(
        a.penalize(chain.ids[1], Offence::Blocked),
        Verdict::Banned(_)
    ));
    assert!(a.is_banned(&chain.ids[1]));
    eventually("disconnect", || {
        a.peers().is_empty() && b.peers().is_empty()
    })
    .await;
}

#[tokio::test]
async fn simultaneous_dials_settle_on_one_connection_that_stays() {
    let chain = Chain::new(2);
    // 0 dials 1's port before 1 is up (its dial loop retries); 1 comes up dialling 0.
    // The port stays bound until 1 takes it: a port the kernel hands out for `bind(0)` is
    // one it may also give a dial of 0's as its local port, and 0 would connect to itself.
    let reserved = reserved_port();
    let port = reserved.local_addr().expect("address").port();
    let a = chain
        .start(
            0,
            vec![stave_net::StaticPeer {
                name: chain.names[1].clone(),
                address: format!("127.0.0.1:{port}").parse().expect("address"),
            }],
            |_| {},
        )
        .await;
    drop(reserved);
    let b = chain
        .start(1, vec![chain.peer(0, &a)], |config| {
            config.listen = format!("127.0.0.1:{port}").parse().expect("address");
        })
        .await;
    eventually("connection", || {
        a.peers().len() == 1 && b.peers().len() == 1
    })
    .await;
    // Both dial loops are satisfied: nothing flaps for a while.
    let mut news = b.register(GROUP, NEWS, 64);
    for i in 0..20u16 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let frame = a.frame(
            ProtocolId::request(GROUP, NEWS),
            i,
            Bytes::from_static(b"hi"),
        );
        a.send(chain.ids[1], &frame).await.expect("connected");
        let got = timeout(LIMIT, news.recv())
            .await
            .expect("in time")
            .expect("frame");
        assert_eq!(got.frame.packet_type, i);
    }
}

/// A socket bound to a port free on localhost: no outgoing connection takes the port as
/// its local port while the socket holds it, and, as it does not listen, a dial to the
/// port is refused as if nothing were there.
fn reserved_port() -> tokio::net::TcpSocket {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("binds");
    socket
}

#[tokio::test]
async fn a_restarted_peer_is_redialled() {
    let chain = Chain::new(2);
    let server = chain.start(0, vec![], |_| {}).await;
    let address = server.local_addr();
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("connection", || client.peers().len() == 1).await;
    server.shutdown();
    eventually("disconnect noticed", || client.peers().is_empty()).await;
    let again = chain
        .start(0, vec![], |config| config.listen = address)
        .await;
    eventually("reconnection", || {
        client.peers().len() == 1 && again.peers().len() == 1
    })
    .await;
}

#[tokio::test]
async fn an_unanswered_request_times_out_and_costs_the_peer() {
    let chain = Chain::new(2);
    let silent = chain.start(0, vec![], |_| {}).await;
    let _inbox = silent.register(GROUP, ECHO, 16);
    let client = chain
        .start(1, vec![chain.peer(0, &silent)], |config| {
            config.request_timeout = Duration::from_millis(200);
        })
        .await;
    eventually("connection", || client.peers().len() == 1).await;
    let error = client
        .request(
            chain.ids[0],
            ProtocolId::request(GROUP, ECHO),
            0,
            Bytes::new(),
        )
        .await
        .expect_err("no answer");
    assert!(matches!(error, NetError::Timeout { .. }), "{error}");
    // One timeout is not enough for a ban: the next offence shows the score.
    assert_eq!(
        client.penalize(chain.ids[0], Offence::Timeout),
        Verdict::Keep(100 - 2 * Offence::Timeout.penalty())
    );
    let error = client
        .request([9; 32], ProtocolId::request(GROUP, ECHO), 0, Bytes::new())
        .await
        .expect_err("unknown peer");
    assert!(matches!(error, NetError::NotConnected(_)), "{error}");
}

#[tokio::test]
async fn frames_for_unknown_modules_get_a_peer_banned_and_refused() {
    let chain = Chain::new(2);
    let server = chain.start(0, vec![], |_| {}).await;
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("connection", || server.peers().len() == 1).await;
    let rounds = 100 / Offence::UnknownModule.penalty() + 1;
    for _ in 0..rounds {
        let frame = client.frame(ProtocolId::request(GROUP, 99), 0, Bytes::new());
        // The connection may already be gone on the last rounds.
        let _ = client.send(chain.ids[0], &frame).await;
    }
    eventually("ban", || server.is_banned(&chain.ids[1])).await;
    eventually("disconnect", || {
        server.peers().is_empty() && client.peers().is_empty()
    })
    .await;
    // The client keeps redialling; the server keeps refusing it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.peers().is_empty());
}

#[tokio::test]
async fn frames_for_a_late_group_cost_nothing_until_one_of_its_modules_registers() {
    const LATE: i16 = 9;
    let chain = Chain::new(2);
    let server = chain
        .start(0, vec![], |config| config.late_groups = vec![LATE])
        .await;
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("connection", || server.peers().len() == 1).await;
    let send = |module: u16, count: i32| {
        let client = client.clone();
        let to = chain.ids[0];
        async move {
            for _ in 0..count {
                let frame = client.frame(ProtocolId::request(LATE, module), 0, Bytes::new());
                let _ = client.send(to, &frame).await;
            }
        }
    };
    // Before the group's modules register: far more frames than a ban takes, no ban.
    let ban = 100 / Offence::UnknownModule.penalty() + 1;
    send(1, 3 * ban).await;
    let mut echo = server.register(GROUP, ECHO, 8);
    let frame = client.frame(
        ProtocolId::request(GROUP, ECHO),
        0,
        Bytes::from_static(b"after"),
    );
    client.send(chain.ids[0], &frame).await.expect("sends");
    let got = tokio::time::timeout(LIMIT, echo.recv())
        .await
        .expect("the connection stays up")
        .expect("the frame sent after them arrives");
    assert_eq!(got.frame.payload, Bytes::from_static(b"after"));
    assert!(!server.is_banned(&chain.ids[1]));
    assert_eq!(server.peers().len(), 1);

    // Once a module of the group registers, frames for its unknown modules cost points.
    let _late = server.register(LATE, 1, 8);
    send(2, ban).await;
    eventually("ban", || server.is_banned(&chain.ids[1])).await;
}

#[tokio::test]
async fn bulk_frames_wait_while_other_frames_go_first() {
    let chain = Chain::new(2);
    let server = chain.start(0, vec![], |_| {}).await;
    // A peer that reads nothing for now: the server's writes to it back up.
    let stream = raw_peer(&chain, 1, &server).await;
    eventually("connection", || server.peers().len() == 1).await;
    // Far more bulk bytes than the sockets buffer (incompressible, so they stay large),
    // then one frame on the ordinary queue. Once the sockets and the bulk queue are full,
    // bulk frames are dropped: the stalled peer is not sent all of them.
    const BULK: usize = 1_000;
    let noise = Bytes::from(incompressible(32 << 10));
    let mut queued = 0;
    for _ in 0..BULK {
        let frame = server.frame(ProtocolId::request(GROUP, NEWS), 1, noise.clone());
        queued += server.broadcast_bulk(&frame, None).expect("encodes");
    }
    assert!(
        queued < BULK,
        "all {BULK} bulk frames were queued for a peer that reads nothing"
    );
    let urgent = server.frame(
        ProtocolId::request(GROUP, NEWS),
        2,
        Bytes::from_static(b"vote"),
    );
    assert_eq!(server.broadcast(&urgent, None).expect("encodes"), 1);

    // The peer reads now: the ordinary frame comes after the few bulk frames already on
    // their way, and every bulk frame queued still arrives.
    let mut frames =
        tokio_util::codec::FramedRead::new(stream, FrameCodec::new(FrameConfig::default()));
    let mut bulk_before = None;
    let mut bulk = 0;
    while bulk < queued || bulk_before.is_none() {
        let frame = timeout(LIMIT, frames.next())
            .await
            .expect("in time")
            .expect("a frame")
            .expect("well formed");
        match frame.packet_type {
            1 => bulk += 1,
            _ => bulk_before = Some(bulk),
        }
    }
    let bulk_before = bulk_before.expect("the ordinary frame arrived");
    assert!(
        bulk_before < queued / 2,
        "{bulk_before} of {queued} bulk frames went before the ordinary one"
    );
}

/// Opens a raw TLS connection to `network` as node `i` of `chain`, bypassing its own
/// network, so the test can write any bytes.
async fn raw_peer(
    chain: &Chain,
    i: usize,
    network: &stave_net::Network,
) -> tokio_rustls::TlsStream<TcpStream> {
    let socket = TcpStream::connect(network.local_addr())
        .await
        .expect("connects");
    let (stream, _) = chain.tls[i]
        .connect(&chain.names[0], socket)
        .await
        .expect("handshake");
    stream
}

#[tokio::test]
async fn hostile_frames_close_the_connection_and_pass_nothing_upward() {
    let chain = Chain::new(7);
    let server = chain
        .start(0, vec![], |config| {
            config.frame = FrameConfig {
                max_frame: 1 << 20,
                max_payload: 1 << 20,
                ..FrameConfig::default()
            };
        })
        .await;
    let mut inbox = server.register(GROUP, NEWS, 64);
    let header = |length: u32, version: u16| {
        let mut out = Vec::new();
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&ProtocolId::request(GROUP, NEWS).0.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out
    };
    // A Snappy payload declaring 4 GiB, a frame over the limit, a length shorter than the
    // header, garbage in the compressed payload, an unknown version.
    let bomb = {
        let mut out = header(16 + 5, VERSION | 0x8000);
        out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        out
    };
    let oversize = header(2 << 20, VERSION);
    let short = header(3, VERSION);
    let garbage = {
        let mut out = header(16 + 8, VERSION | 0x8000);
        out.extend_from_slice(&[0x08, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22]);
        out
    };
    let unknown_version = {
        let mut out = header(16 + 1, 0x7000);
        out.push(1);
        out
    };
    // Each from another node, so that none is banned before its frame is read.
    for (sender, (name, bytes)) in [
        ("bomb", bomb),
        ("oversize", oversize),
        ("short", short),
        ("garbage", garbage),
        ("unknown version", unknown_version),
    ]
    .into_iter()
    .enumerate()
    {
        let mut stream = raw_peer(&chain, sender + 1, &server).await;
        stream.write_all(&bytes).await.expect("writes");
        stream.flush().await.expect("flushes");
        let mut buf = [0; 64];
        let read = timeout(LIMIT, stream.read(&mut buf)).await.expect(name);
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "{name}: connection not closed: {read:?}"
        );
        assert!(inbox.try_recv().is_err(), "{name}: something passed upward");
    }
    // Each bad frame cost its sender half its score: one more offence bans it.
    for sender in 1..=5 {
        assert!(!server.is_banned(&chain.ids[sender]));
        let verdict = server.penalize(chain.ids[sender], Offence::BadFrame);
        assert!(matches!(verdict, Verdict::Banned(_)), "{verdict:?}");
    }
    // The node still serves a good peer.
    let good = chain.start(6, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("good peer", || server.peers() == vec![chain.ids[6]]).await;
    let frame = good.frame(ProtocolId::request(GROUP, NEWS), 1, big_payload());
    good.send(chain.ids[0], &frame).await.expect("sends");
    let got = timeout(LIMIT, inbox.recv())
        .await
        .expect("in time")
        .expect("frame");
    assert_eq!(got.frame.payload, big_payload());
    // A truncated frame followed by a hang-up passes nothing either.
    let mut stream = raw_peer(&chain, 6, &server).await;
    let mut whole = encode_frame(&frame, &FrameConfig::default())
        .expect("encodes")
        .to_vec();
    whole.truncate(whole.len() / 2);
    stream.write_all(&whole).await.expect("writes");
    stream.shutdown().await.expect("hangs up");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(inbox.try_recv().is_err());
}
