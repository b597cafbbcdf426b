#!/usr/bin/env bash
# Hostile RPC under load (not CI; the numbers go to MEASUREMENTS.md): starts 4 validators
# (`stave testnet`), runs `stave load` against node 0 once unloaded and once while
# LOOPS clients (default 32) loop full-range `eth_getLogs` and 1,024-block
# `eth_feeHistory` calls against one validator (LOGS_NODE, default 0), and prints included
# TPS and p50/p99 confirmation latency of both runs and how the RPC calls were answered.
#
# Settings (environment): STAVE (binary; default: a release build of this tree), RATE
# (tx/s, default 3000), DURATION (s of each load run, default 30), LOOPS, LOGS_NODE,
# ACCOUNTS (load senders, default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${STAVE:-}" ]]; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}"
    cargo build --release --locked -p stave
    STAVE="$CARGO_TARGET_DIR/release/stave"
fi
RATE="${RATE:-3000}" DURATION="${DURATION:-30}" LOOPS="${LOOPS:-32}"
LOGS_NODE="${LOGS_NODE:-0}" ACCOUNTS="${ACCOUNTS:-100}"
work="$(mktemp -d)"
testnet=""
loops=()
cleanup() {
    for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ -n "$testnet" ]]; then
        kill -INT "$testnet" 2>/dev/null || true
        wait "$testnet" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$STAVE" testnet init --nodes 4 --dir "$work/testnet" >/dev/null
"$STAVE" testnet run --dir "$work/testnet" >"$work/testnet.log" 2>&1 &
testnet=$!
load_url="http://127.0.0.1:8545"
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
        --duration "$DURATION" --json 2>/dev/null | tail -1 >"$work/$1.json"
}

run_load unloaded

logs='{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"earliest","toBlock":"latest"}]}'
fees='{"jsonrpc":"2.0","id":1,"method":"eth_feeHistory","params":["0x400","latest",[10,50,90]]}'
for i in $(seq "$LOOPS"); do
    body="$logs"
    (( i % 2 == 0 )) && body="$fees"
    (
        while :; do
            answer="$(rpc "$logs_url" "$body")"
            if [[ -z "$answer" ]]; then echo none
            elif jq -e '.result' >/dev/null 2>&1 <<<"$answer"; then echo result
            else jq -r '.error.message | split(":")[0]' <<<"$answer"
            fi
        done >"$work/loop-$i.out"
    ) &
    loops+=("$!")
done
run_load loaded
for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
loops=()

printf '%-10s %12s %10s %10s\n' run "included/s" "p50 ms" "p99 ms"
for run in unloaded loaded; do
    jq -r --arg run "$run" '"\($run) \(.included_tps) \(.latency_ms.p50) \(.latency_ms.p99)"' \
        "$work/$run.json" | xargs printf '%-10s %12s %10s %10s\n'
done
echo "RPC answers during the loaded run ($LOOPS clients on node $LOGS_NODE):"
cat "$work"/loop-*.out | sort | uniq -c | sort -rn
