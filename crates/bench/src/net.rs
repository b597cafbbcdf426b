//! `stave bench net`: what compression and compact blocks save on the wire, what Snappy
//! costs, and loopback throughput between two nodes over mutual TLS with compression off
//! and on.

use std::{
    collections::HashSet,
    fmt,
    time::{Duration, Instant},
};

use bytes::Bytes;
use serde::Serialize;
use stave_codec::{encode_block, encode_indexed};
use stave_net::{
    BlockParts, ChainCa, Frame, FrameConfig, Network, NetworkConfig, NodeTls, ProtocolId,
    StaticPeer, encode_frame, frame::VERSION,
};
use stave_primitives::{Block, Header, SignedTx};
use stave_sdk::{TxBuilder, Workload, signed_workload};

use crate::{
    BenchError, CHAIN_ID, GAS_PRICE, codec::blocks_of_txs, ensure, median, median_time, ratio,
};

/// The payloads `stave bench net` measures, and how much it sends.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct NetConfig {
    /// Transactions in the transfer block.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_500))]
    pub block_txs: usize,
    /// Transactions in the ERC-20 block.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000))]
    pub erc20_txs: usize,
    /// Transactions in a gossip batch.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000))]
    pub batch_txs: usize,
    /// Timed runs of each compression; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 30))]
    pub runs: usize,
    /// Megabytes of payload each loopback run sends. A run must outlast its start: the
    /// sender first fills the peer's send queue (1,024 frames, ~280 MB of transfer
    /// blocks) as fast as it can encode, and a run shorter than that times the burst,
    /// not the flow.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1_000))]
    pub loopback_mb: usize,
    /// Loopback runs per mode, interleaved; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 3))]
    pub loopback_runs: usize,
}

/// One payload's sizes and Snappy speeds.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadReport {
    /// Which payload.
    pub payload: &'static str,
    /// The frame as it would go uncompressed (header included).
    pub raw_bytes: usize,
    /// The frame as sent (compressed above 1 KiB; for the compact block, its compact form).
    pub wire_bytes: usize,
    /// Wire over raw.
    pub ratio: f64,
    /// Snappy compression speed.
    pub compress_mb_s: f64,
    /// Snappy decompression speed.
    pub decompress_mb_s: f64,
}

/// Loopback throughput of payload bytes, compression off and on.
#[derive(Debug, Clone, Serialize)]
pub struct LoopbackReport {
    /// Which payload.
    pub payload: &'static str,
    /// Compression off.
    pub mb_s_plain: f64,
    /// Compression on.
    pub mb_s_compressed: f64,
    /// Throughput lost to compression: 1 - compressed / plain.
    pub compression_cost: f64,
}

/// What the net bench measured: its JSON line, and as text its table.
#[derive(Debug, Clone, Serialize)]
pub struct NetReport {
    /// Sizes and Snappy speeds per payload.
    pub payloads: Vec<PayloadReport>,
    /// Loopback throughput of transfer blocks.
    pub loopback: LoopbackReport,
    /// Loopback throughput of ERC-20 blocks.
    pub loopback_erc20: LoopbackReport,
}

fn block(txs: Vec<SignedTx>) -> Result<Vec<u8>, BenchError> {
    let mut block = Block {
        header: Header {
            number: 1,
            // Gossip refuses more transactions than the gas limit allows.
            gas_limit: stave_primitives::DEV_GAS_LIMIT,
            ..Header::default()
        },
        transactions: txs,
    };
    block.header.transactions_root = block.compute_transactions_root();
    Ok(encode_block(&block)?)
}

fn frame(payload: Bytes) -> Frame {
    Frame {
        version: VERSION,
        protocol_id: ProtocolId::request(0, 1),
        packet_type: 0,
        seq: 0,
        payload,
    }
}

fn mb_s(bytes: usize, time: Duration) -> f64 {
    ratio(bytes as f64 / 1e6, time.as_secs_f64())
}

/// Sizes and Snappy speeds of `payload`; `raw_of` is what its ratio is taken against
/// (the payload itself, or the full block a compact block stands for).
fn measure(
    name: &'static str,
    payload: &[u8],
    raw_of: &[u8],
    runs: usize,
) -> Result<PayloadReport, BenchError> {
    let config = FrameConfig::default();
    let raw_bytes = encode_frame(
        &frame(Bytes::copy_from_slice(raw_of)),
        &FrameConfig {
            compress_above: None,
            ..config
        },
    )?
    .len();
    let wire_bytes = encode_frame(&frame(Bytes::copy_from_slice(payload)), &config)?.len();
    let compressed = snap::raw::Encoder::new().compress_vec(payload)?;
    let decompressed = snap::raw::Decoder::new().decompress_vec(&compressed)?;
    ensure(decompressed == payload, || {
        "Snappy round trip differs".into()
    })?;
    let compress = median_time(runs, || snap::raw::Encoder::new().compress_vec(payload));
    let decompress = median_time(runs, || {
        snap::raw::Decoder::new().decompress_vec(&compressed)
    });
    Ok(PayloadReport {
        payload: name,
        raw_bytes,
        wire_bytes,
        ratio: ratio(wire_bytes as f64, raw_bytes as f64),
        compress_mb_s: mb_s(payload.len(), compress),
        decompress_mb_s: mb_s(payload.len(), decompress),
    })
}

