//! The accept loop: jsonrpsee serves each connection, while this loop holds the limits
//! jsonrpsee's own loop does not: open connections in all and per IP address (one more is
//! closed at once), a connection closed after [`RpcConfig::idle_timeout`] with no byte
//! either way, and a pause after a failed `accept` (out of file descriptors) instead of a
//! spin.

use std::{
    collections::{HashMap, HashSet},
    io,
    net::IpAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use jsonrpsee::{
    Methods,
    core::middleware::RpcServiceBuilder,
    server::{Server, ServerConfig, StopHandle, serve_with_graceful_shutdown},
};
use parking_lot::Mutex;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};

use crate::{config::RpcConfig, metered::Metered};

/// How long the loop waits after `accept` fails before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Open connections per IP address, shared by the loop and the connections' tasks.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, u32>>);

/// One open connection of `ip`, counted in [`PerIp`] until dropped.
struct IpSlot {
    per_ip: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    /// A slot for one more connection from `ip`, unless it holds `max` already.
    fn take(self: &Arc<Self>, ip: IpAddr, max: u32) -> Option<IpSlot> {
        let mut open = self.0.lock();
        let count = open.entry(ip).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            per_ip: self.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.per_ip.0.lock();
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Accepts connections on `listener` and serves `methods` (with their names, the labels
/// of their metrics) on each, as `server` says, within `config`'s limits, until `stop`
/// says the server stops.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    server: ServerConfig,
    (methods, names): (Methods, Arc<HashSet<&'static str>>),
    stop: StopHandle,
    config: RpcConfig,
) {
    // `NodeConfig::check` refused origins the layer cannot use.
    let cors = crate::cors::layer(&config.cors_origins).unwrap_or_default();
    let max_response_bytes = config.max_response_bytes as usize;
    let service = Server::builder()
        .set_config(server)
        .set_http_middleware(tower::ServiceBuilder::new().option_layer(cors))
        .set_rpc_middleware(
            RpcServiceBuilder::new()
                .layer_fn(move |service| Metered::new(service, names.clone(), max_response_bytes)),
        )
        .to_service_builder();
    let total = Arc::new(Semaphore::new(config.max_connections as usize));
    let per_ip = Arc::new(PerIp::default());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.clone().shutdown() => return,
        };
        let (socket, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "RPC accept failed; pausing");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = total.clone().try_acquire_owned() else {
            tracing::debug!(%remote, "RPC connection refused: too many open");
            continue;
        };
        let Some(slot) = per_ip.take(remote.ip(), config.max_connections_per_ip) else {
            tracing::debug!(%remote, "RPC connection refused: too many from its address");
            continue;
        };
        let service = service.clone().build(methods.clone(), stop.clone());
        let stopped = stop.clone().shutdown();
        let idle_timeout = config.idle_timeout;
        tokio::spawn(async move {
            let _held: (OwnedSemaphorePermit, IpSlot) = (permit, slot);
            let _ = socket.set_nodelay(true);
            let (io, last) = Watched::new(socket);
            tokio::select! {
                _ = serve_with_graceful_shutdown(io, service, stopped) => {}
                () = idle(&last, idle_timeout) => {}
            }
        });
    }
}

/// Resolves once `last` (see [`Watched`]) is `timeout` old.
async fn idle(last: &Activity, timeout: Duration) {
    loop {
        let since = last.since();
        if since >= timeout {
            return;
        }
        tokio::time::sleep(timeout - since).await;
    }
}

/// When a connection last moved a byte.
struct Activity {
    start: Instant,
    /// Milliseconds from `start`.
    last: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    fn since(&self) -> Duration {
        self.start
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }
}

/// A socket that records when it last read or wrote a byte.
struct Watched {
    socket: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    fn new(socket: TcpStream) -> (Self, Arc<Activity>) {
        let activity = Arc::new(Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        });
        (
            Self {
                socket,
                activity: activity.clone(),
            },
            activity,
        )
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.socket).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.socket).poll_write(cx, data);
        if let Poll::Ready(Ok(written)) = polled
            && written > 0
        {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}
