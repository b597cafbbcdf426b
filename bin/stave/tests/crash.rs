//! Crash safety against a real process: `stave import` is SIGKILLed at random moments
//! 50 times; after every kill the data dir's head only moves forward, every block up to
//! it is the reference block, and reopening it rebuilds the state of the blocks after the
//! flushed state to exactly the state roots their headers claim; a final run completes the chain
//! with the reference head and state. The chain is long enough that the state layers
//! flush to disk during the run. And a disk that fills up mid-import stops it with a clear
//! error, losing no stored block.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use stave_exec::StateReader;
use stave_node::Chain;
use stave_primitives::{Address, B256, RecoveredTx, U256, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder, workload_genesis};
use stave_storage::{
    LmdbStore,
    read::{flushed_height, head, header},
};

const CHAIN_ID: u64 = 1337;
const ACCOUNTS: u64 = 20;
/// More than the kept layers plus a flush batch, so kills also land around flushes.
const BLOCKS: u64 = (stave_state::KEPT_LAYERS + 2 * stave_state::FLUSH_BATCH) as u64 + 10;

/// The reference chain, built once per test under its temp dir.
struct Reference {
    spec: stave_primitives::ChainSpec,
    /// The genesis file `stave import` reads.
    genesis: std::path::PathBuf,
    /// The chain's block stream file.
    stream: std::path::PathBuf,
    /// Each height's block hash.
    hashes: Vec<B256>,
    /// Each height's transaction hashes, in block order.
    tx_hashes: Vec<Vec<B256>>,
}

/// Builds the reference chain in `dir/reference` and writes its genesis and block stream
/// beside it.
fn reference(dir: &std::path::Path) -> Reference {
    let spec = workload_genesis(CHAIN_ID, ACCOUNTS, None);
    let genesis = dir.join("genesis.json");
    std::fs::write(&genesis, spec.to_json()).expect("write");
    let store = LmdbStore::open(&dir.join("reference"), 256 << 20).expect("opens");
    let mut chain = Chain::open(&store, &spec, 2).expect("opens");
    let builder = TxBuilder::new(CHAIN_ID, 1_000_000_000);
    let mut stream = Vec::new();
    let mut tx_hashes = vec![Vec::new()];
    for block in 0..BLOCKS {
        let txs: Vec<RecoveredTx> = (0..ACCOUNTS)
            .map(|i| {
                let signer = LocalSigner::from_secret(&dev_account(i).secret).expect("key");
                let to = Address::with_last_byte((block % 200) as u8);
                let tx = signer.sign_tx(builder.transfer(block, to, U256::from(1)));
                RecoveredTx {
                    tx,
                    sender: signer.address(),
                }
            })
            .collect();
        tx_hashes.push(txs.iter().map(|tx| tx.tx.hash()).collect());
        stream.extend(chain.build(txs, 1_700_000_000 + block).expect("builds"));
    }
    let hashes = (0..=BLOCKS)
        .map(|n| {
            header(&store, n)
                .expect("reads")
                .expect("stored")
                .hash_slow()
        })
        .collect();
    let stream_path = dir.join("chain.blocks");
    std::fs::write(&stream_path, &stream).expect("write");
    Reference {
        spec,
        genesis,
        stream: stream_path,
        hashes,
        tx_hashes,
    }
}

fn import(
    datadir: &std::path::Path,
    genesis: &std::path::Path,
    stream: &std::path::Path,
) -> std::process::Child {
    import_command(datadir, genesis, stream)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stave runs")
}

/// `stave import` of `stream` into `datadir`.
fn import_command(
    datadir: &std::path::Path,
    genesis: &std::path::Path,
    stream: &std::path::Path,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
    command
        .args(["import", "--datadir"])
        .arg(datadir)
        .arg("--genesis")
        .arg(genesis)
        .arg("--map-size")
        .arg((256u64 << 20).to_string())
        .arg(stream);
    command
}

