#!/usr/bin/env bash
# #12's throughput target, back to back on one machine: a single dev node, then 4
# validators (each transaction gossiped, verified, executed and committed 4 times), both
# under `stave load --rate max`, then the 4 validators at each fixed RATE given, for the
# confirmation latency at a load they sustain. Prints one labelled `stave load` JSON line
# per run and the dev/4 reference.
#
# Usage: bench/testnet/tps.sh [RATE...]      (TXS, default 50000, sets each run's size)
source "$(dirname "$0")/lib.sh"
TXS="${TXS:-50000}"

"$STAVE" node --dev --datadir "$WORK/dev" --rpc-addr 127.0.0.1:28545 \
  --metrics-addr 127.0.0.1:29001 > "$WORK/dev.log" 2>&1 &
DEV=$!; PIDS+=($DEV)
wait_for 28545
dev="$(load 28545 200 "$TXS" max)"
echo "dev node, rate max: $dev"
kill -TERM $DEV; wait $DEV || true

start_testnet
echo "4 validators, rate max: $(load $RPC0 200 "$TXS" max)"
for rate in "$@"; do
  echo "4 validators, rate $rate: $(load $RPC0 200 "$TXS" "$rate")"
done
python3 -c "import json,sys; d=json.loads(sys.argv[1]); t=d['included_tps']; print(f'dev/4 = {t/4:.0f} tx/s; the target 0.8 x dev/4 = {0.8*t/4:.0f} tx/s with p99 under 2 s')" "$dev"
