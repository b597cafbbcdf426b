#!/usr/bin/env bash
# #12's catch-up under load: 4 validators take LAG0 transactions; validator 3 (or NODE) is
# SIGKILLed; the others take LAG more; then it restarts while a second load of BUSY
# transactions at RATE keeps the chain producing. Reports, over the same window (from
# validator 3's process start until its head meets validator 0's), the transactions per
# second it imported and those the chain finalized, its import rate against the healthy
# chain's (the first load's included rate), and checks both end at the same block hash
# and state root.
#
# NODE=5 FULL=1 measures a full node instead (the testnet gets `--full-nodes 2`, and node
# 5, a full node, is the one that crashes): it catches up on certified runs as a validator
# does, with no engine to replay.
#
# CRASH=stop measures a node that lagged instead of one that restarted: validator 3 is
# SIGSTOPped rather than killed and SIGCONTed rather than restarted (the window starts at
# SIGCONT), so it keeps its process, its connections and what peers queued for it.
#
# Usage: bench/testnet/catchup.sh     (LAG0 30000, LAG 60000, BUSY 40000, RATE max, CRASH kill)
source "$(dirname "$0")/lib.sh"
LAG0="${LAG0:-30000}"; LAG="${LAG:-60000}"; BUSY="${BUSY:-40000}"; RATE="${RATE:-max}"
CRASH="${CRASH:-kill}"; NODE="${NODE:-3}"
if [ "${FULL:-0}" = 1 ]; then TESTNET_ARGS="--full-nodes 2 ${TESTNET_ARGS:-}"; fi
case "$CRASH" in kill | stop) ;; *) echo "CRASH must be kill or stop" >&2; exit 2 ;; esac
RPC3=$((RPC0 + NODE))

start_testnet
healthy="$(load $RPC0 200 "$LAG0" max)"
echo "healthy, $LAG0 txs: $healthy"
node3="$(pgrep -f "$WORK/tn/node$NODE/config.toml" | head -1)"
if [ "$CRASH" = kill ]; then
  kill -9 "$node3"; what=SIGKILLed
else
  kill -STOP "$node3"; what=SIGSTOPped; PIDS+=("$node3")
fi
sleep 0.5
killed="$(head_of $RPC0)"
echo "node $NODE $what at block $killed; $LAG txs into the others: $(load $RPC0 200 "$LAG" max)"

load $((RPC0 + 1)) 300 "$BUSY" "$RATE" > "$WORK/busy.json" &
busy=$!; PIDS+=($busy)
sleep 1.5
produced_from="$(head_of $RPC0)"
start="$(date +%s.%N)"
if [ "$CRASH" = kill ]; then
  "$STAVE" node --config "$WORK/tn/node$NODE/config.toml" >> "$WORK/tn/node$NODE/node.log" 2>&1 &
  PIDS+=($!)
else
  kill -CONT "$node3"
fi
# One poller reading both heads back to back every 10 ms (heads.py).
read -r synced_from sync_start chain_at_sync h3 end < <(PYTHONPATH="$(dirname "$0")" python3 - "$RPC3" "$RPC0" "$killed" <<'PY'
import sys, time
from heads import head
rpc3, rpc0, killed = map(int, sys.argv[1:4])
first = None
while True:
    h3 = head(rpc3)
    h0 = head(rpc0)
    if first is None and h3 > killed:
        first = (h3, time.time(), h0)
    if h3 > killed and h0 >= 0 and h3 >= h0:
        print(*first, h3, time.time())
        break
    time.sleep(0.01)
PY
)
wait $busy || true
echo "second load: $(cat "$WORK/busy.json")"
python3 - "$start" "$end" "$killed" "$produced_from" "$h3" \
  "$(txs_to $RPC0 "$killed")" "$(txs_to $RPC0 "$produced_from")" "$(txs_to $RPC0 "$h3")" \
  "$sync_start" "$(txs_to $RPC0 "$synced_from")" "$(txs_to $RPC0 "$chain_at_sync")" \
  "$(echo "$healthy" | python3 -c 'import sys,json; print(json.load(sys.stdin)["included_tps"])')" "$NODE" <<'PY'
import sys
node = sys.argv[13]
start, end = float(sys.argv[1]), float(sys.argv[2])
killed, produced_from, caught = map(int, sys.argv[3:6])
at_kill, at_restart, at_end = map(int, sys.argv[6:9])
sync_start = float(sys.argv[9])
at_first_import, chain_at_sync = map(int, sys.argv[10:12])
window = end - start
imported, produced = at_end - at_kill, at_end - at_restart
print(f"window {window:.2f} s from process start (or SIGCONT): node {node} imported {caught - killed} blocks, "
      f"{imported} txs = {imported / window:.0f} tx/s")
print(f"the chain finalized {caught - produced_from} blocks, {produced} txs = {produced / window:.0f} tx/s "
      f"in the same window: catch-up {imported / max(produced, 1):.1f}x the production rate")
sync = max(end - sync_start, 1e-3)
synced, produced = at_end - at_first_import, at_end - chain_at_sync
print(f"sync alone, {sync:.2f} s from its first imported block: {synced} txs = {synced / sync:.0f} tx/s "
      f"against {produced / sync:.0f} tx/s finalized: {synced / max(produced, 1):.1f}x")
healthy = float(sys.argv[12])
print(f"against the healthy 4-validator rate of the first load ({healthy:.0f} tx/s included): "
      f"catch-up {imported / window / max(healthy, 1):.1f}x, sync alone {synced / sync / max(healthy, 1):.1f}x")
PY
a="$(block_of $RPC0 "$h3")"; b="$(block_of $RPC3 "$h3")"
echo "block $h3: validator 0 $a; node $NODE $b"
[ "$a" = "$b" ] || { echo "node $NODE disagrees" >&2; exit 1; }
