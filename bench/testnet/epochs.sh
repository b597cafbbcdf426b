#!/usr/bin/env bash
# Epoch boundaries under load: 4 validators with `--epoch-length LENGTH` take `stave load`
# at RATE for DURATION seconds; node 0's log times every finalized block. Prints one JSON
# line: blocks and epochs crossed, the load's report, and the gaps between consecutive
# finalizations (ms) at boundaries (an epoch's first block after the last block of the
# one before) beside all other gaps (p50, p99, max).
#
# With CHANGE=1 a fifth node (`--spare-validators 1`) runs beside them, and DURATION/3
# seconds into the load the committee adds it as a validator (`stave gov`): the line then
# also has the boundary at which the new set took over.
#
# Usage: bench/testnet/epochs.sh    (LENGTH 50, RATE 1000, DURATION 60, CHANGE 0)
source "$(dirname "$0")/lib.sh"
LENGTH="${LENGTH:-50}"; RATE="${RATE:-1000}"; DURATION="${DURATION:-60}"; CHANGE="${CHANGE:-0}"

export RUST_LOG="${RUST_LOG:-warn,stave_launch::validator=info,stave_consensus::epochs=info}"
TESTNET_ARGS="--epoch-length $LENGTH --spare-validators $CHANGE" start_testnet
# The committee: the dev mnemonic's accounts 0, 1 and 2 (a majority of 4), their
# well-known keys.
MEMBERS=(0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
  0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
  0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a)
changed_at=-1
if [ "$CHANGE" = 1 ]; then
  (
    sleep $((DURATION / 3))
    key=$(sed -n 5p "$WORK/tn.jsonl" | python3 -c 'import sys,json; print(json.load(sys.stdin)["validator"])')
    gov() { "$STAVE" gov "$@" --rpc "http://127.0.0.1:$RPC0"; }
    id=$(gov propose add-validator "$key" --key "${MEMBERS[0]}" | python3 -c 'import sys,json; print(int(json.load(sys.stdin)["proposal"], 0))')
    gov vote "$id" --key "${MEMBERS[1]}" > /dev/null
    gov vote "$id" --key "${MEMBERS[2]}" | python3 -c 'import sys,json; b=json.load(sys.stdin)["block"]; print(b if isinstance(b, int) else int(b, 0))' > "$WORK/changed_at"
  ) &
  change=$!
fi
report="$("$STAVE" load --rpc "http://127.0.0.1:$RPC0" --accounts 200 --rate "$RATE" \
  --duration "$DURATION" --json 2>/dev/null | tail -1)"
[ "$CHANGE" = 1 ] && wait "$change"
[ -s "$WORK/changed_at" ] && changed_at=$(cat "$WORK/changed_at")
python3 - "$WORK/tn/node0/node.log" "$LENGTH" "$report" "$changed_at" <<'PY'
import datetime, json, re, sys
log, length, report = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
changed_at = int(sys.argv[4])
# The first block of the epoch after the one the change applied in.
took_over = (changed_at // length + 1) * length if changed_at >= 0 else None
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
    "change": None if took_over is None else {
        "applied_in_block": changed_at, "new_set_from_block": took_over,
        "gap_ms": round((times[took_over] - times[took_over - 1]) * 1000, 1)
        if took_over in times and took_over - 1 in times else None,
    },
}))
PY
