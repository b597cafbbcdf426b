//! A loopback TCP proxy that tests put in front of a node's P2P port to break the link
//! the ways real networks do: freeze it (a cable pulled: connections stay open, nothing
//! arrives), cut it (a partition: connections close, new ones are refused) and heal it,
//! or delay every byte in both directions (a distant peer). Used by the network tests
//! (`crates/net/tests`) and, included by path, by the validator tests of
//! `crates/launch/tests`. Runs on the tokio runtime it is started on.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::{mpsc, watch},
};

/// What the proxy does to the traffic it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Link {
    /// Stops forwarding, holding every connection open.
    frozen: bool,
    /// Closes every connection and refuses new ones.
    cut: bool,
    /// Added to every byte's trip, in each direction.
    delay: Duration,
}

/// A proxy listening on a loopback port of its own, forwarding to one target.
pub struct Proxy {
    /// Where it listens: dial this instead of the target.
    pub address: SocketAddr,
    link: watch::Sender<Link>,
}

impl Proxy {
    /// Starts a proxy to `target` on a free loopback port; it forwards until dropped (or
    /// its runtime stops).
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address");
        let (link, watching) = watch::channel(Link::default());
        tokio::spawn(async move {
            let mut closed = watching.clone();
            loop {
                let inbound = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((inbound, _)) => inbound,
                        Err(_) => continue,
                    },
                    // The proxy was dropped: stop listening.
                    Err(_) = closed.changed() => return,
                };
                // Refused as a partition's firewall would: closed at once.
                if watching.borrow().cut {
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
                let (from_in, to_in) = inbound.into_split();
                let (from_out, to_out) = outbound.into_split();
                tokio::spawn(forward(from_in, to_out, watching.clone()));
                tokio::spawn(forward(from_out, to_in, watching.clone()));
            }
        });
        Self { address, link }
    }

    /// Stops forwarding in both directions, keeping every connection open: a link that
    /// went dead without a FIN or RST.
    pub fn freeze(&self) {
        self.link.send_modify(|link| link.frozen = true);
    }

    /// Closes every connection through the proxy and refuses new ones until
    /// [`Proxy::heal`]: the two sides are partitioned.
    pub fn cut(&self) {
        self.link.send_modify(|link| link.cut = true);
    }

    /// Undoes [`Proxy::freeze`] and [`Proxy::cut`]: new connections go through again.
    pub fn heal(&self) {
        self.link.send_modify(|link| {
            link.cut = false;
            link.frozen = false;
        });
    }

    /// Delays every byte by `delay` in each direction from now on (without limiting the
    /// bandwidth: bytes read meanwhile follow at their own time).
    pub fn delay(&self, delay: Duration) {
        self.link.send_modify(|link| link.delay = delay);
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read, until either side closes
/// or the link is cut; while frozen, holds both open and forwards nothing.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: watch::Receiver<Link>) {
    // Chunks wait here for their time: reading goes on meanwhile, so a delay adds latency
    // without throttling.
    let (queue, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = {
        let link = link.clone();
        async move {
            let mut buffer = vec![0u8; 64 << 10];
            while let Ok(read @ 1..) = from.read(&mut buffer).await {
                let at = Instant::now() + link.borrow().delay;
                if queue.send((at, buffer[..read].to_vec())).is_err() {
                    return;
                }
            }
        }
    };
    let writer = {
        let mut link = link.clone();
        async move {
            while let Some((at, chunk)) = due.recv().await {
                tokio::time::sleep_until(at.into()).await;
                if link.wait_for(|link| !link.frozen).await.is_err() {
                    return;
                }
                if to.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        }
    };
    let mut cut = link;
    tokio::select! {
        // The writer ends once the reader has ended and everything read is written.
        ((), ()) = async { tokio::join!(reader, writer) } => {}
        // Dropping both halves closes the connection on both sides.
        _ = cut.wait_for(|link| link.cut) => {}
    }
}
