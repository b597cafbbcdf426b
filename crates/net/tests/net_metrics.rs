//! Byte metrics: every frame is counted in and out, raw and on the wire, per module and
//! per peer. (Its own test binary: it installs the process-wide metrics recorder.)

mod support;

use std::collections::HashMap;

use bytes::Bytes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use stave_net::{ProtocolId, short_id};
use support::{Chain, LIMIT, eventually};
use tokio::time::timeout;

const GROUP: i16 = 3;
const BULK: u16 = 5;
const SMALL: u16 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_are_counted_raw_and_on_the_wire_per_module_and_peer() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("first recorder");

    let chain = Chain::new(2);
    let receiver = chain.start(0, vec![], |_| {}).await;
    let sender = chain.start(1, vec![chain.peer(0, &receiver)], |_| {}).await;
    let mut bulk = receiver.register(GROUP, BULK, 64);
    let mut small = receiver.register(GROUP, SMALL, 64);
    eventually("connection", || sender.peers().len() == 1).await;
    let compressible = Bytes::from(b"0000000000000000 transfer(address,uint256) ".repeat(400));
    let bulk_len = compressible.len() as u64;
    for (module, payload) in [(BULK, compressible), (SMALL, Bytes::from_static(b"tiny"))] {
        for packet in 0..10 {
            let frame = sender.frame(ProtocolId::request(GROUP, module), packet, payload.clone());
            sender.send(chain.ids[0], &frame).await.expect("sends");
        }
    }
    for inbox in [&mut bulk, &mut small] {
        for _ in 0..10 {
            timeout(LIMIT, inbox.recv())
                .await
                .expect("in time")
                .expect("frame");
        }
    }

    let mut bytes: HashMap<(String, String, String), u64> = HashMap::new();
    let mut per_peer: HashMap<(String, String), u64> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: HashMap<String, String> = key
            .key()
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        let DebugValue::Counter(count) = value else {
            continue;
        };
        match key.key().name() {
            "stave_net_bytes_total" => {
                bytes.insert(
                    (
                        labels["direction"].clone(),
                        labels["kind"].clone(),
                        labels["module"].clone(),
                    ),
                    count,
                );
            }
            "stave_net_peer_bytes_total" => {
                per_peer.insert((labels["direction"].clone(), labels["peer"].clone()), count);
            }
            _ => {}
        }
    }
    let get = |direction: &str, kind: &str, module: u16| {
        bytes
            .get(&(direction.to_owned(), kind.to_owned(), module.to_string()))
            .copied()
            .unwrap_or(0)
    };
    // What one side sent the other received, byte for byte.
    for module in [BULK, SMALL] {
        for kind in ["raw", "wire"] {
            assert_eq!(
                get("out", kind, module),
                get("in", kind, module),
                "{kind} {module}"
            );
        }
    }
    // Raw counts the uncompressed payload: 10 frames of header plus payload.
    assert_eq!(get("out", "raw", BULK), 10 * (16 + bulk_len));
    assert_eq!(get("out", "raw", SMALL), 10 * (16 + 4));
    // The bulk payload compressed; the small one went as it was.
    assert!(get("out", "wire", BULK) * 4 < get("out", "raw", BULK));
    assert_eq!(get("out", "wire", SMALL), get("out", "raw", SMALL));
    // Per peer: the sender sent to the receiver what the receiver got from the sender.
    let wire = get("out", "wire", BULK) + get("out", "wire", SMALL);
    assert_eq!(per_peer[&("out".to_owned(), short_id(&chain.ids[0]))], wire);
    assert_eq!(per_peer[&("in".to_owned(), short_id(&chain.ids[1]))], wire);
}
