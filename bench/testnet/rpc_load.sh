#!/usr/bin/env bash
# Hostile RPC under load (not CI; the numbers go to MEASUREMENTS.md): starts 4 validators
# (`stave testnet`), runs `stave load` through one validator (LOAD_NODE, default 1) once
# unloaded and once while LOOPS clients (default 64) loop full-range `eth_getLogs` and
# 1,024-block `eth_feeHistory` calls against another (LOGS_NODE, default 0). Prints the
# included TPS and p50/p99 confirmation latency of both runs (the chain's, seen through a
# node the scanners leave alone), how the scanners were answered, and every validator's
# RSS before the loaded run and at its peak during it (the scanned one against the rest).
#
# Settings (environment): STAVE (binary; default: a release build of this tree), RATE
# (tx/s, default 3000), DURATION (s of each load run, default 30), LOOPS, LOGS_NODE,
# LOAD_NODE, ACCOUNTS (load senders, default 100), WORKLOAD (`stave load --workload`,
# default erc20: every transaction logs, so the log scans have logs to read), RPC_NICE
# (every node's `[rpc] nice`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${STAVE:-}" ]]; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}"
    cargo build --release --locked -p stave
    STAVE="$CARGO_TARGET_DIR/release/stave"
fi
RATE="${RATE:-3000}" DURATION="${DURATION:-30}" LOOPS="${LOOPS:-64}"
LOGS_NODE="${LOGS_NODE:-0}" LOAD_NODE="${LOAD_NODE:-1}" ACCOUNTS="${ACCOUNTS:-100}"
WORKLOAD="${WORKLOAD:-erc20}"
work="$(mktemp -d)"
testnet=""
loops=()
cleanup() {
    touch "$work/stop"
    for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ -n "$testnet" ]]; then
        kill -INT "$testnet" 2>/dev/null || true
        wait "$testnet" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$STAVE" testnet init --nodes 4 --dir "$work/testnet" >/dev/null
if [[ -n "${RPC_NICE:-}" ]]; then
    for config in "$work"/testnet/node*/config.toml; do
        printf '\n[rpc]\nnice = %s\n' "$RPC_NICE" >>"$config"
    done
fi
"$STAVE" testnet run --dir "$work/testnet" >"$work/testnet.log" 2>&1 &
testnet=$!
load_url="http://127.0.0.1:$((8545 + LOAD_NODE))"
logs_url="http://127.0.0.1:$((8545 + LOGS_NODE))"

rpc() { # URL BODY: the JSON answer, or nothing if the node does not answer in 30 s
    curl -s -m 30 -H 'content-type: application/json' -d "$2" "$1" || true
}
head_of() { rpc "$1" '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' | jq -r '.result // empty'; }
for _ in $(seq 120); do
    [[ -n "$(head_of "$load_url")" && -n "$(head_of "$logs_url")" ]] && break
    sleep 1
done
[[ -n "$(head_of "$load_url")" ]] || { echo "the testnet did not start; see its log:" >&2; tail "$work/testnet.log" >&2; exit 1; }

run_load() { # NAME: one `stave load` run; its JSON report line saved as NAME.json
    "$STAVE" load --rpc "$load_url" --accounts "$ACCOUNTS" --rate "$RATE" \
        --workload "$WORKLOAD" --duration "$DURATION" --json 2>"$work/$1.err" | tail -1 >"$work/$1.json" ||
        { echo "stave load ($1) failed:" >&2; tail -3 "$work/$1.err" >&2; exit 1; }
}

run_load unloaded

# Every validator's RSS (KiB) every half second while the loaded run lasts: `stave testnet
# run`'s children, in node order (each one's command line names its config).
node_pids=()
for i in 0 1 2 3; do
    for pid in $(pgrep -P "$testnet"); do
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "node$i/" && node_pids+=("$pid")
    done
done
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
for i in 0 1 2 3; do rss_kb "${node_pids[$i]}" >"$work/rss-before-$i"; done
(
    while :; do
        for i in 0 1 2 3; do echo "$i $(rss_kb "${node_pids[$i]}")"; done
        sleep 0.5
    done >"$work/rss-samples"
) &
loops+=("$!")

# The scanners: one Python process, LOOPS threads on their own keep-alive connections, each
# sending its call again as soon as it is answered (even with "busy"), half of them
# full-range `eth_getLogs`, half 1,024-block `eth_feeHistory`. One process, not LOOPS shell
# loops forking curl, so the clients' own CPU does not starve the validators of this box;
# it runs at nice 10 for the same reason. It counts answers by kind until $work/stop exists.
nice -n 10 python3 - "$logs_url" "$LOOPS" "$work/stop" >"$work/answers.json" <<'PY' &
import http.client, json, os, sys, threading, urllib.parse
url, loops, stop = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
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
            conn = conn or http.client.HTTPConnection(url.hostname, url.port, timeout=60)
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
loops+=("$scanners")
run_load loaded
touch "$work/stop"
wait "$scanners"
for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
loops=()

printf '%-10s %12s %10s %10s\n' run "included/s" "p50 ms" "p99 ms"
for run in unloaded loaded; do
    jq -r --arg run "$run" '"\($run) \(.included_tps) \(.latency_ms.p50) \(.latency_ms.p99)"' \
        "$work/$run.json" | xargs printf '%-10s %12s %10s %10s\n'
done
for i in 0 1 2 3; do
    before="$(cat "$work/rss-before-$i")"
    peak="$(awk -v n="$i" '$1 == n && $2 > max { max = $2 } END { print max }' "$work/rss-samples")"
    role=""
    [[ $i == "$LOGS_NODE" ]] && role=" (scanned)"
    [[ $i == "$LOAD_NODE" ]] && role=" (load)"
    echo "node $i$role RSS: $((before / 1024)) MB before the loaded run, peak $((peak / 1024)) MB (+$(((peak - before) / 1024)) MB)"
done
echo "RPC answers during the loaded run ($LOOPS clients on node $LOGS_NODE): $(cat "$work/answers.json")"
