//! The network under hostile or broken peers, on loopback: thousands of connections that
//! never finish a TLS handshake leave honest peers connected and talking; a link that
//! goes dead without closing is found by keepalive, while a quiet live one stays; a link
//! cut for many redials is back within a second of healing; a peer holds no more than its
//! receive budget of frames a module has not taken.

mod support;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use stave_net::{Network, ProtocolId, StaticPeer};
use support::{Chain, LIMIT, eventually, proxy::Proxy};
use tokio::{
    io::AsyncReadExt,
    net::{TcpSocket, TcpStream},
};

const GROUP: i16 = 7;
const ECHO: u16 = 1;

/// Answers every request to `network`'s echo module with its payload.
fn echo(network: &Network) {
    let mut inbox = network.register(GROUP, ECHO, 64);
    let network = network.clone();
    tokio::spawn(async move {
        while let Some(request) = inbox.recv().await {
            let payload = request.frame.payload.clone();
            let _ = network.respond(&request, payload).await;
        }
    });
}

/// Opens `count` TCP connections to `target` from source addresses 127.0.0.2,
/// 127.0.0.3, ... (`per_ip` from each), which never send a byte.
async fn silent_connections(target: SocketAddr, count: usize, per_ip: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(count);
    for index in 0..count {
        let host = 2 + (index / per_ip) as u8;
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)),
                0,
            ))
            .expect("binds a loopback source address");
        match tokio::time::timeout(Duration::from_secs(5), socket.connect(target)).await {
            Ok(Ok(stream)) => sockets.push(stream),
            // A full accept backlog drops the SYN; the flood goes on without this one.
            _ => continue,
        }
    }
    sockets
}

/// Thousands of connections that never finish a TLS handshake (from many addresses, so
/// both the total and the per-address caps are reached): the two connected peers keep
/// exchanging requests promptly, a new peer still gets in, and every silent connection
/// is closed by the node (beyond the caps at once, the rest at the handshake timeout).
#[cfg(target_os = "linux")] // 127.0.0.2 and up are local addresses on Linux only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_flood_leaves_honest_peers_connected_and_talking() {
    // 5,000 as the issue asks, fewer if this process may not open that many descriptors
    // (each silent connection costs one here and, while held, one in the node).
    let flood = 5_000.min(
        stave_net::raise_fd_limit()
            .unwrap_or(1_024)
            .saturating_sub(1_024) as usize
            / 2,
    );
    assert!(flood >= 500, "too few descriptors for a meaningful flood");
    let chain = Chain::new(3);
    let handshake_timeout = Duration::from_secs(2);
    let server = chain
        .start(0, vec![], |config| {
            config.handshake_timeout = handshake_timeout;
            config.max_pending_handshakes = 128;
            config.max_pending_handshakes_per_ip = 8;
        })
        .await;
    echo(&server);
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("the honest peer connects", || client.peers().len() == 1).await;

    // Honest traffic all through the flood: each request answered within a second.
    let talking = Arc::new(AtomicBool::new(true));
    let talker = {
        let (client, talking, server_id) = (client.clone(), talking.clone(), chain.ids[0]);
        tokio::spawn(async move {
            let mut answered = 0u32;
            let mut slowest = Duration::ZERO;
            while talking.load(Ordering::Relaxed) {
                let started = Instant::now();
                let payload = Bytes::from(answered.to_le_bytes().to_vec());
                let answer = client
                    .request(
                        server_id,
                        ProtocolId::request(GROUP, ECHO),
                        0,
                        payload.clone(),
                    )
                    .await
                    .expect("answered during the flood");
                assert_eq!(answer, payload);
                slowest = slowest.max(started.elapsed());
                answered += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (answered, slowest)
        })
    };

    let started = Instant::now();
    let mut silent = silent_connections(server.local_addr(), flood, 40).await;
    assert!(
        silent.len() >= flood * 9 / 10,
        "only {} of {flood} connections opened",
        silent.len()
    );
    // A peer arriving during the flood gets in, once a handshake slot frees up at the
    // latest (the flood's held slots time out).
    let newcomer = chain.start(2, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("a new peer connects during the flood", || {
        newcomer.peers() == vec![chain.ids[0]]
    })
    .await;

    // The node closes every silent connection: those beyond the caps at once, the rest at
    // the handshake timeout. Reading one then sees the end of the stream (or a reset).
    let deadline = started + 3 * handshake_timeout + LIMIT;
    let mut still_open = 0;
    for socket in &mut silent {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut byte = [0u8; 1];
        match tokio::time::timeout(left.max(Duration::from_millis(1)), socket.read(&mut byte)).await
        {
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(_)) => panic!("the node sent bytes to a client that never said hello"),
            Err(_) => still_open += 1,
        }
    }
    assert_eq!(still_open, 0, "silent connections the node kept open");
    drop(silent);

    talking.store(false, Ordering::Relaxed);
    let (answered, slowest) = talker.await.expect("the honest peer talked");
    assert!(answered > 10, "only {answered} requests answered");
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?} during the flood"
    );
    assert_eq!(client.peers(), vec![chain.ids[0]], "the honest peer stays");
    assert!(server.peers().contains(&chain.ids[1]));
    for network in [&server, &client, &newcomer] {
        network.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_finds_a_dead_link_and_keeps_a_quiet_live_one() {
    let chain = Chain::new(2);
    let (interval, timeout) = (Duration::from_millis(200), Duration::from_secs(1));
    let keepalive = |config: &mut stave_net::NetworkConfig| {
        config.keepalive_interval = interval;
        config.keepalive_timeout = timeout;
        // Redials go through the frozen proxy too; slow them so the link stays down.
        config.backoff_min = Duration::from_secs(30);
        config.backoff_max = Duration::from_secs(30);
    };
    let server = chain.start(0, vec![], keepalive).await;
    let proxy = Proxy::start(server.local_addr()).await;
    let via_proxy = StaticPeer {
        name: chain.names[0].clone(),
        address: proxy.address,
    };
    let client = chain.start(1, vec![via_proxy], keepalive).await;
    eventually("the connection", || {
        client.peers().len() == 1 && server.peers().len() == 1
    })
    .await;

    // Nothing to send for many keepalive timeouts: keepalives hold the link up.
    tokio::time::sleep(timeout * 4).await;
    assert_eq!(
        client.peers(),
        vec![chain.ids[0]],
        "a quiet link was dropped"
    );
    assert_eq!(
        server.peers(),
        vec![chain.ids[1]],
        "a quiet link was dropped"
    );

    // The link goes dead without closing: both ends notice within the timeout (and
    // their checks' granularity), far within the 30 s the issue allows.
    proxy.freeze();
    let frozen_at = Instant::now();
    eventually("both ends to drop the dead link", || {
        client.peers().is_empty() && server.peers().is_empty()
    })
    .await;
    let noticed = frozen_at.elapsed();
    assert!(
        noticed < timeout * 5,
        "the dead link was noticed after {noticed:?}"
    );
    assert!(
        noticed >= timeout - interval,
        "dropped before the timeout: {noticed:?}"
    );
    client.shutdown();
    server.shutdown();
}

/// A static peer unreachable for several seconds (its link cut: connections closed, new
/// ones refused, as by a partition) is connected again within about a second of the link
/// healing: the redial back-off, doubling from its minimum on every refused dial, stays
/// short however long the outage lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_link_is_redialled_within_a_second_of_healing() {
    let chain = Chain::new(2);
    let server = chain.start(0, vec![], |_| {}).await;
    let proxy = Proxy::start(server.local_addr()).await;
    let via_proxy = StaticPeer {
        name: chain.names[0].clone(),
        address: proxy.address,
    };
    // The network's own back-off, not the short one of these tests.
    let defaults = |config: &mut stave_net::NetworkConfig| {
        let defaults = stave_net::NetworkConfig::new(config.listen, Vec::new());
        config.backoff_min = defaults.backoff_min;
        config.backoff_max = defaults.backoff_max;
    };
    let client = chain.start(1, vec![via_proxy], defaults).await;
    eventually("the connection", || client.peers().len() == 1).await;

    proxy.cut();
    eventually("the cut link to drop", || client.peers().is_empty()).await;
    // Seven refused dials' worth: a back-off doubling from 100 ms without a low cap would
    // wait several seconds for its next dial.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(client.peers().is_empty(), "connected through a cut link");
    proxy.heal();
    let healed = Instant::now();
    eventually("the healed link", || client.peers().len() == 1).await;
    let back = healed.elapsed();
    assert!(
        back < Duration::from_secs(3),
        "redialled {back:?} after healing"
    );
    client.shutdown();
    server.shutdown();
}

