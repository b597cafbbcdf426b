#!/usr/bin/env bash
# Interop with real Ethereum clients, installed at pinned versions: starts a
# `stave node --dev` on free ports and runs each client's script against it (ethers,
# viem, web3.py, Foundry's cast), then compares Stave's answers with Anvil's.
# Usage: interop/run.sh <path to the stave binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stave="$1"
ETHERS_VERSION=6.15.0
VIEM_VERSION=2.57.20
WEB3PY_VERSION=7.16.0
ANVIL_VERSION=1.7.1
CAST_VERSION=1.7.1
PUPPETEER_VERSION=25.16.0
tools="${STAVE_TOOLS_DIR:-$HOME/.cache/stave-tools}"
npm_tool() { # name version: installs once, prints the node_modules dir
    local dir="$tools/$1-$2"
    if [ ! -d "$dir/node_modules/$1" ]; then
        mkdir -p "$dir"
        npm install --silent --prefix "$dir" "$1@$2" >/dev/null
    fi
    echo "$dir/node_modules"
}
ethers_modules="$(npm_tool ethers "$ETHERS_VERSION")"
viem_modules="$(npm_tool viem "$VIEM_VERSION")"
anvil="$(npm_tool @foundry-rs/anvil "$ANVIL_VERSION")/.bin/anvil"
cast="$(npm_tool @foundry-rs/cast "$CAST_VERSION")/.bin/cast"
puppeteer_modules="$(npm_tool puppeteer-core "$PUPPETEER_VERSION")"
web3py_venv="$tools/web3py-$WEB3PY_VERSION"
if [ ! -x "$web3py_venv/bin/python" ] || ! "$web3py_venv/bin/python" -c 'import web3' 2>/dev/null; then
    python3 -m venv "$web3py_venv"
    "$web3py_venv/bin/pip" install --quiet "web3==$WEB3PY_VERSION"
fi
port=$((20000 + RANDOM % 20000))
datadir="$(mktemp -d)"
log="$datadir/node.log"
"$stave" node --dev --datadir "$datadir/chain" --rpc-addr "127.0.0.1:$port" \
    --metrics-addr "127.0.0.1:$((port + 1))" --block-time-ms 200 >"$log" 2>&1 &
node_pid=$!
trap 'kill $node_pid 2>/dev/null || true; wait $node_pid 2>/dev/null || true; rm -rf "$datadir"' EXIT
# up LOG PID: waits until the node writing LOG says it serves JSON-RPC.
up() {
    for _ in $(seq 100); do
        grep -q 'JSON-RPC on' "$1" && return 0
        kill -0 "$2" || { cat "$1"; exit 1; }
        sleep 0.1
    done
}
up "$log" $node_pid
token="$here/../contracts/StaveToken.bin"
node "$here/ethers.mjs" "$ethers_modules" "$port" "$token"
node "$here/viem.cjs" "$viem_modules" "$port" "$token"
"$web3py_venv/bin/python" "$here/web3py.py" "$port" "$token"
"$here/cast.sh" "$cast" "$port" "$token"
# Traces, overrides and access lists against Anvil's, the same transactions sent to both (Anvil records struct logs
# of mined transactions only with --steps-tracing).
anvil_port=$((port + 4))
"$anvil" --port "$anvil_port" --chain-id 1337 --hardfork prague --steps-tracing --silent \
    >"$datadir/anvil.log" 2>&1 &
anvil_pid=$!
trap 'kill $node_pid $anvil_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$datadir"' EXIT
for _ in $(seq 100); do
    curl -sf -XPOST -H 'content-type: application/json' "127.0.0.1:$anvil_port" \
        -d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' >/dev/null && break
    kill -0 $anvil_pid || { cat "$datadir/anvil.log"; exit 1; }
    sleep 0.1
done
"$web3py_venv/bin/python" "$here/anvil.py" "$port" "$anvil_port" "$token"
# `stave load` drives any Ethereum node (it estimates its gas limits there): every
# workload against Anvil, every transaction included.
for workload in transfer erc20 conflict mixed; do
    "$stave" load --rpc "http://127.0.0.1:$anvil_port" --workload "$workload" --txs 200 \
        --accounts 10 --json 2>"$datadir/load.err" | tail -1 | python3 -c '
import json, sys
report = json.load(sys.stdin)
assert report["included"] == report["txs"] == 200, report
print("stave load against anvil:", report["workload"], report["included"], "included")' \
        || { cat "$datadir/load.err"; exit 1; }
done
kill $anvil_pid
# A node whose governance contract lets nobody deploy: web3.py sees the refusal's rule.
restricted="$datadir/restricted"
mkdir -p "$restricted"
"$stave" genesis new --committee 1 --restrict-deployers --out "$restricted/genesis.json" 2>/dev/null
printf 'genesis = "genesis.json"\ndatadir = "data"\nrpc_addr = "127.0.0.1:%s"\nmetrics_addr = "127.0.0.1:%s"\nblock_time_ms = 200\n' \
    "$((port + 2))" "$((port + 3))" >"$restricted/node.toml"
"$stave" node --config "$restricted/node.toml" >"$restricted/node.log" 2>&1 &
restricted_pid=$!
trap 'kill $node_pid $anvil_pid $restricted_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$datadir"' EXIT
up "$restricted/node.log" $restricted_pid
# `stave genesis new` funds Stave's deterministic dev accounts: the script sends as one.
key="$("$stave" keys show --dev --index 1 | python3 -c 'import sys,json; print(json.load(sys.stdin)["private_key"])')"
"$web3py_venv/bin/python" "$here/permissions.py" "$((port + 2))" "$token" "$key"
# A web page in headless Chromium calls the dev node (CORS *) and the restricted node,
# whose file config allows no origin.
node "$here/browser.mjs" "$puppeteer_modules" "$port" "$((port + 2))"
kill -TERM $restricted_pid
wait $restricted_pid
# The node's web console in Chromium, while a load runs; screenshots kept for people.
"$stave" load --rpc "http://127.0.0.1:$port" --accounts 20 --first-account 10 --rate 300 \
    --duration 40s >/dev/null 2>&1 &
load_pid=$!
node "$here/console.mjs" "$puppeteer_modules" "$((port + 1))" \
    "${CONSOLE_SHOTS:-${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}/console}"
kill $load_pid 2>/dev/null || true
wait $load_pid 2>/dev/null || true
# Metrics are served while the node runs.
curl -sf "http://127.0.0.1:$((port + 1))/metrics" | grep -q stave_stage_seconds
kill -TERM $node_pid
wait $node_pid
grep -q 'SIGTERM: stopping' "$log"
# The console of a validator of a 4-validator testnet lists the 4 and their last votes.
testnet="$datadir/testnet"
"$stave" testnet init --nodes 4 --dir "$testnet" --rpc-port "$((port + 10))" \
    --metrics-port "$((port + 20))" --p2p-port "$((port + 30))" >/dev/null
"$stave" testnet run --dir "$testnet" >"$datadir/testnet.log" 2>&1 &
testnet_pid=$!
trap 'kill $testnet_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$datadir"' EXIT
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$((port + 20))/health" >/dev/null && break
    kill -0 $testnet_pid || { cat "$datadir/testnet.log"; exit 1; }
    sleep 0.1
done
node "$here/console.mjs" "$puppeteer_modules" "$((port + 20))" \
    "${CONSOLE_SHOTS:-${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}/console}" testnet
kill -TERM $testnet_pid
wait $testnet_pid
