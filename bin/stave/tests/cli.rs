//! The `stave` binary as a user runs it: exit codes, one-line reasons, JSON output.

use std::process::{Command, Output};

use alloy_consensus::{Signed, TxEnvelope};
use alloy_eips::eip2718::{Decodable2718, Encodable2718};
use alloy_primitives::{Signature, U256};

fn stave(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(args)
        .output()
        .expect("stave runs")
}

/// A valid EIP-155 transfer from the ethereum-tests vectors (Vitalik_1, chain id 1).
const VALID_TX: &str = "0xf864808504a817c800825208943535353535353535353535353535353535353535808025a0044852b2a670ade5407e78fb2863c51de9fcb96542a07186fe3aeda6bb8a116da0044852b2a670ade5407e78fb2863c51de9fcb96542a07186fe3aeda6bb8a116d";

/// Asserts the run failed with exit code 1 and one line on stderr naming `reason`.
fn assert_refused(out: &Output, reason: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(reason), "expected {reason:?} in {stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn inspect_prints_one_json_line_for_a_valid_tx() {
    let out = stave(&["tx", "inspect", "--chain-id", "1", VALID_TX]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        json["hash"],
        "0xb1e2188bc490908a78184e4818dca53684167507417fdb4c09c2d64d32a9896a"
    );
    assert_eq!(json["from"], "0xf0f6f18bca1b28cd68e4357452947e021241e9ce");
    assert_eq!(json["chain_id"], 1);
    assert_eq!(json["gas_limit"], 21000);
}

#[test]
fn inspect_refuses_empty_garbage_and_truncated_input() {
    assert_refused(&stave(&["tx", "inspect", ""]), "empty transaction");
    assert_refused(&stave(&["tx", "inspect", "0xzz"]), "not valid hex");
    assert_refused(
        &stave(&["tx", "inspect", "0xdeadbeef"]),
        "malformed transaction",
    );
    let truncated = &VALID_TX[..VALID_TX.len() - 2];
    assert_refused(
        &stave(&["tx", "inspect", truncated]),
        "malformed transaction",
    );
}

#[test]
fn inspect_refuses_a_wrong_chain_id() {
    let out = stave(&["tx", "inspect", "--chain-id", "1337", VALID_TX]);
    assert_refused(&out, "chain id 1 does not match chain id 1337");
}

#[test]
fn inspect_refuses_an_oversize_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    std::fs::write(&path, vec![0xf8u8; 10 * 1024 * 1024]).expect("write");
    let out = stave(&["tx", "inspect", &format!("@{}", path.display())]);
    assert_refused(&out, "more than the limit");
}

#[test]
fn inspect_refuses_a_high_s_signature() {
    let bytes = hex::decode(&VALID_TX[2..]).expect("hex");
    let TxEnvelope::Legacy(signed) = TxEnvelope::decode_2718_exact(&bytes).expect("valid") else {
        panic!("vector is a legacy tx");
    };
    let (tx, sig, _) = signed.into_parts();
    // The same signature, mirrored: s' = n - s with the parity flipped still verifies, but
    // EIP-2 forbids it.
    let n = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .expect("curve order");
    let high = Signature::new(sig.r(), n - sig.s(), !sig.v());
    let mirrored = TxEnvelope::Legacy(Signed::new_unhashed(tx, high)).encoded_2718();
    let out = stave(&["tx", "inspect", &format!("0x{}", hex::encode(mirrored))]);
    assert_refused(&out, "above secp256k1n/2");
}

#[test]
fn genesis_new_writes_a_loadable_genesis_and_keys_show_matches_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("genesis.json");
    let out = stave(&[
        "genesis",
        "new",
        "--accounts",
        "4",
        "--out",
        path.to_str().expect("utf8"),
    ]);
    assert!(out.status.success());
    let genesis: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("written")).expect("json");
    assert_eq!(genesis["config"]["chainId"], 1337);
    let alloc = genesis["alloc"].as_object().expect("alloc");
    assert_eq!(alloc.len(), 4);
    let out = stave(&["keys", "show", "--dev", "--index", "3"]);
    let key: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let address = key["address"].as_str().expect("address");
    assert!(
        alloc.keys().any(|a| a.eq_ignore_ascii_case(address)),
        "{address} funded"
    );
}

#[test]
fn keys_show_derives_the_hardhat_accounts_from_the_dev_mnemonic() {
    let out = stave(&["keys", "show", "--mnemonic", "--count", "2"]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0]["address"],
        "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    );
    assert_eq!(
        lines[1]["address"],
        "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"
    );
}

