#!/usr/bin/env bash
# #63's targets on one testnet of 4 validators and 2 full nodes (`--full-nodes 2`), back to
# back on the same box: TXS transfers at RATE sent straight to validator 0, then the same
# number sent through the two full nodes (half to each, senders of their own), reporting
# each phase's included TPS and their ratio; while the full nodes take the load, a poller
# reads validator 0's and full node 4's heads every 10 ms and reports how many blocks the
# full node trails by (p50 / p99 / max). The catch-up rate of a full node is
# `NODE=5 FULL=1 bench/testnet/catchup.sh`.
#
# Usage: bench/testnet/fullnodes.sh     (TXS 40000, RATE max, ACCOUNTS 200)
source "$(dirname "$0")/lib.sh"
TXS="${TXS:-40000}"; RATE="${RATE:-max}"; ACCOUNTS="${ACCOUNTS:-200}"
# The dev mnemonic's second account funds the second full node's senders.
SECOND_FUNDER=0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
TESTNET_ARGS="--full-nodes 2 ${TESTNET_ARGS:-}" start_testnet
RPC4=$((RPC0 + 4)); RPC5=$((RPC0 + 5))

# load_from PORT FIRST TXS [ARGS...]: `stave load` with senders FIRST.. against one node.
load_from() {
  local port="$1" first="$2" txs="$3"; shift 3
  "$STAVE" load --rpc "http://127.0.0.1:$port" --accounts "$ACCOUNTS" --first-account "$first" \
    --txs "$txs" --rate "$RATE" --json "$@" 2>>"$WORK/load.err" | tail -1
}

# Warm-up, so both phases start on a chain past its first blocks.
load_from $RPC0 0 2000 > /dev/null
direct="$(load_from $RPC0 0 "$TXS")"
echo "straight to validator 0: $direct"

half=$((TXS / 2))
PYTHONPATH="$(dirname "$0")" python3 - "$RPC0" "$RPC4" "$WORK/lag.txt" <<'PY' &
import sys, time
from heads import head
v, f, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(out, "w") as lags:
    while True:
        a, b = head(v), head(f)
        if a >= 0 and b >= 0:
            lags.write(f"{max(a - b, 0)}\n"); lags.flush()
        time.sleep(0.01)
PY
poller=$!; PIDS+=($poller)
load_from $RPC4 10000 "$half" > "$WORK/full4.json" &
first=$!
load_from $RPC5 20000 "$half" --key "$SECOND_FUNDER" > "$WORK/full5.json"
wait $first
kill "$poller" 2>/dev/null || true
echo "through full node 4: $(cat "$WORK/full4.json")"
echo "through full node 5: $(cat "$WORK/full5.json")"
# The loads' own notes (stalls, repairs), progress bars left out.
grep -a -v 'tx/s\|^\s*$' "$WORK/load.err" | tail -5 >&2 || true
python3 - "$direct" "$WORK/full4.json" "$WORK/full5.json" "$WORK/lag.txt" <<'PY'
import json, sys
direct = json.loads(sys.argv[1])
a, b = (json.load(open(path)) for path in sys.argv[2:4])
lags = sorted(int(line) for line in open(sys.argv[4]) if line.strip())
for report in (direct, a, b):
    assert report["included"] == report["txs"], report
# Both loads ran side by side: their combined rate is all they included over the longer run.
through = (a["included"] + b["included"]) / max(a["duration_s"], b["duration_s"])
ratio = through / direct["included_tps"]
pct = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))]
print(json.dumps({
    "direct_tps": round(direct["included_tps"]),
    "through_full_nodes_tps": round(through),
    "ratio": round(ratio, 3),
    "full_node_lag_blocks": {"p50": pct(0.5), "p99": pct(0.99), "max": lags[-1], "samples": len(lags)},
}))
PY
a="$(block_of $RPC0 "$(head_of $RPC4)")"; b="$(block_of $RPC4 "$(head_of $RPC4)")"
[ "$a" = "$b" ] || { echo "full node 4 disagrees with validator 0: $a / $b" >&2; exit 1; }
