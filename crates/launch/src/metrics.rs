//! The Prometheus exporter. Its recorder is global to the process (the `metrics` facade
//! has one), so only the first node of a process that asks for metrics serves them; a
//! later one runs without an endpoint rather than fail, its metrics going to that same
//! recorder.

use std::net::{SocketAddr, TcpListener};

use metrics_exporter_prometheus::PrometheusBuilder;

use crate::LaunchError;

/// Serves metrics on `addr` (port 0: a free one) from tasks of the current runtime, and
/// installs the recorder they read. Returns the address served, or `None` when this
/// process already has a recorder.
pub(crate) fn serve(addr: SocketAddr) -> Result<Option<SocketAddr>, LaunchError> {
    let error = |source| LaunchError::Metrics { addr, source };
    let addr = match addr.port() {
        // The exporter does not say which port it bound: take one the OS says is free.
        0 => TcpListener::bind(addr)
            .and_then(|listener| listener.local_addr())
            .map_err(LaunchError::io(format!("finding a free port on {addr}")))?,
        _ => addr,
    };
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(addr)
        .build()
        .map_err(error)?;
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!(
            %addr,
            "a metrics recorder is already installed in this process: no metrics endpoint"
        );
        return Ok(None);
    }
    tokio::spawn(exporter);
    Ok(Some(addr))
}