#[test]
fn keys_new_writes_a_private_file_that_keys_show_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node.key");
    let out = stave(&["keys", "new", "--out", path.to_str().expect("utf8")]);
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        made.get("private_key").is_none(),
        "secret not printed when written to a file"
    );
    let out = stave(&["keys", "show", "--key-file", path.to_str().expect("utf8")]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(made["address"], shown["address"]);
    let again = stave(&["keys", "new", "--out", path.to_str().expect("utf8")]);
    assert_refused(&again, "must not exist yet");
}

/// A 3-transaction block, encoded, with a correct transactions root.
fn encoded_block() -> Vec<u8> {
    use stave_primitives::{Block, Header};
    let builder = stave_sdk::TxBuilder::new(1337, 7);
    let transactions =
        stave_sdk::signed_workload(stave_sdk::Workload::Transfer, &builder, 3).expect("signs");
    let mut block = Block {
        header: Header {
            number: 42,
            // Room for the 3 transfers: a block holding more than its gas limit allows
            // is refused before its transactions are decoded.
            gas_limit: 30_000_000,
            ..Header::default()
        },
        transactions,
    };
    block.header.transactions_root = block.compute_transactions_root();
    stave_codec::encode_block(&block).expect("encodes")
}

#[test]
fn block_inspect_summarises_a_valid_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("block.bin");
    std::fs::write(&path, encoded_block()).expect("write");
    let out = stave(&["block", "inspect", &format!("@{}", path.display())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["number"], 42);
    assert_eq!(json["tx_count"], 3);
    assert_eq!(json["transactions_root_ok"], true);
}

#[test]
fn block_inspect_refuses_a_body_that_does_not_match_its_root() {
    let mut bytes = encoded_block();
    // Flip one byte inside the last transaction's signature: the body still frames, but
    // the transaction hashes to another root.
    let at = bytes.len() - 2;
    bytes[at] ^= 0x01;
    let out = stave(&["block", "inspect", &format!("0x{}", hex::encode(&bytes))]);
    assert_refused(&out, "transactions root mismatch");
    assert_refused(&stave(&["block", "inspect", "0xc0"]), "invalid block");
}

/// Runs a bench with `--json` and returns its last stdout line, parsed.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = stave(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{args:?}: last line not JSON: {e}"))
}

