//! The node's operations endpoint, on its metrics address: `/metrics` (Prometheus),
//! `/health` (the process serves: 200) and `/ready` (200 once the node can serve its
//! users, 503 with the reasons otherwise), for Prometheus, load balancers and
//! orchestrators; and the web console (`/`, one page embedded in the binary) with the
//! read-only JSON-RPC it calls (`/rpc`: `stave_rpc::ConsoleRpc`, reads only, one call a
//! request, answered by the node's own methods in process, so the console needs neither the
//! JSON-RPC port nor CORS, and changes nothing).
//!
//! The Prometheus recorder is global to the process (the `metrics` facade has one), so only
//! the first node of a process that asks for metrics serves them; a later one runs without
//! an endpoint rather than fail, its metrics going to that same recorder.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, OnceLock, atomic::Ordering},
    time::Duration,
};

use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Bytes, header, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_process::Collector;
use stave_net::Network;
use stave_node::ChainView;
use stave_rpc::{SyncProgress, net::SYNCING_GAP};
use stave_storage::LmdbStore;
use tokio::net::TcpListener;

use crate::LaunchError;

/// How often histograms are drained into the exported state.
const UPKEEP: Duration = Duration::from_secs(5);

/// Buckets of every `_seconds` histogram (stages, RPC calls, finalization): 0.5 ms to 10
/// s. Exported as Prometheus histograms, not summaries, so nodes' figures add up across
/// a chain (`histogram_quantile` over the sum of their buckets).
const SECONDS_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of the txpool's eviction probes (index entries an eviction looked at).
const PROBE_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0];

/// The console page (HTML, CSS and script in one file: no other request than its own).
const CONSOLE_PAGE: &str = include_str!("console.html");

/// The largest console JSON-RPC request read.
const CONSOLE_REQUEST_BYTES: usize = 16 * 1024;

/// What `/ready`, each scrape and the console look at, known once the node's parts have
/// started.
pub(crate) struct ReadyParts {
    /// The read-only JSON-RPC the console calls.
    pub console: stave_rpc::ConsoleRpc,
    /// The store, whose map use each scrape reports.
    pub store: &'static LmdbStore,
    /// The chain.
    pub view: Arc<ChainView<'static>>,
    /// How far behind the chain is, on a node that takes blocks from others.
    pub sync: Option<SyncProgress>,
    /// The P2P network, on a node that has one.
    pub network: Option<Network>,
    /// The data dir, which must take writes.
    pub datadir: PathBuf,
}

/// Filled in once the node has started; `/ready` answers 503 until then.
pub(crate) type Readiness = Arc<OnceLock<ReadyParts>>;

/// Serves `/metrics`, `/health` and `/ready` on `addr` (port 0: a free one) from tasks of
/// the current runtime, and installs the recorder `/metrics` reads. Returns the address
/// served, or `None` when this process already has a recorder.
pub(crate) fn serve(
    addr: SocketAddr,
    readiness: Readiness,
) -> Result<Option<SocketAddr>, LaunchError> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|listener| {
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .map_err(|source| LaunchError::Metrics { addr, source })?;
    let bound = listener.local_addr().map_err(LaunchError::io(format!(
        "reading the address bound on {addr}"
    )))?;
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .and_then(|builder| {
            builder.set_buckets_for_metric(
                Matcher::Full("stave_txpool_eviction_probes".into()),
                &PROBE_BUCKETS,
            )
        })
        .map_err(|error| LaunchError::Config(format!("histogram buckets: {error}")))?
        .build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!(
            %addr,
            "a metrics recorder is already installed in this process: no metrics endpoint"
        );
        return Ok(None);
    }
    let process = Collector::default();
    process.describe();
    let listener =
        TcpListener::from_std(listener).map_err(LaunchError::io(format!("serving on {bound}")))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(accept(listener, handle, readiness, process));
    Ok(Some(bound))
}

/// Serves each connection on a task of its own.
async fn accept(
    listener: TcpListener,
    handle: PrometheusHandle,
    readiness: Readiness,
    process: Collector,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (handle, readiness, process) = (handle.clone(), readiness.clone(), process.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let (handle, readiness, process) =
                    (handle.clone(), readiness.clone(), process.clone());
                async move {
                    let answer = match request.uri().path() {
                        "/rpc" => console_rpc(request, &readiness).await,
                        _ => answer(&request, &handle, &readiness, &process),
                    };
                    Ok::<_, Infallible>(answer)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The console's JSON-RPC call in `request` (a POST of at most [`CONSOLE_REQUEST_BYTES`]),
/// answered by the node's read methods.
async fn console_rpc(
    request: Request<hyper::body::Incoming>,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST a JSON-RPC call\n".into(),
        );
    }
    let Some(parts) = readiness.get() else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n".into());
    };
    let body = http_body_util::Limited::new(request.into_body(), CONSOLE_REQUEST_BYTES);
    let Ok(body) = http_body_util::BodyExt::collect(body).await else {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a call of at most 16 KiB\n".into(),
        );
    };
    let body = body.to_bytes();
    let Ok(call) = std::str::from_utf8(&body) else {
        return text(StatusCode::BAD_REQUEST, "not UTF-8\n".into());
    };
    let mut response = Response::new(Full::new(Bytes::from(parts.console.call(call).await)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to one request.
fn answer<B>(
    request: &Request<B>,
    handle: &PrometheusHandle,
    readiness: &Readiness,
    process: &Collector,
) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/" => {
            let mut page = text(StatusCode::OK, CONSOLE_PAGE.into());
            page.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            page
        }
        "/metrics" => {
            // Read at each scrape: the process's CPU, memory and descriptors, and the map.
            process.collect();
            if let Some(parts) = readiness.get() {
                let space = parts.store.space();
                metrics::gauge!("stave_storage_map_bytes").set(space.map_bytes as f64);
                metrics::gauge!("stave_storage_map_used_bytes").set(space.used_bytes as f64);
            }
            text(StatusCode::OK, handle.render())
        }
        "/health" => text(StatusCode::OK, "ok\n".into()),
        "/ready" => match readiness.get().map(not_ready) {
            None => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n".into()),
            Some(reasons) if reasons.is_empty() => text(StatusCode::OK, "ready\n".into()),
            Some(reasons) => text(StatusCode::SERVICE_UNAVAILABLE, reasons.join("\n") + "\n"),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /, /rpc, /metrics, /health, /ready\n".into(),
        ),
    }
}

/// Why the node cannot serve its users now: behind the chain, no peer, or a data dir that
/// takes no writes. Empty when it can.
fn not_ready(parts: &ReadyParts) -> Vec<String> {
    let mut reasons = Vec::new();
    match parts.view.head() {
        Ok((head, _)) => {
            if let Some(sync) = &parts.sync {
                let highest = sync.highest_block.load(Ordering::Acquire);
                if highest > head + SYNCING_GAP {
                    reasons.push(format!("syncing: block {head} of {highest}"));
                }
            }
        }
        Err(error) => reasons.push(format!("the chain cannot be read: {error}")),
    }
    if let Some(network) = &parts.network
        && network.peers().is_empty()
    {
        reasons.push("no peer connected".into());
    }
    let probe = parts.datadir.join(".ready-probe");
    match std::fs::write(&probe, b"ready").and_then(|()| std::fs::remove_file(&probe)) {
        Ok(()) => {}
        Err(error) => reasons.push(format!(
            "the data dir {} takes no writes: {error}",
            parts.datadir.display()
        )),
    }
    reasons
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
