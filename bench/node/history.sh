#!/usr/bin/env bash
# What keeping every block's state costs (#65): `stave load --rate max` against a dev node
# that keeps the history (`--history all`, the dev default) and one that keeps only the
# last 128 blocks' (`--history recent`). ROUNDS pairs, alternating; each prints both
# included TPS figures and the data file's growth per transaction after a clean stop
# (SIGTERM writes every layer, so both data dirs hold all of their state).
#
#   ROUNDS=3 TXS=100000 WORKLOAD=transfer bench/node/history.sh
# shellcheck source=../testnet/lib.sh
source "$(dirname "$0")/../testnet/lib.sh"
ROUNDS="${ROUNDS:-3}"; TXS="${TXS:-100000}"; ACCOUNTS="${ACCOUNTS:-200}"
WORKLOAD="${WORKLOAD:-transfer}"

# run HISTORY: a fresh dev node keeping HISTORY, loaded; prints "TPS BYTES_PER_TX".
run() {
  local dir="$WORK/node-$RANDOM"
  start_dev "$dir" --history "$1"
  local pid=$DEV_PID
  local before
  before=$(du -B1 "$dir/data/data.mdb" | cut -f1)
  local tps
  tps=$("$STAVE" load --rpc "http://127.0.0.1:$RPC0" --accounts "$ACCOUNTS" --txs "$TXS" \
    --workload "$WORKLOAD" --rate max --json 2>/dev/null | tail -1 \
    | python3 -c 'import sys,json; print(json.load(sys.stdin)["included_tps"])')
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  local after
  after=$(du -B1 "$dir/data/data.mdb" | cut -f1)
  echo "$tps $(( (after - before) / TXS ))"
  rm -rf "$dir"
}

for ((round = 1; round <= ROUNDS; round++)); do
  read -r all_tps all_bytes <<< "$(run all)"
  read -r recent_tps recent_bytes <<< "$(run recent)"
  python3 -c "print(f'round $round ($WORKLOAD): history all {float($all_tps):,.0f} tx/s, {$all_bytes} B/tx; recent {float($recent_tps):,.0f} tx/s, {$recent_bytes} B/tx; TPS ratio {float($all_tps)/float($recent_tps):.3f}, disk ratio {$all_bytes/$recent_bytes:.3f}')"
done