/// Two nodes of one chain on loopback, the second dialling the first.
async fn pair(ca: &ChainCa, frame: FrameConfig) -> Result<(Network, Network), BenchError> {
    let identities = [ca.issue("node0.stave")?, ca.issue("node1.stave")?];
    let ids = [identities[0].node_id()?, identities[1].node_id()?];
    let allowed: HashSet<_> = ids.into();
    let start = |i: usize, peers: Vec<StaticPeer>| {
        let mut config = NetworkConfig::new(([127, 0, 0, 1], 0).into(), peers);
        config.frame = frame;
        let tls = NodeTls::new(&ca.certificate(), &identities[i], allowed.clone());
        async move { Ok::<_, BenchError>(Network::start(config, tls?, ids[i]).await?) }
    };
    let receiver = start(0, vec![]).await?;
    let sender = start(
        1,
        vec![StaticPeer {
            name: "node0.stave".into(),
            address: receiver.local_addr(),
        }],
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sender.peers().is_empty() || receiver.peers().is_empty() {
        ensure(Instant::now() < deadline, || {
            "loopback peers did not connect".into()
        })?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((sender, receiver))
}

/// Sends `payload` from one node to the other until `total` bytes have arrived; returns
/// the wall time from the first send to the last arrival.
async fn loopback(
    ca: &ChainCa,
    compress: bool,
    payload: &Bytes,
    total: usize,
) -> Result<Duration, BenchError> {
    let config = FrameConfig {
        compress_above: compress.then_some(1024),
        ..FrameConfig::default()
    };
    let (sender, receiver) = pair(ca, config).await?;
    let mut inbox = receiver.register(0, 1, 4096);
    let frames = total.div_ceil(payload.len());
    let peer = receiver.local_id();
    let start = Instant::now();
    let sending = {
        let sender = sender.clone();
        let frame = frame(payload.clone());
        tokio::spawn(async move {
            for _ in 0..frames {
                sender.send(peer, &frame).await?;
            }
            Ok::<_, BenchError>(())
        })
    };
    for _ in 0..frames {
        let got = tokio::time::timeout(Duration::from_secs(60), inbox.recv())
            .await
            .map_err(|_| BenchError::Check("loopback stalled".into()))?
            .ok_or_else(|| BenchError::Check("loopback closed".into()))?;
        ensure(got.frame.payload.len() == payload.len(), || {
            "a loopback frame changed size".into()
        })?;
    }
    let elapsed = start.elapsed();
    sending.await??;
    sender.shutdown();
    receiver.shutdown();
    Ok(elapsed)
}

async fn loopback_report(
    ca: &ChainCa,
    name: &'static str,
    payload: &Bytes,
    config: &NetConfig,
) -> Result<LoopbackReport, BenchError> {
    let total = config.loopback_mb << 20;
    let (mut plain, mut compressed) = (Vec::new(), Vec::new());
    for _ in 0..config.loopback_runs.max(1) {
        plain.push(loopback(ca, false, payload, total).await?);
        compressed.push(loopback(ca, true, payload, total).await?);
    }
    let sent = total.div_ceil(payload.len()) * payload.len();
    let mb_s_plain = mb_s(sent, median(plain));
    let mb_s_compressed = mb_s(sent, median(compressed));
    Ok(LoopbackReport {
        payload: name,
        mb_s_plain,
        mb_s_compressed,
        compression_cost: ratio(mb_s_plain - mb_s_compressed, mb_s_plain),
    })
}

/// Runs the net bench.
pub fn run(config: &NetConfig) -> Result<NetReport, BenchError> {
    let (transfers, erc20) = blocks_of_txs(config.block_txs, config.erc20_txs)?;
    let builder = TxBuilder::new(CHAIN_ID, GAS_PRICE);
    let batch: Vec<Vec<u8>> = signed_workload(Workload::Transfer, &builder, config.batch_txs)?
        .iter()
        .map(SignedTx::encoded)
        .collect();
    let transfer_block = block(transfers)?;
    let erc20_block = block(erc20)?;
    let tx_batch = encode_indexed(&batch, |tx, out| out.extend_from_slice(tx))?;
    let compact = BlockParts::from_block(&transfer_block)?.compact().encode();
    let runs = config.runs;
    let payloads = vec![
        measure("transfer_block", &transfer_block, &transfer_block, runs)?,
        measure("erc20_block", &erc20_block, &erc20_block, runs)?,
        measure("tx_batch", &tx_batch, &tx_batch, runs)?,
        measure("compact_transfer_block", &compact, &transfer_block, runs)?,
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("starting the async runtime"))?;
    let ca = ChainCa::generate("stave bench chain")?;
    let (loopback, loopback_erc20) = runtime.block_on(async {
        let transfer =
            loopback_report(&ca, "transfer_block", &Bytes::from(transfer_block), config).await?;
        let erc20 = loopback_report(&ca, "erc20_block", &Bytes::from(erc20_block), config).await?;
        Ok::<_, BenchError>((transfer, erc20))
    })?;
    Ok(NetReport {
        payloads,
        loopback,
        loopback_erc20,
    })
}

impl fmt::Display for NetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<24} {:>10} {:>10} {:>7} {:>12} {:>14}",
            "payload", "raw B", "wire B", "ratio", "compress MB/s", "decompress MB/s"
        )?;
        for p in &self.payloads {
            writeln!(
                f,
                "{:<24} {:>10} {:>10} {:>7.3} {:>12.1} {:>14.1}",
                p.payload, p.raw_bytes, p.wire_bytes, p.ratio, p.compress_mb_s, p.decompress_mb_s
            )?;
        }
        for l in [&self.loopback, &self.loopback_erc20] {
            writeln!(
                f,
                "loopback {:<15} plain {:>8.1} MB/s  compressed {:>8.1} MB/s  cost {:>6.1}%",
                l.payload,
                l.mb_s_plain,
                l.mb_s_compressed,
                l.compression_cost * 100.0
            )?;
        }
        Ok(())
    }
}