#[test]
fn benches_end_with_the_json_line_of_the_contract() {
    let codec = bench_json(&[
        "bench",
        "codec",
        "--block-txs",
        "40",
        "--erc20-txs",
        "20",
        "--runs",
        "2",
        "--json",
    ]);
    for key in [
        "block_txs",
        "threads",
        "rlp_serial_us",
        "rlp_scan_parallel_us",
        "indexed_parallel_us",
        "speedup_indexed_over_serial",
    ] {
        assert!(codec[key].is_number(), "codec {key}");
    }
    assert_eq!(codec["block_txs"], 40);
    let queue = bench_json(&[
        "bench",
        "checkqueue",
        "--round-jobs",
        "50",
        "--empty-rounds",
        "2",
        "--ecrecover-rounds",
        "1",
        "--json",
    ]);
    for key in [
        "jobs",
        "threads",
        "lockfree_ns_per_job",
        "mutex_ns_per_job",
        "rayon_ns_per_job",
        "ratio_mutex_over_lockfree",
    ] {
        assert!(queue[key].is_number(), "checkqueue {key}");
    }
    assert_eq!(queue["jobs"], 100);
    let verify = bench_json(&[
        "bench",
        "verify",
        "--block-txs",
        "30",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(verify["speedup_warm_over_cold"].is_number());
    // Timings vary; what the warm cache saves does not: every recovery.
    assert_eq!(verify["cold_recoveries_per_block"], 30);
    assert_eq!(verify["warm_recoveries_per_block"], 0);
    let exec = bench_json(&[
        "bench",
        "exec",
        "--block-txs",
        "30",
        "--runs",
        "1",
        "--json",
    ]);
    let workloads = exec["workloads"].as_array().expect("workloads");
    assert_eq!(workloads.len(), 4);
    assert!(
        workloads
            .iter()
            .all(|w| w["speedup"].as_f64().is_some_and(|s| s > 0.0))
    );
}

#[test]
fn bench_commit_measures_a_block_of_the_workload_asked_for() {
    let commit = bench_json(&[
        "bench",
        "commit",
        "--workload",
        "erc20",
        "--block-txs",
        "30",
        "--runs",
        "1",
        "--json",
    ]);
    assert_eq!(commit["workload"], "erc20");
    assert_eq!(commit["block_txs"], 30);
    for key in ["serial_encode_us", "write_us", "speedup_commit"] {
        assert!(
            commit[key].as_f64().is_some_and(|v| v > 0.0),
            "commit {key}"
        );
    }
    assert!(
        commit["journaled"]["speedup_commit"]
            .as_f64()
            .is_some_and(|v| v > 0.0)
    );
}

#[test]
fn bench_pipeline_reports_the_medians_of_its_rounds() {
    let pipeline = bench_json(&[
        "bench",
        "pipeline",
        "--txs",
        "60",
        "--block-txs",
        "20",
        "--runs",
        "3",
        "--svg",
        std::env::temp_dir()
            .join(format!("stave-bench-{}.svg", std::process::id()))
            .to_str()
            .expect("utf-8 path"),
        "--json",
    ]);
    assert_eq!(pipeline["runs"], 3);
    assert_eq!(pipeline["blocks"], 3);
    // Each speedup is the median serial time over the median parallel time: a stage's
    // over the staged run (each stage alone), the total's over the pipelined run; the
    // pipelined speedups are all over the pipelined run.
    let pipelined = "parallel";
    for stage in ["decode", "verify", "execute", "commit", "total"] {
        let over = if stage == "total" {
            pipelined
        } else {
            "staged"
        };
        for (speedups, run) in [("speedup", over), ("pipelined_speedup", pipelined)] {
            let key = format!("{stage}_ms");
            let serial = pipeline["serial"][&key].as_f64().expect("serial time");
            let parallel = pipeline[run][&key].as_f64().expect("parallel time");
            let speedup = pipeline[speedups][stage].as_f64().expect("speedup");
            assert!(
                serial > 0.0 && parallel > 0.0,
                "{stage}: {serial} / {parallel}"
            );
            // Times are printed to the microsecond and ratios to 0.001.
            let low = (serial - 0.0005) / (parallel + 0.0005) - 0.0005;
            let high = (serial + 0.0005) / (parallel - 0.0005).max(1e-9) + 0.0005;
            assert!(
                (low..=high).contains(&speedup),
                "{speedups}.{stage}: {speedup} is not {serial} / {parallel} ({run})"
            );
        }
    }
    let bound = pipeline["bound_tps"].as_f64().expect("bound");
    let tps = pipeline["parallel"]["tps"].as_f64().expect("tps");
    let bound_ratio = pipeline["bound_ratio"].as_f64().expect("bound ratio");
    assert!((bound_ratio - tps / bound).abs() <= 0.002 * bound_ratio + 0.001);
    let zero_runs = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["bench", "pipeline", "--runs", "0"])
        .output()
        .expect("runs");
    assert_eq!(zero_runs.status.code(), Some(2), "clap refuses --runs 0");
}

#[test]
fn bench_node_reports_tps_hit_rates_memory_and_disk() {
    let state = bench_json(&[
        "bench",
        "node",
        "--accounts",
        "3000",
        "--blocks",
        "3",
        "--block-txs",
        "200",
        "--os-cache",
        "fadvise",
        "--json",
    ]);
    for key in [
        "tps_no_prefetch",
        "tps_prefetch",
        "speedup",
        "rss_bytes",
        "disk_bytes_per_tx",
        "disk_bytes_per_account",
    ] {
        assert!(state[key].as_f64().expect(key) > 0.0, "{key}");
    }
    for run in ["block_ms_no_prefetch", "block_ms_prefetch"] {
        let (p50, p99) = (state[run]["p50"].as_f64(), state[run]["p99"].as_f64());
        assert!(p50.expect("p50") > 0.0 && p50 <= p99, "{run}");
    }
    assert_eq!(state["accounts"], 3000);
    assert_eq!(state["blocks"], 3);
    for empty in ["--blocks", "--block-txs"] {
        let refused = Command::new(env!("CARGO_BIN_EXE_stave"))
            .args(["bench", "node", empty, "0"])
            .output()
            .expect("runs");
        assert_eq!(refused.status.code(), Some(2), "clap refuses {empty} 0");
    }
    let above = state["hit_rate_above_disk"].as_f64().expect("above disk");
    let disk = state["hit_rate"]["disk"].as_f64().expect("disk");
    assert!((above + disk - 1.0).abs() < 0.002, "{above} + {disk}");
    let shares: f64 = ["l1", "l15", "l2", "l3", "disk"]
        .iter()
        .map(|layer| state["hit_rate"][layer].as_f64().expect(layer))
        .sum();
    assert!((shares - 1.0).abs() < 0.01, "{shares}");
    // How much prefetch takes off the disk is timing (a prefetch stops once the block
    // before is applied), so it is measured by the bench, not asserted here.
    assert!(state["prefetch_threads"].as_u64().expect("threads") >= 1);
    assert_eq!(state["workload"], "transfer");

    // Token transfers between holders of a generated token (the bench refuses a run
    // in which any transaction failed).
    let tokens = bench_json(&[
        "bench",
        "node",
        "--accounts",
        "3000",
        "--blocks",
        "2",
        "--block-txs",
        "100",
        "--workload",
        "erc20",
        "--os-cache",
        "keep",
        "--json",
    ]);
    assert_eq!(tokens["workload"], "erc20");
    assert_eq!(tokens["cold"], "kept");
    assert!(tokens["tps_prefetch"].as_f64().expect("tps") > 0.0);
    assert!(
        tokens["disk_bytes_per_tx"].as_f64().expect("disk") > 0.0,
        "{tokens}"
    );
}

#[test]
fn bench_sign_reports_the_contract_keys_and_dumps_valid_txs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("signed.txt");
    let report = bench_json(&[
        "bench",
        "sign",
        "--txs",
        "40",
        "--runs",
        "1",
        "--tx-type",
        "legacy",
        "--dump",
        dump.to_str().expect("utf-8 path"),
        "--json",
    ]);
    for key in [
        "txs",
        "threads",
        "tps",
        "tps_per_thread",
        "raw_sign_tps_per_thread",
        "ratio_to_raw",
    ] {
        assert!(
            report[key].as_f64().is_some_and(|v| v > 0.0),
            "sign {key}: {report}"
        );
    }
    assert_eq!(report["txs"], 40);
    let lines = std::fs::read_to_string(&dump).expect("dump written");
    for (nonce, line) in lines.lines().enumerate() {
        let bytes = hex::decode(line.strip_prefix("0x").expect("0x prefix")).expect("hex");
        let tx = stave_primitives::decode_and_validate(&bytes, Some(1337)).expect("valid");
        assert_eq!(tx.tx.tx_type(), 0, "legacy");
        assert_eq!(tx.summary().nonce, nonce as u64);
        // The dev mnemonic's first account signs every one.
        assert_eq!(
            tx.sender.to_string().to_lowercase(),
            "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
        );
    }
    assert_eq!(lines.lines().count(), 40);
}