/// A peer's frames waiting for a module that does not keep up are bounded in bytes: past
/// the peer's receive budget its frames are dropped, and once the module has taken what
/// waits, the peer's frames are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_cannot_queue_more_than_its_receive_budget_for_a_slow_module() {
    const SINK: u16 = 2;
    let chain = Chain::new(2);
    let server = chain
        .start(0, vec![], |config| config.recv_queue_bytes = 4 << 20)
        .await;
    echo(&server);
    // Room for every frame by count: only the byte budget can refuse them.
    let mut sink = server.register(GROUP, SINK, 1_000);
    let client = chain.start(1, vec![chain.peer(0, &server)], |_| {}).await;
    eventually("the connection", || client.peers().len() == 1).await;
    // Four of these fit the budget, with room left for the echo requests.
    let payload = Bytes::from(support::incompressible((1 << 20) - 1_000));
    let server_id = chain.ids[0];
    let send = |count: usize| {
        let (client, payload) = (client.clone(), payload.clone());
        async move {
            for _ in 0..count {
                let frame = client.frame(ProtocolId::request(GROUP, SINK), 0, payload.clone());
                client.send(server_id, &frame).await.expect("sent");
            }
            // Frames are routed in order: once this is answered, every one before it
            // was queued or dropped.
            let echo = ProtocolId::request(GROUP, ECHO);
            client
                .request(server_id, echo, 0, Bytes::from_static(b"sync"))
                .await
                .expect("answered");
        }
    };
    send(20).await;
    assert_eq!(sink.len(), 4, "frames waiting under a 4 MiB budget");
    // The module takes them: the budget is free again for the peer's next frames.
    while sink.try_recv().is_ok() {}
    send(2).await;
    assert_eq!(sink.len(), 2);
    assert_eq!(client.peers(), vec![server_id], "dropping is no offence");
    client.shutdown();
    server.shutdown();
}
