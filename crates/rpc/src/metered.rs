//! Per-method JSON-RPC metrics, recorded around every call, batched calls one by one:
//! `stave_rpc_requests_total`, `stave_rpc_errors_total` and the histogram
//! `stave_rpc_request_seconds`, each labelled with the method. Only the methods the node
//! serves are label values; any other name counts as `unknown`, so no client can grow the
//! label set.

use std::{collections::HashSet, future::Future, sync::Arc, time::Instant};

use jsonrpsee::{
    core::middleware::{Batch, BatchEntry, Notification, RpcServiceT},
    server::{BatchResponseBuilder, MethodResponse},
    types::Request,
};

/// The label of a method the node does not serve.
const UNKNOWN: &str = "unknown";

/// An RPC service (jsonrpsee's, or another layer) whose calls are metered.
#[derive(Debug, Clone)]
pub(crate) struct Metered<S> {
    inner: S,
    /// The methods served: the only label values besides [`UNKNOWN`].
    methods: Arc<HashSet<&'static str>>,
    /// The largest answer to a batch (the server's own limit).
    max_response_bytes: usize,
}

impl<S> Metered<S> {
    /// `inner`, metered, serving `methods`; a batch's answer holds at most
    /// `max_response_bytes`.
    pub(crate) fn new(
        inner: S,
        methods: Arc<HashSet<&'static str>>,
        max_response_bytes: usize,
    ) -> Self {
        Self {
            inner,
            methods,
            max_response_bytes,
        }
    }

    /// The label `method` is counted under.
    fn label(&self, method: &str) -> &'static str {
        self.methods.get(method).copied().unwrap_or(UNKNOWN)
    }
}

impl<S> RpcServiceT for Metered<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Send
        + Sync
        + Clone
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let method = self.label(request.method_name());
        let start = Instant::now();
        let answer = self.inner.call(request);
        async move {
            let response = answer.await;
            metrics::counter!("stave_rpc_requests_total", "method" => method).increment(1);
            if response.is_error() {
                metrics::counter!("stave_rpc_errors_total", "method" => method).increment(1);
            }
            metrics::histogram!("stave_rpc_request_seconds", "method" => method)
                .record(start.elapsed().as_secs_f64());
            response
        }
    }

    /// Runs each call of the batch through [`Metered::call`]: jsonrpsee's own batch
    /// handling calls its innermost service for each, past this layer (its docs ask a
    /// layer that meters calls to do this), and the answer is built as it builds it.
    fn batch<'a>(&self, batch: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let service = self.clone();
        async move {
            let mut answers = BatchResponseBuilder::new_with_limit(service.max_response_bytes);
            let mut notified = false;
            for entry in batch {
                let answer = match entry {
                    Ok(BatchEntry::Call(request)) => service.call(request).await,
                    Ok(BatchEntry::Notification(notification)) => {
                        notified = true;
                        service.notification(notification).await;
                        continue;
                    }
                    Err(refused) => {
                        let (error, id) = refused.into_parts();
                        MethodResponse::error(id, error)
                    }
                };
                if let Err(too_large) = answers.append(answer) {
                    return too_large;
                }
            }
            // Notifications alone get no answer; an empty batch is an invalid request.
            if answers.is_empty() && notified {
                MethodResponse::notification()
            } else {
                MethodResponse::from_batch(answers.finish())
            }
        }
    }

    fn notification<'a>(
        &self,
        notification: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.inner.notification(notification)
    }
}