#[test]
fn keys_ca_and_node_write_pem_files_and_print_the_node_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let out = stave(&["keys", "ca", "--out", &path("ca")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ids = Vec::new();
    for name in ["node0", "node1"] {
        let out = stave(&[
            "keys",
            "node",
            "--ca",
            &path("ca"),
            "--name",
            name,
            "--out",
            &path(name),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(line["name"], name);
        // The printed id is the one the certificate written carries.
        let certificate =
            std::fs::read_to_string(dir.path().join(name).join("node.pem")).expect("certificate");
        let key = std::fs::read_to_string(dir.path().join(name).join("node.key")).expect("key");
        let identity = stave_net::NodeIdentity::from_pem(name, &certificate, &key).expect("PEM");
        let id = format!("0x{}", hex::encode(identity.node_id().expect("id")));
        assert_eq!(line["node_id"], id);
        ids.push(id);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(name).join("node.key"))
                .expect("key file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is readable by others: {mode:o}");
        }
    }
    assert_ne!(ids[0], ids[1]);
    // Nothing is overwritten; a missing CA is named.
    assert_refused(
        &stave(&["keys", "ca", "--out", &path("ca")]),
        "must not exist yet",
    );
    assert_refused(
        &stave(&[
            "keys",
            "node",
            "--ca",
            &path("nowhere"),
            "--name",
            "n",
            "--out",
            &path("n"),
        ]),
        "make a CA with `stave keys ca",
    );
}

#[test]
fn bench_net_reports_every_payload_of_the_contract() {
    let net = bench_json(&[
        "bench",
        "net",
        "--block-txs",
        "200",
        "--erc20-txs",
        "100",
        "--batch-txs",
        "100",
        "--runs",
        "2",
        "--loopback-mb",
        "2",
        "--loopback-runs",
        "1",
        "--json",
    ]);
    let payloads = net["payloads"].as_array().expect("payloads");
    let names: Vec<&str> = payloads
        .iter()
        .map(|p| p["payload"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "transfer_block",
            "erc20_block",
            "tx_batch",
            "compact_transfer_block"
        ]
    );
    for payload in payloads {
        for key in [
            "raw_bytes",
            "wire_bytes",
            "ratio",
            "compress_mb_s",
            "decompress_mb_s",
        ] {
            assert!(payload[key].is_number(), "{payload}: {key}");
        }
    }
    // A compact block whose txs the peer holds is a small fraction of the block.
    assert!(payloads[3]["ratio"].as_f64().expect("ratio") < 0.2);
    for key in ["mb_s_plain", "mb_s_compressed"] {
        assert!(net["loopback"][key].as_f64().expect("number") > 0.0);
    }
}
