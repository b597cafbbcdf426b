#!/usr/bin/env bash
# Epoch boundaries under load: 4 validators with `--epoch-length LENGTH` take `stave load`
# at RATE for DURATION seconds; node 0's log times every finalized block. Prints one JSON
# line: blocks and epochs crossed, the load's report, and the gaps between consecutive
# finalizations (ms) at boundaries (an epoch's first block after the last block of the
# one before) beside all other gaps (p50, p99, max).
#
# Usage: bench/testnet/epochs.sh    (LENGTH 50, RATE 1000, DURATION 60)
source "$(dirname "$0")/lib.sh"
LENGTH="${LENGTH:-50}"; RATE="${RATE:-1000}"; DURATION="${DURATION:-60}"

export RUST_LOG="${RUST_LOG:-warn,stave_launch::validator=info}"
TESTNET_ARGS="--epoch-length $LENGTH" start_testnet
report="$("$STAVE" load --rpc "http://127.0.0.1:$RPC0" --accounts 200 --rate "$RATE" \
  --duration "$DURATION" --json 2>/dev/null | tail -1)"
python3 - "$WORK/tn/node0/node.log" "$LENGTH" "$report" <<'PY'
import datetime, json, re, sys
log, length, report = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
times = {}
for line in open(log, errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    match = re.match(r"(\S+Z) .*block finalized number=(\d+)", line)
    if match:
        at = datetime.datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
        times[int(match.group(2))] = at.timestamp()
numbers = sorted(times)
boundary, other = [], []
for a, b in zip(numbers, numbers[1:]):
    if b != a + 1:
        continue
    gap = (times[b] - times[a]) * 1000
    (boundary if b % length == 0 else other).append(gap)
def summary(gaps):
    gaps = sorted(gaps)
    if not gaps:
        return None
    pick = lambda q: round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 1)
    return {"count": len(gaps), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(gaps[-1], 1)}
print(json.dumps({
    "epoch_length": length, "blocks": len(numbers),
    "epochs_crossed": len(boundary), "boundary_gaps": summary(boundary),
    "other_gaps": summary(other), "load": report,
}))
PY
