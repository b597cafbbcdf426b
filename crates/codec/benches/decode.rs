//! Decoding a 2,500-tx transfer block body three ways, hashes included: a standard RLP
//! list walked item by item, an RLP header scan followed by parallel decoding, and the
//! offset-indexed list decoded in parallel. Isolates the decode stage's cost per body.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use stave_codec::{decode_transactions, encode_transactions, rlp_list};
use stave_sdk::{TxBuilder, Workload, signed_workload};

const BLOCK_TXS: usize = 2_500;

fn decode(c: &mut Criterion) {
    let txs = signed_workload(
        Workload::Transfer,
        &TxBuilder::new(1337, 1_000_000_000),
        BLOCK_TXS,
    )
    .expect("signs");
    let rlp = rlp_list::encode_rlp_list(&txs);
    let indexed = encode_transactions(&txs).expect("encodes");
    let mut group = c.benchmark_group("decode_2500_transfers");
    group.bench_function("rlp_serial", |b| {
        b.iter(|| rlp_list::decode_rlp_list_serial(&rlp).expect("decodes"))
    });
    group.bench_function("rlp_scan_parallel", |b| {
        b.iter(|| rlp_list::decode_rlp_list_scan_parallel(&rlp).expect("decodes"))
    });
    group.bench_function("indexed_parallel", |b| {
        b.iter(|| decode_transactions(&indexed).expect("decodes"))
    });
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
