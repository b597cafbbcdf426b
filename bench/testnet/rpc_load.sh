#!/usr/bin/env bash
# #68's hostile RPC under load (not CI; the numbers go to MEASUREMENTS.md): 4 validators,
# `stave load` through one of them (LOAD_NODE, default 1) once unloaded and once while
# LOOPS clients (default 64) loop full-range `eth_getLogs` and 1,024-block
# `eth_feeHistory` calls against another (LOGS_NODE, default 0). Prints the included TPS
# and p50/p99 confirmation latency of both runs (the chain's, seen through a node the
# scanners leave alone), how the scanners were answered, and every validator's RSS before
# the loaded run and at its peak during it (the scanned one against the rest).
#
# Usage: bench/testnet/rpc_load.sh   (STAVE; RATE tx/s, default 3000; DURATION s of each
# load run, default 30; LOOPS; LOGS_NODE; LOAD_NODE; ACCOUNTS, default 100; WORKLOAD, the
# `stave load --workload`, default transfer; RPC_NICE, every node's `[rpc] nice`)
source "$(dirname "$0")/lib.sh"
RATE="${RATE:-3000}" DURATION="${DURATION:-30}" LOOPS="${LOOPS:-64}"
LOGS_NODE="${LOGS_NODE:-0}" LOAD_NODE="${LOAD_NODE:-1}" ACCOUNTS="${ACCOUNTS:-100}"
WORKLOAD="${WORKLOAD:-transfer}"
[ -n "${RPC_NICE:-}" ] && TESTNET_TOML="[rpc]
nice = $RPC_NICE"
start_testnet
trap 'touch "$WORK/stop"; cleanup' EXIT

run_load() { # NAME: one `stave load` run; its JSON report line saved as NAME.json
  "$STAVE" load --rpc "http://127.0.0.1:$((RPC0 + LOAD_NODE))" --accounts "$ACCOUNTS" \
    --rate "$RATE" --workload "$WORKLOAD" --duration "$DURATION" --json \
    2> "$WORK/$1.err" | tail -1 > "$WORK/$1.json" ||
    { echo "stave load ($1) failed:" >&2; tail -3 "$WORK/$1.err" >&2; exit 1; }
}

run_load unloaded

# Every validator's RSS (KiB) every half second while the loaded run lasts.
mapfile -t nodes < <(node_pids)
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
for i in 0 1 2 3; do rss_kb "${nodes[$i]}" > "$WORK/rss-before-$i"; done
(
  while :; do
    for i in 0 1 2 3; do echo "$i $(rss_kb "${nodes[$i]}")"; done
    sleep 0.5
  done > "$WORK/rss-samples"
) &
PIDS+=($!)

# The scanners: one Python process, LOOPS threads on their own keep-alive connections, each
# sending its call again as soon as it is answered (even with "busy"), half of them
# full-range `eth_getLogs`, half 1,024-block `eth_feeHistory`. One process, not LOOPS shell
# loops forking curl, so the clients' own CPU does not starve the validators of this box;
# it runs at nice 10 for the same reason. It counts answers by kind until $WORK/stop exists.
nice -n 10 python3 - "$((RPC0 + LOGS_NODE))" "$LOOPS" "$WORK/stop" > "$WORK/answers.json" <<'PY' &
import http.client, json, os, sys, threading
port, loops, stop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
calls = [
    {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs",
     "params": [{"fromBlock": "earliest", "toBlock": "latest"}]},
    {"jsonrpc": "2.0", "id": 1, "method": "eth_feeHistory",
     "params": ["0x400", "latest", [10, 50, 90]]},
]
counts, lock = {}, threading.Lock()
def count(kind):
    with lock:
        counts[kind] = counts.get(kind, 0) + 1
def scan(body):
    conn = None
    while not os.path.exists(stop):
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/", body, {"content-type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            kind = "result" if "result" in answer else answer["error"]["message"].split(":")[0]
        except Exception as error:
            conn, kind = None, f"no answer ({type(error).__name__})"
        count(kind)
threads = [threading.Thread(target=scan, args=(json.dumps(calls[i % 2]),)) for i in range(loops)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(counts))
PY
scanners=$!
PIDS+=($scanners)
run_load loaded
touch "$WORK/stop"
wait "$scanners"

printf '%-10s %12s %10s %10s\n' run "included/s" "p50 ms" "p99 ms"
for run in unloaded loaded; do
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r["included_tps"], r["latency_ms"]["p50"], r["latency_ms"]["p99"])' \
    "$WORK/$run.json" "$run" | xargs printf '%-10s %12s %10s %10s\n'
done
for i in 0 1 2 3; do
  before="$(cat "$WORK/rss-before-$i")"
  peak="$(awk -v n="$i" '$1 == n && $2 > max { max = $2 } END { print max }' "$WORK/rss-samples")"
  role=""
  [[ $i == "$LOGS_NODE" ]] && role=" (scanned)"
  [[ $i == "$LOAD_NODE" ]] && role=" (load)"
  echo "node $i$role RSS: $((before / 1024)) MB before the loaded run, peak $((peak / 1024)) MB (+$(((peak - before) / 1024)) MB)"
done
echo "RPC answers during the loaded run ($LOOPS clients on node $LOGS_NODE): $(cat "$WORK/answers.json")"