#[test]
fn sigkill_during_import_loses_no_committed_block_and_keeps_state_consistent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Reference {
        spec,
        genesis,
        stream: stream_path,
        hashes,
        tx_hashes,
    } = reference(dir.path());
    let datadir = dir.path().join("victim");

    // How long a whole import takes, to spread the kills over it.
    let start = Instant::now();
    let full_dir = dir.path().join("timing");
    assert!(
        import(&full_dir, &genesis, &stream_path)
            .wait()
            .expect("runs")
            .success()
    );
    let full = start.elapsed();

    let mut rng = StdRng::seed_from_u64(20261122);
    let mut last_head = 0;
    let mut kills = 0;
    // Kills that left a partly imported chain: the test must really interrupt imports.
    let mut mid_chain = 0;
    while kills < 50 {
        let mut child = import(&datadir, &genesis, &stream_path);
        std::thread::sleep(Duration::from_micros(
            rng.random_range(0..full.as_micros() as u64),
        ));
        if child.try_wait().expect("polls").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        child.wait().expect("reaped");
        let store = LmdbStore::open(&datadir, 256 << 20).expect("reopens after a kill");
        if let Some((number, hash)) = head(&store).expect("reads") {
            assert!(
                number >= last_head,
                "head went back from {last_head} to {number}"
            );
            assert_eq!(
                hash, hashes[number as usize],
                "head {number} is the reference block"
            );
            for n in 0..=number {
                let stored = header(&store, n)
                    .expect("reads")
                    .expect("every block up to the head");
                assert_eq!(stored.hash_slow(), hashes[n as usize], "block {n}");
            }
            last_head = number;
            mid_chain += usize::from(number > 0 && number < BLOCKS);
            // Reopening replays the blocks after the flushed state and checks each one's
            // state root; every sender has sent one tx per block.
            let chain = Chain::open(&store, &spec, 2).expect("state is consistent after a kill");
            let state = chain.layers();
            let nonce = state
                .latest()
                .account(dev_account(0).address)
                .expect("reads")
                .map_or(0, |account| account.nonce);
            assert_eq!(nonce, number);
            // Every committed transaction is found where it is (the tx index of the flushed
            // blocks on disk, of the others in the replayed layers); none of a lost block.
            for (n, block_txs) in tx_hashes.iter().enumerate() {
                for (index, tx_hash) in block_txs.iter().enumerate() {
                    let expected = (n as u64 <= number).then_some((n as u64, index as u32));
                    assert_eq!(
                        state.tx_location(*tx_hash).expect("reads"),
                        expected,
                        "tx {index} of block {n}, head {number}"
                    );
                }
            }
        }
        if last_head == BLOCKS {
            // Finished before the kill landed: start over so the kills keep hitting work.
            drop(store);
            std::fs::remove_dir_all(&datadir).expect("reset");
            last_head = 0;
        }
    }
    assert!(mid_chain >= 10, "only {mid_chain} kills landed mid-import");
    // A last, uninterrupted run completes the chain.
    assert!(
        import(&datadir, &genesis, &stream_path)
            .wait()
            .expect("runs")
            .success()
    );
    let store = LmdbStore::open(&datadir, 256 << 20).expect("opens");
    let reference = LmdbStore::open(&dir.path().join("reference"), 256 << 20).expect("opens");
    assert_eq!(
        head(&store).expect("reads").map(|h| h.1),
        Some(hashes[BLOCKS as usize])
    );
    assert!(flushed_height(&store).expect("reads").expect("flushed") > 0);
    let (ours, theirs) = (
        Chain::open(&store, &spec, 2).expect("opens"),
        Chain::open(&reference, &spec, 2).expect("opens"),
    );
    let (ours, theirs) = (ours.layers(), theirs.layers());
    for i in 0..ACCOUNTS {
        let address = dev_account(i).address;
        assert_eq!(
            ours.latest().account(address).expect("reads"),
            theirs.latest().account(address).expect("reads")
        );
    }
}

#[test]
fn a_full_disk_stops_import_with_a_clear_error_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Reference {
        spec,
        genesis,
        stream: stream_path,
        hashes,
        ..
    } = reference(dir.path());
    let datadir = dir.path().join("full");
    let import = import_command(&datadir, &genesis, &stream_path);
    let mut args = vec![import.get_program().to_owned()];
    args.extend(import.get_args().map(ToOwned::to_owned));
    let output = Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 512; exec \"$@\"")
        .arg("bash")
        .args(&args)
        .output()
        .expect("bash runs");
    // Exit code 1 and one line saying what happened and what to do.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("the disk may be full"), "{stderr}");
    // Every block it stored is whole and the reference; the state replays to its roots.
    let stopped_at = {
        let store = LmdbStore::open(&datadir, 256 << 20).expect("reopens");
        let (number, _) = head(&store).expect("reads").expect("a head");
        assert!(number < BLOCKS, "the limit did not stop the import");
        for n in 0..=number {
            let stored = header(&store, n).expect("reads").expect("every block");
            assert_eq!(stored.hash_slow(), hashes[n as usize], "block {n}");
        }
        let chain = Chain::open(&store, &spec, 2).expect("state is consistent");
        let nonce = chain
            .layers()
            .latest()
            .account(dev_account(0).address)
            .expect("reads")
            .map_or(0, |account| account.nonce);
        assert_eq!(nonce, number);
        number
    };
    // With room again, the import resumes and completes the chain.
    let resumed = import_command(&datadir, &genesis, &stream_path)
        .output()
        .expect("runs");
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let store = LmdbStore::open(&datadir, 256 << 20).expect("opens");
    assert_eq!(
        head(&store).expect("reads").map(|h| h.1),
        Some(hashes[BLOCKS as usize]),
        "resumed from {stopped_at}"
    );
}
