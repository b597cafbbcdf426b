# Shared by the testnet measurements (sourced, not run): the binary, a scratch directory
# removed on exit, JSON-RPC helpers, and a 4-validator testnet on high ports.
#
# STAVE (default: the release binary under $CARGO_TARGET_DIR, or ~/.cache/stave-target)
# names the binary; build it first (`./scripts/bench.sh` does). Needs curl and python3.
set -euo pipefail
STAVE="${STAVE:-${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}/release/stave}"
[ -x "$STAVE" ] || { echo "no stave binary at $STAVE (build it, or set STAVE)" >&2; exit 1; }
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  # CONT too: a stopped process (catchup.sh CRASH=stop) acts on TERM only once continued.
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

RPC0=18545; METRICS0=19001; P2P0=31300

# rpc PORT METHOD [PARAMS]: one JSON-RPC call, the raw answer.
rpc() {
  curl -s -XPOST -H 'content-type: application/json' "127.0.0.1:$1" \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":${3:-[]}}"
}

# head_of PORT: the node's block number, or -1 while it does not answer.
head_of() {
  rpc "$1" eth_blockNumber | python3 -c 'import sys,json; print(int(json.load(sys.stdin)["result"],16))' 2>/dev/null || echo -1
}

# block_of PORT N: "hash stateRoot" of block N.
block_of() {
  rpc "$1" eth_getBlockByNumber "[\"$(printf 0x%x "$2")\",false]" \
    | python3 -c 'import sys,json; r=json.load(sys.stdin)["result"]; print(r["hash"], r["stateRoot"])'
}

# txs_to PORT N: transactions in blocks 1..N.
txs_to() {
  for ((b = 1; b <= $2; b++)); do
    rpc "$1" eth_getBlockTransactionCountByNumber "[\"$(printf 0x%x $b)\"]"; echo
  done | python3 -c 'import sys,json; print(sum(int(json.loads(l)["result"],16) for l in sys.stdin if l.strip()))'
}

# load PORT ACCOUNTS TXS RATE: `stave load` against one node; prints its JSON line.
load() {
  "$STAVE" load --rpc "http://127.0.0.1:$1" --accounts "$2" --txs "$3" --rate "$4" --json 2>/dev/null | tail -1
}

# wait_for PORT: until the node answers JSON-RPC (30 s at most).
wait_for() {
  for _ in $(seq 300); do [ "$(head_of "$1")" -ge 0 ] && return 0; sleep 0.1; done
  echo "node on port $1 did not answer" >&2; exit 1
}

# start_dev DIR [NODE ARGS...]: a dev node with its files in DIR, on RPC0 and METRICS0,
# with NODE ARGS added; its pid in DEV_PID once it answers JSON-RPC.
start_dev() {
  local dir="$1"; shift
  mkdir -p "$dir"
  "$STAVE" node --dev --datadir "$dir/data" --rpc-addr "127.0.0.1:$RPC0" \
    --metrics-addr "127.0.0.1:$METRICS0" "$@" > "$dir/node.log" 2>&1 &
  DEV_PID=$!
  PIDS+=("$DEV_PID")
  wait_for "$RPC0"
}

# start_testnet: 4 validators under $WORK/tn (node i: RPC RPC0+i, metrics, P2P likewise),
# and whatever more TESTNET_ARGS asks for (`--full-nodes 2`: nodes 4 and 5);
# TESTNET_TOML, if set, is appended to every node's config (e.g. an `[rpc]` section);
# TESTNET_ARGS, if set, are more `stave testnet init` arguments (e.g. `--epoch-length 50`);
# what init printed (one JSON line a node) is kept in $WORK/tn.jsonl.
start_testnet() {
  # shellcheck disable=SC2086 # TESTNET_ARGS is a list of words.
  "$STAVE" testnet init --nodes 4 --dir "$WORK/tn" --rpc-port $RPC0 --metrics-port $METRICS0 \
    --p2p-port $P2P0 ${TESTNET_ARGS:-} > "$WORK/tn.jsonl"
  if [ -n "${TESTNET_TOML:-}" ]; then
    for config in "$WORK"/tn/node*/config.toml; do printf '\n%s\n' "$TESTNET_TOML" >> "$config"; done
  fi
  "$STAVE" testnet run --dir "$WORK/tn" > "$WORK/testnet.log" 2>&1 &
  PIDS+=($!)
  # Every node that serves JSON-RPC (validators, spare ones, full nodes).
  local i=0 line
  while read -r line; do
    case "$line" in *'"rpc":null'*) ;; *) wait_for $((RPC0 + i)) ;; esac
    i=$((i + 1))
  done < "$WORK/tn.jsonl"
}

# node_pids: the pids of the testnet's 4 node processes in node order (the children of
# `stave testnet run`, each named by its config's directory on its command line).
node_pids() {
  local i pid
  for i in 0 1 2 3; do
    for pid in $(pgrep -P "${PIDS[0]}"); do
      tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "node$i/" && echo "$pid"
    done
  done
}
