#!/usr/bin/env bash
# Interop with real Ethereum clients, installed at pinned versions: starts a
# `stave node --dev` on free ports and runs each client's script against it.
# Usage: interop/run.sh <path to the stave binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stave="$1"
ETHERS_VERSION=6.15.0
tools="${STAVE_TOOLS_DIR:-$HOME/.cache/stave-tools}"
ethers_dir="$tools/ethers-$ETHERS_VERSION"
if [ ! -d "$ethers_dir/node_modules/ethers" ]; then
    mkdir -p "$ethers_dir"
    npm install --silent --prefix "$ethers_dir" "ethers@$ETHERS_VERSION" >/dev/null
fi
port=$((20000 + RANDOM % 20000))
datadir="$(mktemp -d)"
log="$datadir/node.log"
"$stave" node --dev --datadir "$datadir/chain" --rpc-addr "127.0.0.1:$port" \
    --metrics-addr "127.0.0.1:$((port + 1))" --block-time-ms 200 >"$log" 2>&1 &
node_pid=$!
trap 'kill $node_pid 2>/dev/null || true; wait $node_pid 2>/dev/null || true; rm -rf "$datadir"' EXIT
for _ in $(seq 100); do
    grep -q 'JSON-RPC on' "$log" && break
    kill -0 $node_pid || { cat "$log"; exit 1; }
    sleep 0.1
done
node "$here/ethers.mjs" "$ethers_dir/node_modules" "$port" "$here/../contracts/StaveToken.bin"
# Metrics are served while the node runs.
curl -sf "http://127.0.0.1:$((port + 1))/metrics" | grep -q stave_stage_seconds
kill -TERM $node_pid
wait $node_pid
grep -q 'SIGTERM: stopping' "$log"
