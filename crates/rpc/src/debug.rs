//! `debug_trace*`: go-ethereum's transaction traces (the struct logger, `callTracer`,
//! `prestateTracer`, `4byteTracer`, `noopTracer`, `flatCallTracer`, `muxTracer`), made by
//! revm-inspectors (see [`crate::trace`] for how blocks and calls are traced). JavaScript
//! tracers are refused. Also `debug_getRaw*`: a block's header, the block, a transaction
//! and a block's receipts in their consensus encodings.

use alloy_consensus::ReceiptWithBloom;
use alloy_eips::eip2718::Encodable2718 as _;
use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{B256, Bytes};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_rpc_types_trace::geth::{
    GethDebugTracingCallOptions, GethDebugTracingOptions, GethTrace, TraceResult,
};
use jsonrpsee::{
    core::{RpcResult, async_trait},
    proc_macros::rpc,
};
use stave_exec::{Tracer, TxTrace};

use stave_storage::read;

use crate::{
    convert::{StoredBlock, receipt_envelope},
    error::RpcError,
    eth::call::CallOverrides,
    rpc::{Outcome, Rpc},
    trace::tag,
};

/// `debug_trace*` methods.
#[rpc(server)]
pub trait DebugApi {
    /// An included transaction, traced on the state the transactions before it left.
    #[method(name = "debug_traceTransaction")]
    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace>;
    /// A call, traced on a block's state.
    #[method(name = "debug_traceCall")]
    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace>;
    /// Every transaction of a block by number or tag.
    #[method(name = "debug_traceBlockByNumber")]
    async fn trace_block_by_number(
        &self,
        number: BlockNumberOrTag,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>>;
    /// Every transaction of a block by hash.
    #[method(name = "debug_traceBlockByHash")]
    async fn trace_block_by_hash(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>>;
    /// A block's header RLP, exactly as hashed.
    #[method(name = "debug_getRawHeader")]
    async fn raw_header(&self, block: BlockId) -> RpcResult<Bytes>;
    /// A block as RLP: its header, its transactions (EIP-2718, as in a block body) and an
    /// empty uncle list.
    #[method(name = "debug_getRawBlock")]
    async fn raw_block(&self, block: BlockId) -> RpcResult<Bytes>;
    /// An included or pending transaction's signed EIP-2718 bytes.
    #[method(name = "debug_getRawTransaction")]
    async fn raw_transaction(&self, hash: B256) -> RpcResult<Bytes>;
    /// A block's receipts, each in its EIP-2718 envelope.
    #[method(name = "debug_getRawReceipts")]
    async fn raw_receipts(&self, block: BlockId) -> RpcResult<Vec<Bytes>>;
}

/// The error for a block that is not stored (or not visible yet).
fn not_found(number: u64) -> RpcError {
    RpcError::InvalidParams(format!("block {number} not found"))
}

/// The tracer `options` name (the struct logger when none).
fn geth(options: Option<GethDebugTracingOptions>) -> Tracer {
    Tracer::Geth(Box::new(options.unwrap_or_default()))
}

/// The geth trace in `trace`.
fn geth_trace(trace: TxTrace) -> Outcome<GethTrace> {
    match trace {
        TxTrace::Geth(trace) => Ok(*trace),
        _ => Err(RpcError::Internal(
            "a geth tracer made another trace".into(),
        )),
    }
}

impl Rpc {
    /// Stored block `block`; an error naming it when not stored.
    fn stored(&self, block: BlockId) -> Outcome<StoredBlock> {
        let number = self.number_of(Some(block))?;
        self.visible_block(number, false)?
            .ok_or_else(|| not_found(number))
    }

    /// Block `block`'s header RLP, exactly as hashed, without reading its body; only once
    /// the head reaches it, as [`Rpc::visible_block`] shows blocks.
    fn raw_header_of(&self, block: BlockId) -> Outcome<Vec<u8>> {
        let number = self.number_of(Some(block))?;
        if number > self.head()? {
            return Err(not_found(number));
        }
        read::encoded_header(self.ctx.view.store(), number)
            .map_err(RpcError::internal)?
            .ok_or_else(|| not_found(number))
    }

    /// Every transaction of block `block` traced with `options`, each with its hash.
    async fn trace_block_geth(
        &self,
        block: BlockId,
        options: Option<GethDebugTracingOptions>,
    ) -> Outcome<Vec<TraceResult>> {
        let number = self.number_of(Some(block))?;
        let tracer = geth(options);
        self.evm(move |rpc, deadline| {
            let (block, traces) = rpc
                .trace_stored(number, |count| 0..count, &tracer, deadline)?
                .ok_or_else(|| not_found(number))?;
            block
                .txs
                .iter()
                .zip(traces)
                .map(|((tx, _), trace)| {
                    Ok(TraceResult::Success {
                        result: geth_trace(trace)?,
                        tx_hash: Some(tx.hash()),
                    })
                })
                .collect()
        })
        .await
    }
}

#[async_trait]
impl DebugApiServer for Rpc {
    async fn trace_transaction(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<GethTrace> {
        let tracer = geth(options);
        Ok(self
            .evm(move |rpc, deadline| geth_trace(rpc.trace_included(hash, &tracer, deadline)?))
            .await?)
    }

    async fn trace_call(
        &self,
        request: TransactionRequest,
        block: Option<BlockId>,
        options: Option<GethDebugTracingCallOptions>,
    ) -> RpcResult<GethTrace> {
        let options = options.unwrap_or_default();
        let number = self.number_of(block)?;
        let overrides = CallOverrides {
            state: options.state_overrides,
            block: options.block_overrides.map(Box::new),
        };
        let tracer = geth(Some(options.tracing_options));
        Ok(self
            .evm(move |rpc, deadline| {
                geth_trace(rpc.trace_request(&request, number, &overrides, &tracer, deadline)?)
            })
            .await?)
    }

    async fn trace_block_by_number(
        &self,
        number: BlockNumberOrTag,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>> {
        Ok(self.trace_block_geth(tag(number), options).await?)
    }

    async fn trace_block_by_hash(
        &self,
        hash: B256,
        options: Option<GethDebugTracingOptions>,
    ) -> RpcResult<Vec<TraceResult>> {
        Ok(self.trace_block_geth(BlockId::from(hash), options).await?)
    }

    async fn raw_header(&self, block: BlockId) -> RpcResult<Bytes> {
        Ok(self
            .heavy(move |rpc| Ok(Bytes::from(rpc.raw_header_of(block)?)))
            .await?)
    }

    async fn raw_block(&self, block: BlockId) -> RpcResult<Bytes> {
        Ok(self
            .heavy(move |rpc| {
                let stored = rpc.stored(block)?;
                let header = rpc.raw_header_of(block)?;
                let txs: Vec<_> = stored.txs.iter().map(|(tx, _)| tx.envelope()).collect();
                let mut body = Vec::new();
                alloy_rlp::encode_list::<_, alloy_consensus::TxEnvelope>(&txs, &mut body);
                // No uncles.
                alloy_rlp::encode_list::<u8, u8>(&[], &mut body);
                let mut out = Vec::with_capacity(header.len() + body.len() + 9);
                alloy_rlp::Header {
                    list: true,
                    payload_length: header.len() + body.len(),
                }
                .encode(&mut out);
                out.extend_from_slice(&header);
                out.extend_from_slice(&body);
                Ok(Bytes::from(out))
            })
            .await?)
    }

    async fn raw_transaction(&self, hash: B256) -> RpcResult<Bytes> {
        Ok(self
            .heavy(move |rpc| {
                rpc.raw_transaction(hash)?
                    .ok_or_else(|| RpcError::InvalidParams(format!("transaction {hash} not found")))
            })
            .await?)
    }

    async fn raw_receipts(&self, block: BlockId) -> RpcResult<Vec<Bytes>> {
        Ok(self
            .heavy(move |rpc| {
                let stored = rpc.stored(block)?;
                let receipts = read::receipts(rpc.ctx.view.store(), stored.header.number)
                    .map_err(RpcError::internal)?
                    .unwrap_or_default();
                Ok(receipts
                    .iter()
                    .zip(&stored.txs)
                    .map(|(receipt, (tx, _))| {
                        let with_bloom = ReceiptWithBloom {
                            receipt: receipt.receipt.clone(),
                            logs_bloom: receipt.logs_bloom,
                        };
                        Bytes::from(receipt_envelope(tx.tx_type(), with_bloom).encoded_2718())
                    })
                    .collect())
            })
            .await?)
    }
}
